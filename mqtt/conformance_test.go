package mqtt

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/listen"
)

// TestReceiveMaximumExceeded: a client with more QoS 2 publishes
// unacknowledged (no PUBREL) than the server's Receive Maximum gets
// DISCONNECT 0x93 (receive maximum exceeded), and sees it: the rest of its
// input is drained before the close, so no TCP reset destroys the packet.
func TestReceiveMaximumExceeded(t *testing.T) {
	for _, n := range []int{DefaultReceiveMaximum + 1, 4 * DefaultReceiveMaximum} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ts := startServer(t, nil)
			release := ts.sink.hold() // appends wait, as for an fsync
			go func() { time.Sleep(50 * time.Millisecond); release() }()
			conn := dialRaw(t, ts.tcp, 5, "greedy")
			var burst bytes.Buffer
			for i := range n {
				burst.Write(rawPublish(5, 2, uint16(i+1), "rm/t", bytes.Repeat([]byte("x"), 512)))
			}
			// Written while reading, as a pipelining client does: the
			// server closes with part of it unread.
			go conn.Write(burst.Bytes())
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(conn)
			if err != nil {
				// A reset (the server closed with input unread) can destroy
				// the DISCONNECT before the client reads it.
				t.Fatalf("connection not closed cleanly: %v (after %d bytes)", err, len(b))
			}
			// Skip the PUBRECs (0x50) before the DISCONNECT.
			for len(b) >= 2 && b[0] == 0x50 {
				b = b[2+int(b[1]):]
			}
			if r, ok := disconnectReason(b); !ok || r != 0x93 {
				t.Fatalf("want DISCONNECT 0x93, got %x", b[:min(len(b), 16)])
			}
		})
	}
}

// TestServerKeepAlive: a client asking for no keep-alive, or for more than
// the server's cap, is given the cap in CONNACK's Server Keep Alive (MQTT
// 5), and the cap is enforced: a silent connection is closed after one
// and a half of it.
func TestServerKeepAlive(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxKeepAlive = 1 })
	for _, ka := range []uint16{0, 60} {
		if got, ok := connackServerKeepAlive(t, ts.tcp, ka); !ok || got != 1 {
			t.Fatalf("keep-alive %d: CONNACK Server Keep Alive %d (present %v), want 1", ka, got, ok)
		}
	}
	// A 3.1.1 client cannot be told, but the cap holds: silence closes it.
	conn := dialRaw(t, ts.tcp, 4, "quiet")
	start := time.Now()
	readUntilClosed(t, conn, 5*time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("silent 3.1.1 connection closed after %s, want about 1.5s", d)
	}
}

// connackServerKeepAlive connects with MQTT 5 and keep-alive ka and returns
// the CONNACK's Server Keep Alive property, if present.
func connackServerKeepAlive(t *testing.T, addr string, ka uint16) (uint16, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := append(mqttString("MQTT"), 5, 0x02, byte(ka>>8), byte(ka), 0x00)
	body = append(body, mqttString(fmt.Sprintf("ka-%d", ka))...)
	if _, err := conn.Write(packet(0x10, body)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if b, err := r.ReadByte(); err != nil || b != 0x20 {
		t.Fatalf("connack: %x %v", b, err)
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, n)
	if _, err := io.ReadFull(r, rest); err != nil {
		t.Fatal(err)
	}
	// flags, reason, property length (varint), properties
	props := rest[2:]
	plen, k := binary.Uvarint(props)
	props = props[k : k+int(plen)]
	for len(props) > 0 {
		id := props[0]
		props = props[1:]
		switch id {
		case 0x13: // Server Keep Alive
			return binary.BigEndian.Uint16(props), true
		case 0x11, 0x27: // four-byte integers
			props = props[4:]
		case 0x21, 0x22: // two-byte integers
			props = props[2:]
		case 0x24, 0x25, 0x28, 0x29, 0x2a: // bytes
			props = props[1:]
		case 0x12, 0x1a, 0x1c, 0x1f, 0x15: // strings
			l := int(binary.BigEndian.Uint16(props))
			props = props[2+l:]
		case 0x26: // user property: two strings
			l := int(binary.BigEndian.Uint16(props))
			props = props[2+l:]
			l = int(binary.BigEndian.Uint16(props))
			props = props[2+l:]
		default:
			t.Fatalf("unexpected CONNACK property %#x", id)
		}
	}
	return 0, false
}

// TestStalledConnections: sockets that never send CONNECT are closed after
// the handshake deadline, and connections over the caps are refused, while
// a well-behaved client connects and publishes.
func TestStalledConnections(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.Limits = listen.Config{HandshakeTimeout: 300 * time.Millisecond, MaxConnsPerIP: 50}
	})
	var stalled []net.Conn
	for range 60 {
		c, err := net.Dial("tcp", ts.tcp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stalled = append(stalled, c)
	}
	testkit.Eventually(t, 5*time.Second, "stalled connections closed", func() bool {
		st := ts.ListenerStats()["mqtt"]
		return st.HandshakeTimeouts == 50 && st.RefusedPerIP == 10 && st.Open == 0
	})
	for _, c := range stalled {
		readUntilClosed(t, c, 2*time.Second)
	}
	good := dialPaho(t, ts.tcp, "good", nil)
	mustPublish(t, good, "ok/t", 1, "fine")
	time.Sleep(500 * time.Millisecond) // past the deadline: a connected client stays
	mustPublish(t, good, "ok/t", 1, "still fine")
}

// TestRetainedAndSessionCaps: retained publishes beyond the topic or byte
// cap are refused with 0x97 and never reach the sink, replacing and
// clearing stay allowed; a new session beyond MaxSessions gets CONNACK
// 0x97 while an existing client id may reconnect.
func TestRetainedAndSessionCaps(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxRetained, c.MaxRetainedBytes, c.MaxSessions = 2, 100, 3 })
	c := dialPaho(t, ts.tcp, "r1", nil)
	pub := func(topic string, n int) byte {
		resp, _ := publish(t, c, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: bytes.Repeat([]byte("r"), n)})
		if resp == nil {
			t.Fatalf("no PUBACK for %s", topic)
		}
		return resp.ReasonCode
	}
	if rc := pub("ret/a", 10); rc != 0 {
		t.Fatalf("first retained: %#x", rc)
	}
	if rc := pub("ret/b", 10); rc != 0 {
		t.Fatalf("second retained: %#x", rc)
	}
	before := ts.sink.len()
	if rc := pub("ret/c", 10); rc != 0x97 {
		t.Fatalf("third retained topic: %#x, want 0x97", rc)
	}
	if rc := pub("ret/a", 95); rc != 0x97 {
		t.Fatalf("retained bytes over the cap: %#x, want 0x97", rc)
	}
	if n := ts.sink.len(); n != before {
		t.Fatalf("%d refused retained publishes reached the sink", n-before)
	}
	if rc := pub("ret/a", 50); rc != 0 {
		t.Fatalf("replacing within the cap: %#x", rc)
	}
	if rc := pub("ret/b", 0); rc != 0 {
		t.Fatalf("clearing: %#x", rc)
	}
	if rc := pub("ret/c", 10); rc != 0 {
		t.Fatalf("after a clear: %#x", rc)
	}
	if st := ts.Stats(); st.RefusedRetained != 2 || st.Retained != 2 {
		t.Fatalf("stats %+v", st)
	}

	dialPaho(t, ts.tcp, "r2", nil)
	dialPaho(t, ts.tcp, "r3", nil)
	conn := dialRawNoCheck(t, ts.tcp, 5, "r4")
	if rc := connackReason(t, conn); rc != 0x97 {
		t.Fatalf("fourth session: CONNACK %#x, want 0x97", rc)
	}
	if st := ts.Stats(); st.RefusedSessions != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func dialRawNoCheck(t *testing.T, addr string, level byte, clientID string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(rawConnect(level, clientID)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// connackReason reads a CONNACK and returns its reason code.
func connackReason(t *testing.T, conn net.Conn) byte {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(conn, hdr); err != nil || hdr[0] != 0x20 {
		t.Fatalf("read connack: %v %x", err, hdr)
	}
	rest := make([]byte, hdr[1])
	if _, err := io.ReadFull(conn, rest); err != nil || len(rest) < 2 {
		t.Fatalf("read connack body: %v", err)
	}
	return rest[1]
}
