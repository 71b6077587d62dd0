package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/wal"
)

// rawConnectSession is an MQTT 5 CONNECT with the given clean start flag
// and a session expiry of 300 s, so that the session outlives the connection.
func rawConnectSession(clientID string, clean bool) []byte {
	flags := byte(0)
	if clean {
		flags = 0x02
	}
	body := append(mqttString("MQTT"), 5, flags, 0x00, 0x3c)
	body = append(body, 5, 0x11, 0, 0, 0x01, 0x2c) // properties: session expiry 300
	body = append(body, mqttString(clientID)...)
	return packet(0x10, body)
}

// readPacket reads one MQTT packet: its first byte and its body.
func readPacket(r *bufio.Reader) (byte, []byte, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(r) // MQTT's variable byte integer is a uvarint
	if err != nil {
		return 0, nil, err
	}
	body := make([]byte, n)
	_, err = io.ReadFull(r, body)
	return first, body, err
}

// connectRaw sends CONNECT and reads CONNACK; it returns the reader.
func connectRaw(t *testing.T, addr string, connect []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(connect); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, body, err := readPacket(r)
	if err != nil || first != 0x20 || len(body) < 2 || body[1] != 0 {
		t.Fatalf("connack: %v %x %x", err, first, body)
	}
	return conn, r
}

// readAcks reads n acknowledgements (PUBACK 0x40 or PUBREC 0x50) and
// returns their packet ids and reason codes in order.
func readAcks(t *testing.T, conn net.Conn, r *bufio.Reader, n int) (ids []uint16, codes []byte) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(ids) < n {
		first, body, err := readPacket(r)
		if err != nil {
			t.Fatalf("after %d acks (%v): %v", len(ids), ids, err)
		}
		if first != 0x40 && first != 0x50 || len(body) < 2 {
			t.Fatalf("packet %x %x, want an acknowledgement", first, body)
		}
		code := byte(0)
		if len(body) > 2 {
			code = body[2]
		}
		ids = append(ids, binary.BigEndian.Uint16(body))
		codes = append(codes, code)
	}
	return ids, codes
}

// TestPipelinedAcksInOrder: one connection's QoS 1 publishes are all read
// and appended while the first waits for the sink (they would share one
// group commit), and their PUBACKs come in the order of the publishes
// once the sink lets them through — and only then.
func TestPipelinedAcksInOrder(t *testing.T) {
	for _, level := range []byte{4, 5} {
		t.Run(fmt.Sprint("mqtt", level), func(t *testing.T) {
			ts := startServer(t, nil)
			release := ts.sink.hold()
			defer release()
			conn := dialRaw(t, ts.tcp, level, "pipe")
			const n = 40
			var burst bytes.Buffer
			for i := range n {
				burst.Write(rawPublish(level, 1, uint16(i+1), "pipe/t", []byte{byte(i)}))
			}
			if _, err := conn.Write(burst.Bytes()); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, "every publish of the connection appending at once",
				func() bool { return ts.sink.held() == n })
			_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if b, _ := io.ReadAll(conn); len(b) > 0 {
				t.Fatalf("acknowledged before durable: %x", b)
			}
			release()
			ids, codes := readAcks(t, conn, bufio.NewReader(conn), n)
			for i, id := range ids {
				if id != uint16(i+1) || codes[i] != 0 {
					t.Fatalf("ack %d: id %d code %#x (ids %v)", i, id, codes[i], ids)
				}
			}
			recs := ts.sink.byTopic("pipe/t")
			if len(recs) != n {
				t.Fatalf("%d records", len(recs))
			}
			for i, r := range recs {
				if r.Value[0] != byte(i) {
					t.Fatalf("record %d is publish %d", i, r.Value[0])
				}
			}
			if st := ts.Stats(); st.Accepted[1] != n {
				t.Fatalf("accepted %v", st.Accepted)
			}
		})
	}
}

// reverseSink completes pipelined appends in the reverse order of the
// calls, once release is called: the server must still ack in order.
type reverseSink struct {
	memSink
	mu2   sync.Mutex
	queue []func()
}

func (r *reverseSink) AppendPipelined(ctx context.Context, rec *tributary.Record, done func(error)) error {
	r.mu2.Lock()
	defer r.mu2.Unlock()
	r.queue = append(r.queue, func() { done(r.Append(ctx, rec)) })
	return nil
}

func (r *reverseSink) pending() int {
	r.mu2.Lock()
	defer r.mu2.Unlock()
	return len(r.queue)
}

func (r *reverseSink) release() {
	r.mu2.Lock()
	q := r.queue
	r.queue = nil
	r.mu2.Unlock()
	for i := len(q) - 1; i >= 0; i-- {
		q[i]()
	}
}

// TestPipelinedAcksOrderedWhateverTheSink: completions arriving in reverse
// order, one of them failed, are still answered in the publishes' order;
// the failed one gets its refusal code in its place.
func TestPipelinedAcksOrderedWhateverTheSink(t *testing.T) {
	sink := &reverseSink{}
	s, err := New(Config{TCPAddr: "127.0.0.1:0", NodeID: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, appender(sink))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	conn, r := connectRaw(t, s.Addrs()[ListenerTCP], rawConnect(5, "rev"))
	for i := range 10 {
		if _, err := conn.Write(rawPublish(5, 1+byte(i%2), uint16(i+1), "rev/t", []byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "ten pending", func() bool { return sink.pending() == 10 })
	sink.release()
	ids, codes := readAcks(t, conn, r, 10)
	for i, id := range ids {
		if id != uint16(i+1) || codes[i] != 0 {
			t.Fatalf("acks %v codes %v", ids, codes)
		}
	}
	// The second of two publishes fails and is completed first: its
	// refusal still comes after the first one's PUBACK.
	for i, payload := range []string{"ok", "refused"} {
		if _, err := conn.Write(rawPublish(5, 1, uint16(11+i), "rev/t", []byte(payload))); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "two pending", func() bool { return sink.pending() == 2 })
	sink.mu2.Lock()
	first, second := sink.queue[0], sink.queue[1]
	sink.queue = nil
	sink.mu2.Unlock()
	sink.setFail(wal.ErrBudgetExceeded)
	second()
	sink.setFail(nil)
	_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if b, _ := r.Peek(1); len(b) > 0 {
		t.Fatalf("refusal answered before the earlier publish: %x", b)
	}
	first()
	ids, codes = readAcks(t, conn, r, 2)
	if ids[0] != 11 || codes[0] != 0 || ids[1] != 12 || codes[1] != 0x97 {
		t.Fatalf("acks %v codes %x", ids, codes)
	}
}

// TestPipelinedReceiveMaximum: an MQTT 5 client with one QoS 1 publish
// more unacknowledged than the Receive Maximum gets DISCONNECT 0x93; an
// MQTT 3.1.1 client, which cannot be told the limit, is read no further
// until acknowledgements make room, and loses nothing.
func TestPipelinedReceiveMaximum(t *testing.T) {
	const rm = 8
	ts := startServer(t, func(c *Config) { c.ReceiveMaximum = rm })
	release := ts.sink.hold()
	conn, r := connectRaw(t, ts.tcp, rawConnect(5, "greedy1"))
	var burst bytes.Buffer
	for i := range rm + 1 {
		burst.Write(rawPublish(5, 1, uint16(i+1), "rm/t", []byte("x")))
	}
	go conn.Write(burst.Bytes()) // written while the server reads and disconnects
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, body, err := readPacket(r)
	if err != nil || first != 0xe0 || len(body) < 1 || body[0] != 0x93 {
		t.Fatalf("want DISCONNECT 0x93, got %v %x %x", err, first, body)
	}
	if st := ts.Stats(); st.RefusedReceiveMaximum != 1 {
		t.Fatalf("refused receive maximum %d", st.RefusedReceiveMaximum)
	}
	release()
	// Exactly at the limit is allowed.
	release = ts.sink.hold()
	conn, r = connectRaw(t, ts.tcp, rawConnect(5, "fits"))
	var fits bytes.Buffer
	for i := range rm {
		fits.Write(rawPublish(5, 1, uint16(i+1), "rm/fits", []byte("x")))
	}
	if _, err := conn.Write(fits.Bytes()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "rm pending", func() bool { return ts.sink.held() == rm })
	release()
	if ids, _ := readAcks(t, conn, r, rm); len(ids) != rm {
		t.Fatal(ids)
	}

	release = ts.sink.hold()
	conn3 := dialRaw(t, ts.tcp, 4, "greedy311")
	var b311 bytes.Buffer
	const n = 3 * rm
	for i := range n {
		b311.Write(rawPublish(4, 1, uint16(i+1), "rm/311", []byte{byte(i)}))
	}
	go conn3.Write(b311.Bytes())
	testkit.Eventually(t, 5*time.Second, "rm pending", func() bool { return ts.sink.held() == rm })
	time.Sleep(100 * time.Millisecond)
	if h := ts.sink.held(); h != rm {
		t.Fatalf("%d appends of a 3.1.1 client at once, want the limit %d", h, rm)
	}
	release()
	ids, _ := readAcks(t, conn3, bufio.NewReader(conn3), n)
	for i, id := range ids {
		if id != uint16(i+1) {
			t.Fatalf("acks %v", ids)
		}
	}
	if got := len(ts.sink.byTopic("rm/311")); got != n {
		t.Fatalf("%d records", got)
	}
}

// TestPipelinedTakeover: a client reconnects to its session while its QoS
// 1 and 2 publishes are still pending and re-sends them (DUP). They are
// not logged twice; the acknowledgements come on the new connection, in
// order, and nothing is written into the old one after the takeover. A
// takeover with clean start forgets the pending publishes: durable, but
// neither acknowledged nor delivered.
func TestPipelinedTakeover(t *testing.T) {
	ts := startServer(t, nil)
	var rcv received
	sub := dialPaho(t, ts.tcp, "watcher", &rcv)
	subscribe(t, sub, "take/#", 2)

	release := ts.sink.hold()
	old, oldR := connectRaw(t, ts.tcp, rawConnectSession("dev", false))
	var burst bytes.Buffer
	for i := range 6 {
		burst.Write(rawPublish(5, 1+byte(i%2), uint16(i+1), "take/t", []byte{byte(i)}))
	}
	if _, err := old.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "six pending", func() bool { return ts.sink.held() == 6 })

	conn, r := connectRaw(t, ts.tcp, rawConnectSession("dev", false))
	burst.Reset()
	for i := range 6 {
		p := rawPublish(5, 1+byte(i%2), uint16(i+1), "take/t", []byte{byte(i)})
		p[0] |= 0x08 // DUP
		burst.Write(p)
	}
	if _, err := conn.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "re-sends seen", func() bool { return ts.Stats().Resent == 6 })
	release()
	ids, codes := readAcks(t, conn, r, 6)
	for i := range ids {
		if ids[i] != uint16(i+1) || codes[i] != 0 {
			t.Fatalf("acks %v codes %x", ids, codes)
		}
	}
	// The old connection got the takeover DISCONNECT and nothing after it.
	_ = old.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		first, body, err := readPacket(oldR)
		if err != nil {
			break
		}
		if first != 0xe0 || len(body) < 1 || body[0] != 0x8e {
			t.Fatalf("old connection got %x %x", first, body)
		}
	}
	// A QoS 2 publish re-sent after its PUBREC, before PUBREL, gets the
	// PUBREC again and is not logged again.
	p := rawPublish(5, 2, 2, "take/t", []byte{1})
	p[0] |= 0x08
	if _, err := conn.Write(p); err != nil {
		t.Fatal(err)
	}
	if ids, codes := readAcks(t, conn, r, 1); ids[0] != 2 || codes[0] != 0 {
		t.Fatalf("pubrec again: %v %x", ids, codes)
	}
	// QoS 2: PUBREL completes each PUBREC with PUBCOMP.
	for _, id := range []uint16{2, 4, 6} {
		if _, err := conn.Write(packet(0x62, binary.BigEndian.AppendUint16(nil, id))); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		first, body, err := readPacket(r)
		if err != nil || first != 0x70 || binary.BigEndian.Uint16(body) != id {
			t.Fatalf("pubcomp %d: %v %x %x", id, err, first, body)
		}
	}
	if got := len(ts.sink.byTopic("take/t")); got != 6 {
		t.Fatalf("%d records, want 6 (re-sends not logged again)", got)
	}
	testkit.Eventually(t, 5*time.Second, "six delivered once each", func() bool { return len(rcv.all()) == 6 })

	// Clean start: the pending publishes are forgotten.
	release = ts.sink.hold()
	if _, err := conn.Write(rawPublish(5, 1, 9, "take/lost", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "one pending", func() bool { return ts.sink.held() == 1 })
	clean, cleanR := connectRaw(t, ts.tcp, rawConnectSession("dev", true))
	release()
	testkit.Eventually(t, 5*time.Second, "durable", func() bool { return len(ts.sink.byTopic("take/lost")) == 1 })
	mustWriteRead := func() {
		if _, err := clean.Write(rawPublish(5, 1, 9, "take/new", []byte("y"))); err != nil {
			t.Fatal(err)
		}
	}
	mustWriteRead()
	ids, _ = readAcks(t, clean, cleanR, 1)
	if ids[0] != 9 || len(ts.sink.byTopic("take/new")) != 1 {
		t.Fatalf("clean session: ack %v", ids)
	}
	time.Sleep(50 * time.Millisecond)
	for _, m := range rcv.all() {
		if m.Topic == "take/lost" {
			t.Fatal("a forgotten publish was delivered")
		}
	}
}

// TestPipelinedPahoQoS2AndProperties: a paho client with many QoS 1 and 2
// publishes in flight; every one completes, each reaches a subscriber
// once with its MQTT 5 properties, and a NoLocal subscription of the
// publisher itself receives none of its own.
func TestPipelinedPahoQoS2AndProperties(t *testing.T) {
	ts := startServer(t, nil)
	var rcv, own received
	sub := dialPaho(t, ts.tcp, "sub", &rcv)
	subscribe(t, sub, "props/#", 2)
	pub := dialPaho(t, ts.tcp, "pub", &own)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "props/#", QoS: 1, NoLocal: true}}}); err != nil {
		t.Fatal(err)
	}
	release := ts.sink.hold()
	const n = 48
	errs := make(chan error, n)
	for i := range n {
		go func() {
			resp, err := pub.Publish(context.Background(), &paho.Publish{Topic: fmt.Sprintf("props/%d", i), QoS: 1 + byte(i%2),
				Payload: []byte{byte(i)}, Properties: &paho.PublishProperties{ContentType: "x/y",
					User: paho.UserProperties{{Key: "k", Value: fmt.Sprint(i)}}}})
			if err == nil && resp.ReasonCode >= 0x80 {
				err = fmt.Errorf("reason %#x", resp.ReasonCode)
			}
			errs <- err
		}()
	}
	testkit.Eventually(t, 5*time.Second, "many in flight on one connection", func() bool { return ts.sink.held() >= 16 })
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Second, "all delivered", func() bool { return len(rcv.all()) == n })
	seen := map[string]bool{}
	for _, m := range rcv.all() {
		if seen[m.Topic] {
			t.Fatalf("%s delivered twice", m.Topic)
		}
		seen[m.Topic] = true
		if m.Properties == nil || m.Properties.ContentType != "x/y" || len(m.Properties.User) != 1 ||
			m.Properties.User[0].Value != strings.TrimPrefix(m.Topic, "props/") {
			t.Fatalf("%s: properties %+v", m.Topic, m.Properties)
		}
	}
	if got := len(own.all()); got != 0 {
		t.Fatalf("NoLocal subscriber got %d of its own", got)
	}
	if got := len(ts.sink.records()); got != n {
		t.Fatalf("%d records", got)
	}
	if st := ts.Stats(); st.Accepted[1]+st.Accepted[2] != n {
		t.Fatalf("accepted %v", st.Accepted)
	}
}

// TestPipelinedMosquittoPub: mosquitto_pub reading lines from stdin keeps
// up to 20 QoS 1 (then QoS 2) messages in flight on its one connection;
// they are appended together and all arrive, in order.
func TestPipelinedMosquittoPub(t *testing.T) {
	bin, err := exec.LookPath("mosquitto_pub")
	if err != nil {
		t.Fatalf("mosquitto_pub not found (Debian package mosquitto-clients): %v", err)
	}
	ts := startServer(t, nil)
	for _, qos := range []string{"1", "2"} {
		release := ts.sink.hold()
		host, port, _ := strings.Cut(ts.tcp, ":")
		topic := "mosq/" + qos
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-V", "mqttv5", "-q", qos, "-M", "20",
			"-i", "mosq-"+qos, "-t", topic, "-l")
		var in bytes.Buffer
		const n = 200
		for i := range n {
			fmt.Fprintf(&in, "m%03d\n", i)
		}
		cmd.Stdin = &in
		out := &testkit.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "many in flight", func() bool { return ts.sink.held() >= 10 })
		release()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("mosquitto_pub qos %s: %v: %s", qos, err, out)
		}
		cancel()
		recs := ts.sink.byTopic(topic)
		if len(recs) != n {
			t.Fatalf("qos %s: %d records", qos, len(recs))
		}
		for i, r := range recs {
			if string(r.Value) != fmt.Sprintf("m%03d", i) {
				t.Fatalf("qos %s: record %d is %q", qos, i, r.Value)
			}
		}
	}
}

// TestPipelinedQoS2AcrossReconnect: a QoS 2 publish PUBREC'd and not yet
// released survives the connection: after a reconnect to the kept session
// the re-sent PUBLISH gets PUBREC again and is not logged again, and the
// PUBREL gets a successful PUBCOMP.
func TestPipelinedQoS2AcrossReconnect(t *testing.T) {
	ts := startServer(t, nil)
	conn, r := connectRaw(t, ts.tcp, rawConnectSession("q2", false))
	if _, err := conn.Write(rawPublish(5, 2, 7, "q2/t", []byte("once"))); err != nil {
		t.Fatal(err)
	}
	if ids, codes := readAcks(t, conn, r, 1); ids[0] != 7 || codes[0] != 0 {
		t.Fatalf("pubrec %v %x", ids, codes)
	}
	conn.Close()
	testkit.Eventually(t, 5*time.Second, "disconnected", func() bool { return ts.Stats().Clients == 0 })
	conn, r = connectRaw(t, ts.tcp, rawConnectSession("q2", false))
	p := rawPublish(5, 2, 7, "q2/t", []byte("once"))
	p[0] |= 0x08 // DUP
	if _, err := conn.Write(p); err != nil {
		t.Fatal(err)
	}
	if ids, codes := readAcks(t, conn, r, 1); ids[0] != 7 || codes[0] != 0 {
		t.Fatalf("pubrec again %v %x", ids, codes)
	}
	if _, err := conn.Write(packet(0x62, binary.BigEndian.AppendUint16(nil, 7))); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, body, err := readPacket(r)
	if err != nil || first != 0x70 || len(body) < 2 || binary.BigEndian.Uint16(body) != 7 || len(body) > 2 && body[2] != 0 {
		t.Fatalf("pubcomp: %v %x %x", err, first, body)
	}
	if got := len(ts.sink.byTopic("q2/t")); got != 1 {
		t.Fatalf("%d records, want 1", got)
	}
}
