package mqtt

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// testSink is how this package's tests store records: a blocking
// Append, and optionally the capabilities below, which sinkAppender maps
// onto the tributary.Appender the server takes.
type testSink interface {
	Append(ctx context.Context, recs ...*tributary.Record) error
}

// pipelinedSink queues a QoS 1/2 record (Submit, Durable).
type pipelinedSink interface {
	AppendPipelined(ctx context.Context, rec *tributary.Record, done func(error)) error
}

// queuedSink queues a QoS 0 record (Submit, Queued).
type queuedSink interface {
	AppendAsync(ctx context.Context, rec *tributary.Record, done func(error)) error
}

// confirmSink confirms a record stored but not confirmed.
type confirmSink interface {
	Confirm(ctx context.Context, rec *tributary.Record) error
}

// sinkAppender is a tributary.Appender over a testSink. A Queued write
// to a sink that cannot queue is stored before Submit returns; a Durable
// one to a sink that cannot pipeline too.
type sinkAppender struct{ s testSink }

func appender(s testSink) tributary.Appender { return sinkAppender{s} }

func (a sinkAppender) Submit(ctx context.Context, w *tributary.Write, wait tributary.Wait, done func(error)) (tributary.Ticket, error) {
	rec := w.Records[0]
	if q, ok := a.s.(queuedSink); ok && wait == tributary.Queued {
		return nil, q.AppendAsync(ctx, rec, done)
	}
	if p, ok := a.s.(pipelinedSink); ok && wait == tributary.Durable {
		return nil, p.AppendPipelined(ctx, rec, done)
	}
	if err := a.s.Append(ctx, w.Records...); err != nil {
		return nil, err
	}
	go done(nil)
	return nil, nil
}

func (a sinkAppender) Append(ctx context.Context, w *tributary.Write) error {
	return a.s.Append(ctx, w.Records...)
}

func (a sinkAppender) Confirm(ctx context.Context, rec *tributary.Record) error {
	if c, ok := a.s.(confirmSink); ok {
		return c.Confirm(ctx, rec)
	}
	return fmt.Errorf("%w: this sink cannot confirm", tributary.ErrNotReplicated)
}

// memSink is a testSink in memory: it records appends, can be switched to fail,
// and can hold every Append until released.
type memSink struct {
	mu      sync.Mutex
	recs    []*tributary.Record
	fail    error
	gate    chan struct{} // non-nil: Append waits until it is closed
	waiting int           // Appends currently held at the gate
	calls   int

	// storedFail: the next that many appends store their records and then
	// fail with an error wrapping tributary.ErrAfterAppend (replicas too
	// slow); confirmFail: the next that many Confirm calls fail.
	storedFail, confirmFail int
	confirmed               []*tributary.Record

	// AppendPipelined: calls are numbered and appended in call order,
	// like the WAL's committer, each waiting at the gate on its own.
	seq, nextSeq int
	turn         *sync.Cond
}

// AppendPipelined makes memSink a pipelinedSink: the server acknowledges
// asynchronously, in the order calls were made.
func (m *memSink) AppendPipelined(ctx context.Context, rec *tributary.Record, done func(error)) error {
	m.mu.Lock()
	if m.turn == nil {
		m.turn = sync.NewCond(&m.mu)
	}
	n := m.seq
	m.seq++
	m.mu.Unlock()
	// The gate is the one in place when the call is made, as a WAL append
	// is queued when called: a call made before a release is released
	// with it, even if its goroutine runs after a later hold.
	gate := m.enter()
	go func() {
		err := m.wait(ctx, gate)
		m.mu.Lock()
		for m.nextSeq != n {
			m.turn.Wait()
		}
		if err == nil {
			err = m.store([]*tributary.Record{rec})
		}
		m.nextSeq++
		m.turn.Broadcast()
		m.mu.Unlock()
		done(err)
	}()
	return nil
}

func (m *memSink) Append(ctx context.Context, recs ...*tributary.Record) error {
	if err := m.wait(ctx, m.enter()); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.store(recs)
}

// enter counts a call and returns the gate it must wait at, if any.
func (m *memSink) enter() chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if m.gate != nil {
		m.waiting++
	}
	return m.gate
}

// wait waits at gate (entered), if there is one.
func (m *memSink) wait(ctx context.Context, gate chan struct{}) error {
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
	case <-ctx.Done():
	}
	m.mu.Lock()
	m.waiting--
	m.mu.Unlock()
	return ctx.Err()
}

// store appends recs or fails (callers hold m.mu).
func (m *memSink) store(recs []*tributary.Record) error {
	if m.fail != nil {
		return m.fail
	}
	for _, r := range recs {
		r.Partition = 7
		r.Offset = int64(len(m.recs))
		m.recs = append(m.recs, r)
	}
	if m.storedFail > 0 {
		m.storedFail--
		return fmt.Errorf("%w: %w", tributary.ErrAfterAppend, tributary.ErrNotReplicated)
	}
	return nil
}

// Confirm makes memSink a confirmSink: it records rec (a stored one).
func (m *memSink) Confirm(ctx context.Context, rec *tributary.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec.Partition != 7 || rec.Offset < 0 || rec.Offset >= int64(len(m.recs)) {
		return fmt.Errorf("confirm of a record never stored: %+v", rec)
	}
	if m.confirmFail > 0 {
		m.confirmFail--
		return tributary.ErrNotReplicated
	}
	m.confirmed = append(m.confirmed, rec)
	return nil
}

func (m *memSink) confirms() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.confirmed)
}

func (m *memSink) setFail(err error) {
	m.mu.Lock()
	m.fail = err
	m.mu.Unlock()
}

// hold makes subsequent Appends wait; the returned func releases them.
func (m *memSink) hold() (release func()) {
	g := make(chan struct{})
	m.mu.Lock()
	m.gate = g
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			m.gate = nil
			m.mu.Unlock()
			close(g)
		})
	}
}

func (m *memSink) held() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waiting
}

func (m *memSink) records() []*tributary.Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*tributary.Record(nil), m.recs...)
}

func (m *memSink) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recs)
}

func (m *memSink) byTopic(topic string) []*tributary.Record {
	var out []*tributary.Record
	for _, r := range m.records() {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

type testServer struct {
	*Server
	sink *memSink
	logs *testkit.SyncBuffer
	tcp  string
	ws   string
}

// startServer starts a server on 127.0.0.1 port 0 with a memSink.
// TRIBUTARY_TEST_LOG=1 also prints the logs.
func startServer(t testing.TB, mutate func(*Config)) *testServer {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	var w io.Writer = logs
	if os.Getenv("TRIBUTARY_TEST_LOG") != "" {
		w = io.MultiWriter(logs, os.Stderr)
	}
	cfg := Config{
		TCPAddr: "127.0.0.1:0",
		WSAddr:  "127.0.0.1:0",
		NodeID:  "node-1",
		Routes: []Route{
			{Filter: "sensors/+/temp", Stream: "plant.temps"},
			{Filter: "sensors/#", Stream: "plant.sensors"},
		},
		DefaultStream: "default.mqtt",
		Logger:        slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	sink := &memSink{}
	s, err := New(cfg, appender(sink))
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	a := s.Addrs()
	return &testServer{Server: s, sink: sink, logs: logs, tcp: a[ListenerTCP], ws: a[ListenerWS]}
}

// received collects publishes a paho client receives.
type received struct {
	mu   sync.Mutex
	msgs []*paho.Publish
}

func (r *received) add(p paho.PublishReceived) (bool, error) {
	r.mu.Lock()
	r.msgs = append(r.msgs, p.Packet)
	r.mu.Unlock()
	return true, nil
}

func (r *received) all() []*paho.Publish {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*paho.Publish(nil), r.msgs...)
}

// dialPaho connects an MQTT 5 paho client; rcv (optional) collects what it receives.
func dialPaho(t testing.TB, addr, clientID string, rcv *received) *paho.Client {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	cfg := paho.ClientConfig{ClientID: clientID, Conn: conn}
	if rcv != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){rcv.add}
	}
	c := paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatalf("connect %s: %v", clientID, err)
	}
	if ca.ReasonCode != 0 {
		t.Fatalf("connect %s: reason %#x", clientID, ca.ReasonCode)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}

func publish(t testing.TB, c *paho.Client, p *paho.Publish) (*paho.PublishResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Publish(ctx, p)
}

func mustPublish(t testing.TB, c *paho.Client, topic string, qos byte, payload string) {
	t.Helper()
	resp, err := publish(t, c, &paho.Publish{Topic: topic, QoS: qos, Payload: []byte(payload)})
	if err != nil {
		t.Fatalf("publish %s qos %d: %v", topic, qos, err)
	}
	if qos > 0 && resp.ReasonCode >= 0x80 {
		t.Fatalf("publish %s qos %d: reason %#x", topic, qos, resp.ReasonCode)
	}
}

func subscribe(t testing.TB, c *paho.Client, filter string, qos byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil {
		t.Fatalf("subscribe %s: %v", filter, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
		t.Fatalf("subscribe %s: reasons %v", filter, sa.Reasons)
	}
}

// Raw packet encoders for the bad-input tests and fuzz seeds.

func varint(n int) []byte { return testkit.MQTTVarint(n) }

func mqttString(s string) []byte { return testkit.MQTTString(s) }

func packet(first byte, body []byte) []byte { return testkit.MQTTPacket(first, body) }

// rawConnect is a CONNECT with clean start, keep-alive 60s, protocol level 4 or 5.
func rawConnect(level byte, clientID string) []byte {
	body := append(mqttString("MQTT"), level, 0x02, 0x00, 0x3c)
	if level == 5 {
		body = append(body, 0x00) // no properties
	}
	body = append(body, mqttString(clientID)...)
	return packet(0x10, body)
}

// rawPublish is a PUBLISH; level 5 adds an empty property section.
func rawPublish(level, qos byte, id uint16, topic string, payload []byte) []byte {
	body := mqttString(topic)
	if qos > 0 {
		body = binary.BigEndian.AppendUint16(body, id)
	}
	if level == 5 {
		body = append(body, 0x00)
	}
	body = append(body, payload...)
	return packet(0x30|qos<<1, body)
}

// dialRaw opens a TCP connection and, if level > 0, connects and reads the CONNACK.
func dialRaw(t testing.TB, addr string, level byte, clientID string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	if level == 0 {
		return conn
	}
	if _, err := conn.Write(rawConnect(level, clientID)); err != nil {
		t.Fatalf("write connect: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(conn, hdr); err != nil || hdr[0] != 0x20 {
		t.Fatalf("read connack: %v %x", err, hdr)
	}
	rest := make([]byte, hdr[1])
	if _, err := io.ReadFull(conn, rest); err != nil {
		t.Fatalf("read connack body: %v", err)
	}
	if len(rest) < 2 || rest[1] != 0 {
		t.Fatalf("connack refused: %x", rest)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return conn
}

// readUntilClosed reads until the server closes the connection and returns
// what it sent; it fails the test if the connection stays open.
func readUntilClosed(t testing.TB, conn net.Conn, timeout time.Duration) []byte {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after %v (received %x)", timeout, b)
	}
	return b
}

// disconnectReason returns the reason code of a server DISCONNECT at the
// start of b (MQTT 5), if there is one.
func disconnectReason(b []byte) (byte, bool) {
	if len(b) >= 3 && b[0] == 0xe0 && b[1] >= 1 {
		return b[2], true
	}
	return 0, false
}
