package mqtt

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/internal/testkit"
)

// goodClient publishes QoS 1 messages until stopped and remembers which were
// acknowledged, so a test can check that none of them was lost.
type goodClient struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	acked []string
	err   error
}

func startGoodClient(t *testing.T, addr string) *goodClient {
	c := dialPaho(t, addr, "good", nil)
	g := &goodClient{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for i := 0; ; i++ {
			select {
			case <-g.stop:
				return
			default:
			}
			topic := "good/" + strconv.Itoa(i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(topic)})
			cancel()
			g.mu.Lock()
			if err != nil || resp.ReasonCode != 0 {
				g.err = err
				g.mu.Unlock()
				return
			}
			g.acked = append(g.acked, topic)
			g.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	return g
}

func (g *goodClient) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.acked)
}

// finish stops the client and checks that it never failed and that every
// acknowledged message is in the sink.
func (g *goodClient) finish(t *testing.T, sink *memSink) {
	t.Helper()
	close(g.stop)
	<-g.done
	if g.err != nil {
		t.Fatalf("good client failed: %v", g.err)
	}
	have := map[string]bool{}
	for _, r := range sink.records() {
		if r.ClientID == "good" {
			have[r.Topic] = true
		}
	}
	for _, topic := range g.acked {
		if !have[topic] {
			t.Fatalf("acknowledged %s lost", topic)
		}
	}
	if len(g.acked) == 0 {
		t.Fatal("good client published nothing")
	}
}

func TestBadInputClosesConnection(t *testing.T) {
	const maxPacket = 16 << 10
	ts := startServer(t, func(c *Config) { c.MaxPacketSize = maxPacket })
	good := startGoodClient(t, ts.tcp)

	pub5 := rawPublish(5, 1, 1, "bad/truncated", []byte("0123456789"))
	big := bytes.Repeat([]byte("x"), 2*maxPacket)
	cases := []struct {
		name       string
		level      byte   // 0: no CONNECT first
		send       []byte // written after the CONNECT
		halfClose  bool   // close our write side after sending (truncation)
		disconnect int    // MQTT 5 DISCONNECT reason expected first; -1: none expected
	}{
		{"publish before connect", 0, rawPublish(5, 1, 1, "bad/early", []byte("x")), false, -1},
		{"unknown packet type", 5, []byte{0x00, 0x00}, false, -1},
		{"bad remaining length", 5, []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, false, -1},
		{"truncated publish", 5, pub5[:len(pub5)-4], true, -1},
		{"truncated connect", 0, rawConnect(5, "half")[:8], true, -1},
		{"truncated header", 5, []byte{0x32}, true, -1},
		{"invalid utf-8 topic", 5, rawPublish(5, 1, 1, "bad/\xff\xfe", []byte("x")), false, -1},
		{"nul in topic", 4, rawPublish(4, 1, 1, "bad/\x00", []byte("x")), false, -1},
		{"wildcard + in topic v5", 5, rawPublish(5, 1, 1, "bad/+/x", []byte("x")), false, 0x82},
		{"wildcard # in topic v3.1.1", 4, rawPublish(4, 0, 0, "bad/#", []byte("x")), false, -1},
		{"reserved $SYS topic v5", 5, rawPublish(5, 1, 1, "$SYS/bad", []byte("x")), false, 0x90},
		{"reserved $SYS topic v3.1.1", 4, rawPublish(4, 1, 1, "$SYS/bad", []byte("x")), false, -1},
		{"qos 3", 5, append([]byte{0x36}, rawPublish(5, 1, 1, "bad/q3", nil)[1:]...), false, -1},
		{"qos 1 packet id 0", 5, rawPublish(5, 1, 0, "bad/id0", []byte("x")), false, 0x82},
		{"bad property length", 5, packet(0x32, append(append(mqttString("bad/props"), 0, 1), 0x05, 0x26)), false, -1},
		{"second connect", 5, rawConnect(5, "again"), false, -1},
		{"oversize v5", 5, rawPublish(5, 1, 1, "bad/big", big), false, -1},
		{"oversize v3.1.1", 4, rawPublish(4, 0, 0, "bad/big", big), false, -1},
	}
	before := ts.Stats()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialRaw(t, ts.tcp, tc.level, "bad-"+strconv.Itoa(int(tc.level)))
			if _, err := conn.Write(tc.send); err != nil {
				t.Fatalf("write: %v", err)
			}
			if tc.halfClose {
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			got := readUntilClosed(t, conn, 5*time.Second)
			if tc.disconnect >= 0 {
				if rc, ok := disconnectReason(got); !ok || rc != byte(tc.disconnect) {
					t.Errorf("want DISCONNECT %#x, got %x", tc.disconnect, got)
				}
			}
		})
	}
	for _, r := range ts.sink.records() {
		if r.ClientID != "good" {
			t.Errorf("bad input accepted: %+v", r)
		}
	}
	if st := ts.Stats(); st.RefusedTopic != before.RefusedTopic+2 {
		t.Errorf("reserved-topic refusals: %+v", st)
	}

	// The good client kept going throughout, and a new client still works.
	n := good.count()
	testkit.Eventually(t, 5*time.Second, "good client progressing", func() bool { return good.count() > n+5 })
	good.finish(t, ts.sink)
	late := dialPaho(t, ts.tcp, "late", nil)
	mustPublish(t, late, "late/t", 1, "still serving")
}

// paho v0.23.0 reads the server's Maximum Packet Size from CONNACK but does
// not enforce it: the oversize publish is sent and the server closes the
// connection without acknowledging or logging it.
func TestOversizeFromPahoClosesConnection(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.MaxPacketSize = 1024 })
	c := dialPaho(t, ts.tcp, "big", nil)
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Publish(ctx, &paho.Publish{Topic: "big/t", QoS: 1, Payload: make([]byte, 4096)})
		res <- err
	}()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed after an oversize publish")
	}
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("oversize publish acknowledged")
		}
	default: // paho waits for its context: not acknowledged either
	}
	if n := ts.sink.len(); n != 0 {
		t.Fatalf("%d records", n)
	}
	mustPublish(t, dialPaho(t, ts.tcp, "small", nil), "small/t", 1, "fits")
}

// mochi v2.7.9 panics decoding an MQTT 5 SUBSCRIBE whose filter lacks its
// options byte. The panic must close that connection only, clean up its
// session, and leave the node serving.
func TestDecoderPanicClosesOnlyThatConnection(t *testing.T) {
	ts := startServer(t, nil)
	good := startGoodClient(t, ts.tcp)
	badSubscribe := packet(0x82, append([]byte{0, 1, 0}, mqttString("a/b")...)) // no options byte

	for i, via := range []string{"tcp", "ws"} {
		var conn interface {
			Write([]byte) (int, error)
			Read([]byte) (int, error)
		}
		if via == "tcp" {
			conn = dialRaw(t, ts.tcp, 5, "panicker")
		} else {
			w := dialWS(t, ts.ws)
			if _, err := w.Write(rawConnect(5, "panicker")); err != nil {
				t.Fatal(err)
			}
			readFirst(t, w)
			conn = w
		}
		// A valid subscription first, so that its cleanup can be checked.
		if _, err := conn.Write(packet(0x82, append(append([]byte{0, 1, 0}, mqttString("panic/+")...), 1))); err != nil {
			t.Fatal(err)
		}
		if b := readFirst(t, conn); b[0] != 0x90 {
			t.Fatalf("%s: suback %x", via, b)
		}
		if _, err := conn.Write(badSubscribe); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf("%s: panic recovered", via), func() bool { return ts.Stats().Panics == uint64(i+1) })
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatalf("%s: connection still open", via)
		}
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf(

			"%s: session and subscription of the panicked client removed", via), func() bool {
			_, ok := ts.broker.Clients.Get("panicker")
			return !ok && len(ts.broker.Topics.Subscribers("panic/x").Subscriptions) == 0
		})

	}
	if !strings.Contains(ts.logs.String(), "broker panicked on client input") {
		t.Error("panic not logged")
	}
	n := good.count()
	testkit.Eventually(t, 5*time.Second, "good client progressing", func() bool { return good.count() > n+5 })
	good.finish(t, ts.sink)
}
