package cloudmqtt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/tabletest"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

const testStream = "factory.telemetry"

// testServer is a cloud MQTT server over a fresh catalog whose stream has
// n committed rows in partition 0 (topics factory/<i%3>/t).
func testServer(t *testing.T, n int) (*Server, *tables.Catalog) {
	t.Helper()
	cat, uri := testCatalog(t, n)
	return startServer(t, cat, uri, nil), cat
}

// testCatalog is a fresh catalog (at uri) whose stream has n committed
// rows in partition 0 (topics factory/<i%3>/t).
func testCatalog(t *testing.T, n int) (*tables.Catalog, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	uri := "sqlite://" + filepath.Join(dir, "catalog.db")
	cat, err := tables.Open(ctx, tables.Config{URI: uri, Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	if _, err := cat.EnsureTable(ctx, testStream); err != nil {
		t.Fatal(err)
	}
	recs := make([]*tributary.Record, n)
	for i := range recs {
		recs[i] = &tributary.Record{Stream: testStream, Offset: int64(i), Timestamp: time.Now().UnixMicro(),
			Topic: fmt.Sprintf("factory/%d/t", i%3), Value: []byte(fmt.Sprintf("value %d\x00\xff", i)), Source: "mqtt",
			ClientID: "c", Node: "edge-1", Headers: []tributary.Header{{Key: "h", Value: []byte(strconv.Itoa(i))}}}
	}
	tabletest.Commit(t, cat, testStream, recs)
	return cat, uri
}

// startServer serves cat's streams with sessions in the database at uri;
// mutate (optional) changes the config first. The server is closed at
// the end of the test (closing it earlier is fine).
func startServer(t *testing.T, cat *tables.Catalog, uri string, mutate func(*Config)) *Server {
	t.Helper()
	cfg := Config{Addr: "127.0.0.1:0", SessionsDB: uri, Limits: Limits{MaxInflight: 16},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, tables.NewReader(cat, tables.ReaderConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

type client struct {
	*paho.Client
	conn    net.Conn
	msgs    chan *paho.Publish
	disc    chan byte
	present bool
}

func dial(t *testing.T, addr, id string, expiry uint32, manual bool) *client {
	t.Helper()
	c, ca := connect(t, addr, paho.Connect{ClientID: id, CleanStart: expiry == 0,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}, manual)
	if ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %+v", id, ca)
	}
	return c
}

// connect sends cp (keep alive 30 s) and returns the client and its
// CONNACK, whatever the reason code.
func connect(t *testing.T, addr string, cp paho.Connect, manual bool) (*client, *paho.Connack) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &client{conn: conn, msgs: make(chan *paho.Publish, 1000), disc: make(chan byte, 1)}
	c.Client = paho.NewClient(paho.ClientConfig{Conn: conn, EnableManualAcknowledgment: manual, OnClientError: func(error) {},
		OnServerDisconnect: func(d *paho.Disconnect) { c.disc <- d.ReasonCode },
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp.KeepAlive = 30
	cp.UsernameFlag, cp.PasswordFlag = cp.Username != "", len(cp.Password) > 0
	ca, err := c.Connect(ctx, &cp)
	if ca == nil {
		t.Fatalf("connect %s: %v", cp.ClientID, err)
	}
	c.present = ca.SessionPresent
	return c, ca
}

func (c *client) sub(t *testing.T, filter, start string, props ...string) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var up paho.UserProperties
	if start != "" {
		up = paho.UserProperties{{Key: "stream-offset", Value: start}}
	}
	for i := 0; i+1 < len(props); i += 2 {
		up = append(up, paho.UserProperty{Key: props[i], Value: props[i+1]})
	}
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 2}},
		Properties: &paho.SubscribeProperties{User: up}})
	if sa == nil {
		t.Fatal(err)
	}
	return sa.Reasons[0]
}

func (c *client) offset(t *testing.T) (int64, *paho.Publish) {
	t.Helper()
	select {
	case m := <-c.msgs:
		n, err := strconv.ParseInt(m.Properties.User.Get("offset"), 10, 64)
		if err != nil {
			t.Fatalf("no offset: %v", m.Properties.User)
		}
		return n, m
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
		return 0, nil
	}
}

// TestDeliveryAndResume: QoS 2 is granted as 1; the rows of a filter
// arrive in order with their payload and properties; at most MaxInflight
// are unacknowledged; a persistent session resumes from the first
// unacknowledged offset; a second connection with the same client id
// takes the session over (0x8E to the first).
func TestDeliveryAndResume(t *testing.T) {
	s, _ := testServer(t, 90)
	c := dial(t, s.Addr(), "c1", 600, true)
	if code := c.sub(t, "$stream/"+testStream+"/factory/1/#", "earliest"); code != 1 {
		t.Fatalf("SUBACK 0x%02x, want 1 (QoS 2 granted as 1)", code)
	}
	var held []*paho.Publish
	for want := int64(1); len(held) < 16; want += 3 {
		off, m := c.offset(t)
		if off != want || m.Topic != "factory/1/t" || string(m.Payload) != fmt.Sprintf("value %d\x00\xff", off) ||
			m.Properties.User.Get("h") != strconv.FormatInt(off, 10) || m.QoS != 1 {
			t.Fatalf("got offset %d %s %q %v, want offset %d", off, m.Topic, m.Payload, m.Properties.User, want)
		}
		held = append(held, m)
	}
	select {
	case m := <-c.msgs:
		t.Fatalf("message beyond 16 unacknowledged: %v", m.Properties.User)
	case <-time.After(300 * time.Millisecond):
	}
	for _, m := range held[:5] { // offsets 1, 4, 7, 10, 13
		if err := c.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	if off, _ := c.offset(t); off != 49 {
		t.Fatalf("after 5 acks: offset %d, want 49", off)
	}
	// Takeover on this server: the old connection is told.
	c2 := dial(t, s.Addr(), "c1", 600, true)
	select {
	case code := <-c.disc:
		if code != 0x8E {
			t.Fatalf("taken-over connection: DISCONNECT 0x%02x", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no DISCONNECT for the taken-over connection")
	}
	if !c2.present {
		t.Fatal("session not present")
	}
	if off, _ := c2.offset(t); off != 16 {
		t.Fatalf("resumed at %d, want 16 (first unacknowledged)", off)
	}
}

// TestRefusals: publishes and bad subscriptions.
func TestRefusals(t *testing.T) {
	s, _ := testServer(t, 3)
	c := dial(t, s.Addr(), "c2", 0, false)
	for filter, want := range map[string]byte{
		"factory/#":                    codeFilterInvalid,
		"$stream/no.such/#":            codeFilterInvalid,
		"$stream/" + testStream:        codeFilterInvalid,
		"$stream/" + testStream + "/#": 1,
	} {
		if code := c.sub(t, filter, ""); code != want {
			t.Errorf("%s: 0x%02x, want 0x%02x", filter, code, want)
		}
	}
	if code := c.sub(t, "$stream/"+testStream+"/x", "soon"); code != codeImplementation {
		t.Errorf("bad stream-offset: 0x%02x", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pr, err := c.Publish(ctx, &paho.Publish{Topic: "a", QoS: 1, Payload: []byte("x")})
	if pr == nil || pr.ReasonCode != codeNotAuthorized {
		t.Fatalf("publish: %+v %v", pr, err)
	}
}

// TestStreamLatest: stream-latest=true sends the newest row of each
// matching topic first, with the retain flag, then (start latest) only
// new rows; acknowledging them moves no position.
func TestStreamLatest(t *testing.T) {
	s, _ := testServer(t, 90)
	c := dial(t, s.Addr(), "c3", 600, false)
	if code := c.sub(t, "$stream/"+testStream+"/factory/+/t", "", "stream-latest", "true"); code != 1 {
		t.Fatalf("SUBACK 0x%02x", code)
	}
	got := map[int64]bool{}
	for range 3 {
		off, m := c.offset(t)
		if !m.Retain {
			t.Fatalf("latest value %d without the retain flag", off)
		}
		got[off] = true
	}
	if !got[87] || !got[88] || !got[89] {
		t.Fatalf("latest values %v, want offsets 87, 88, 89 (one per topic)", got)
	}
	select {
	case m := <-c.msgs:
		t.Fatalf("more than the latest values: %v", m.Properties.User)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestPlainFilterRoutes: a plain topic filter reads the streams whose
// recorded MQTT routes can match it (tables.PublishRoutes), and a
// persistent session resumes it; before any route names the topics it is
// refused.
func TestPlainFilterRoutes(t *testing.T) {
	s, cat := testServer(t, 30)
	c := dial(t, s.Addr(), "c4", 600, true)
	if code := c.sub(t, "factory/2/#", "earliest"); code != codeFilterInvalid {
		t.Fatalf("no routes yet: SUBACK 0x%02x", code)
	}
	if ok, err := cat.PublishRoutes(context.Background(), testStream, "edge-1", []string{"factory/#"}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := cat.PublishRoutes(context.Background(), "office.x", "edge-1", []string{"office/#"}); ok || err != nil {
		t.Fatal("a stream without a table:", ok, err)
	}
	time.Sleep(150 * time.Millisecond) // the reader's metadata age
	if code := c.sub(t, "factory/2/#", "earliest"); code != 1 {
		t.Fatalf("SUBACK 0x%02x", code)
	}
	var first *paho.Publish
	for want := int64(2); want < 30; want += 3 {
		off, m := c.offset(t)
		if off != want || m.Topic != "factory/2/t" {
			t.Fatalf("offset %d %s, want %d", off, m.Topic, want)
		}
		if first == nil {
			first = m
		}
	}
	if err := c.Ack(first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	c.conn.Close()
	c = dial(t, s.Addr(), "c4", 600, true)
	if !c.present {
		t.Fatal("not present")
	}
	if off, _ := c.offset(t); off != 5 {
		t.Fatalf("resumed plain filter at %d, want 5", off)
	}
}

// TestShared: a $share group of two splits the rows, each row to one
// member, none lost; when a member leaves with rows unacknowledged, the
// other receives them.
func TestShared(t *testing.T) {
	s, _ := testServer(t, 200)
	const f = "$share/g/$stream/" + testStream + "/#"
	a := dial(t, s.Addr(), "m-a", 0, false)
	b := dial(t, s.Addr(), "m-b", 0, true) // acknowledges nothing
	if code := a.sub(t, f, "earliest"); code != 1 {
		t.Fatalf("a: SUBACK 0x%02x", code)
	}
	if code := b.sub(t, f, "earliest"); code != 1 {
		t.Fatalf("b: SUBACK 0x%02x", code)
	}
	gotA := map[int64]bool{}
	byB := 0
	// b holds its inflight window (16) unacknowledged and leaves: its rows
	// go back to the group, so a, which acknowledges everything, ends up
	// with every row, and each row exactly once.
	deadline := time.After(20 * time.Second)
	for len(gotA) < 200 {
		select {
		case m := <-a.msgs:
			off, _ := strconv.ParseInt(m.Properties.User.Get("offset"), 10, 64)
			if gotA[off] {
				t.Fatalf("a got offset %d twice", off)
			}
			gotA[off] = true
		case <-b.msgs:
			byB++
			if byB == 16 {
				b.conn.Close()
			}
		case <-deadline:
			t.Fatalf("a has %d of 200 offsets (b got %d)", len(gotA), byB)
		}
	}
	if byB < 16 {
		t.Fatalf("b received %d: the group did not split", byB)
	}
}
