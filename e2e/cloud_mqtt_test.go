package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/gorilla/websocket"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/listen"
)

const cloudStream = "factory.telemetry"

// publishRows publishes n QoS 1 messages from each of clients paho
// publishers to the edge node p and waits until the table holds want rows;
// it returns the table's rows of partition 0 by offset.
func publishRows(t *testing.T, p *proc, clients, n, want int) []*tributary.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := newLedger()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("dev%d-%d", i, time.Now().UnixNano()%1e6)
			c, err := mqttClient(ctx, p.MQTT, id)
			if err != nil {
				errs <- err
				return
			}
			defer c.Disconnect(&paho.Disconnect{})
			if _, err := publishN(ctx, c, l, id, 0, n); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitRows(t, p.dataDir, cloudStream, want)
	return tableRows(t, p.dataDir)
}

// tableRows is the stream's partition-0 rows by offset.
func tableRows(t *testing.T, dir string) []*tributary.Record {
	t.Helper()
	rows := readTable(t, dir, cloudStream)
	sort.Slice(rows, func(i, j int) bool { return rows[i].Offset < rows[j].Offset })
	for i, r := range rows {
		if r.Partition != 0 || r.Offset != int64(i) {
			t.Fatalf("row %d: partition %d offset %d (one node: partition 0, dense)", i, r.Partition, r.Offset)
		}
	}
	return rows
}

// cloudClient is a paho MQTT 5 client of the cloud MQTT listener whose
// received PUBLISH packets arrive on msgs; with manual, it acknowledges
// only what the test Acks.
type cloudClient struct {
	*paho.Client
	conn    net.Conn
	msgs    chan *paho.Publish
	disc    chan *paho.Disconnect // the server's DISCONNECT
	present bool
}

func connectCloud(t *testing.T, addr string, cp paho.Connect, manual bool) *cloudClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cc := &cloudClient{conn: conn, msgs: make(chan *paho.Publish, 100000), disc: make(chan *paho.Disconnect, 1)}
	cc.Client = paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case cc.disc <- d:
			default:
			}
		},
		EnableManualAcknowledgment: manual,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			cc.msgs <- pr.Packet
			return true, nil
		}}})
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := cc.Connect(ctx, &cp)
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s to the cloud listener: %v %+v", cp.ClientID, err, ca)
	}
	cc.present = ca.SessionPresent
	t.Cleanup(func() { conn.Close() })
	return cc
}

// subscribe subscribes to filter at QoS 1 with the user properties
// (key, value pairs) and returns the SUBACK's reason code.
func (cc *cloudClient) subscribe(t *testing.T, filter string, props ...string) byte {
	t.Helper()
	var up paho.UserProperties
	for i := 0; i+1 < len(props); i += 2 {
		up = append(up, paho.UserProperty{Key: props[i], Value: props[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := cc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}},
		Properties: &paho.SubscribeProperties{User: up}})
	if sa == nil {
		t.Fatalf("subscribe %s: %v", filter, err)
	}
	return sa.Reasons[0]
}

// next is the next message, failing the test after timeout.
func (cc *cloudClient) next(t *testing.T, timeout time.Duration) *paho.Publish {
	t.Helper()
	select {
	case m := <-cc.msgs:
		return m
	case <-time.After(timeout):
		t.Fatalf("no message within %s", timeout)
		return nil
	}
}

// offsetOf is a delivered message's offset user property.
func offsetOf(t *testing.T, m *paho.Publish) int64 {
	t.Helper()
	n, err := strconv.ParseInt(m.Properties.User.Get("offset"), 10, 64)
	if err != nil {
		t.Fatalf("message on %s without an offset property: %v", m.Topic, m.Properties.User)
	}
	return n
}

// checkDelivered asserts that m is row r: topic, payload byte for byte,
// the row's headers then offset, partition and timestamp.
func checkDelivered(t *testing.T, m *paho.Publish, r *tributary.Record) {
	t.Helper()
	if m.Topic != r.Topic || !bytes.Equal(m.Payload, r.Value) {
		t.Fatalf("offset %d: got %s %q, row %s %q", r.Offset, m.Topic, m.Payload, r.Topic, r.Value)
	}
	u := m.Properties.User
	if len(u) != len(r.Headers)+3 {
		t.Fatalf("offset %d: user properties %v, row headers %v", r.Offset, u, r.Headers)
	}
	for i, h := range r.Headers {
		if u[i].Key != h.Key || u[i].Value != string(h.Value) {
			t.Fatalf("offset %d: property %d %q=%q, header %q=%q", r.Offset, i, u[i].Key, u[i].Value, h.Key, h.Value)
		}
	}
	ts := time.UnixMicro(r.Timestamp).UTC().Format(time.RFC3339Nano)
	if u.Get("offset") != fmt.Sprint(r.Offset) || u.Get("partition") != fmt.Sprint(r.Partition) || u.Get("timestamp") != ts {
		t.Fatalf("offset %d: offset/partition/timestamp properties %v, want %d/%d/%s", r.Offset, u, r.Offset, r.Partition, ts)
	}
}

// TestCloudMQTTMosquittoSub: devices publish to the edge node;
// mosquitto_sub -V mqttv5 on the cloud listener receives every row of a
// filter from earliest, in offset order, byte-exact, with the user
// properties; a plain topic filter (no $stream/) is resolved through the
// routes the edge node recorded in the catalog; a 3.1.1 mosquitto_sub
// receives the live rows of a narrower filter; a publish to the cloud
// listener is refused with 0x87.
func TestCloudMQTTMosquittoSub(t *testing.T) {
	if _, err := exec.LookPath("mosquitto_sub"); err != nil {
		t.Fatalf("mosquitto_sub not found (Debian package mosquitto-clients): %v", err)
	}
	dir := t.TempDir()
	p := startDev(t, dir)
	if p.CloudMQTT == "" {
		t.Fatal("dev has no cloud MQTT listener")
	}
	host, port, _ := net.SplitHostPort(p.CloudMQTT)
	rows := publishRows(t, p, 3, 40, 120)
	var want []*tributary.Record
	for _, r := range rows {
		if strings.HasPrefix(r.Topic, "factory/line1/") {
			want = append(want, r)
		}
	}
	// %x: the payload in hex (binary-safe), %P: the user properties.
	out, err := exec.Command("mosquitto_sub", "-h", host, "-p", port, "-V", "mqttv5", "-q", "1",
		"-t", "$stream/"+cloudStream+"/factory/line1/#", "-D", "subscribe", "user-property", "stream-offset", "earliest",
		"-F", "%t|%x|%P", "-C", fmt.Sprint(len(want)), "-W", "20").CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(want) {
		t.Fatalf("mosquitto_sub printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, line := range lines {
		r := want[i]
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("line %d: %q", i, line)
		}
		props := ""
		for _, h := range r.Headers {
			props += h.Key + ":" + string(h.Value) + " "
		}
		props += fmt.Sprintf("offset:%d partition:0 timestamp:%s", r.Offset, time.UnixMicro(r.Timestamp).UTC().Format(time.RFC3339Nano))
		if parts[0] != r.Topic || parts[1] != hex.EncodeToString(r.Value) || parts[2] != props {
			t.Fatalf("message %d (offset %d):\n got %q\nwant %q", i, r.Offset, line, r.Topic+"|"+hex.EncodeToString(r.Value)+"|"+props)
		}
	}

	// A plain topic filter, resolved through the routes the edge node
	// recorded in the catalog (dev routes factory/# to factory.telemetry).
	var want2 []*tributary.Record
	for _, r := range rows {
		if strings.HasPrefix(r.Topic, "factory/line2/") {
			want2 = append(want2, r)
		}
	}
	waitFor(t, 15*time.Second, "factory/line2/# through the edge's routes", func() bool {
		out, err := exec.Command("mosquitto_sub", "-h", host, "-p", port, "-V", "mqttv5", "-q", "1",
			"-t", "factory/line2/#", "-D", "subscribe", "user-property", "stream-offset", "earliest",
			"-F", "%t|%x", "-C", fmt.Sprint(len(want2)), "-W", "10").CombinedOutput()
		if err != nil || strings.Contains(string(out), "denied") {
			return false // refused until the route is in the catalog
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != len(want2) {
			t.Fatalf("plain filter: %d lines, want %d:\n%s", len(lines), len(want2), out)
		}
		for i, line := range lines {
			if w := want2[i].Topic + "|" + hex.EncodeToString(want2[i].Value); line != w {
				t.Fatalf("plain filter message %d: %q, want %q", i, line, w)
			}
		}
		return true
	})

	// MQTT 3.1.1, default start (latest): only rows published after the
	// subscription, of its filter.
	sub := exec.Command("mosquitto_sub", "-h", host, "-p", port, "-V", "mqttv311", "-q", "1", "-i", "sub311", "-c",
		"-t", "$stream/"+cloudStream+"/factory/+/live", "-F", "%t|%x", "-C", "5", "-W", "20")
	var subOut bytes.Buffer
	sub.Stdout, sub.Stderr = &subOut, &subOut
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the 3.1.1 session in the catalog database", func() bool {
		return sessionRows(t, dir, "sub311") > 0
	})
	pub := mosquittoPub(t)
	for i := range 5 {
		for _, topic := range []string{"factory/a/live", "factory/a/other"} {
			if out, err := exec.Command(pub, "-h", "127.0.0.1", "-p", portOf(p.MQTT), "-q", "1", "-t", topic,
				"-m", fmt.Sprintf("live %d", i)).CombinedOutput(); err != nil {
				t.Fatalf("mosquitto_pub: %v\n%s", err, out)
			}
		}
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("mosquitto_sub 3.1.1: %v\n%s", err, subOut.String())
	}
	var wantLive []string
	for i := range 5 {
		wantLive = append(wantLive, "factory/a/live|"+hex.EncodeToString([]byte(fmt.Sprintf("live %d", i))))
	}
	if got := strings.TrimSpace(subOut.String()); got != strings.Join(wantLive, "\n") {
		t.Fatalf("3.1.1 subscriber got:\n%s\nwant:\n%s", got, strings.Join(wantLive, "\n"))
	}

	// Read-only: a QoS 1 publish gets PUBACK 0x87 and is not in the table.
	out, _ = exec.Command(pub, "-h", host, "-p", port, "-V", "mqttv5", "-q", "1", "-t", "factory/line1/x", "-m", "nope", "-d").CombinedOutput()
	if !strings.Contains(string(out), "RC:135") {
		t.Fatalf("publish to the cloud listener not refused with 0x87:\n%s", out)
	}
	time.Sleep(500 * time.Millisecond)
	for _, r := range readTable(t, dir, cloudStream) {
		if string(r.Value) == "nope" {
			t.Fatal("a publish to the cloud listener reached the table")
		}
	}
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// sessionRows counts the stored cloud MQTT sessions of client.
func sessionRows(t *testing.T, dir, client string) int {
	t.Helper()
	var n int
	queryCatalog(t, dir, func(db *sql.DB) error {
		return db.QueryRow(`SELECT COUNT(*) FROM tributary_mqtt_sessions WHERE client_id = ?`, client).Scan(&n)
	})
	return n
}

// storedPosition is the stored position of client's filter in partition 0
// (-1 when there is none).
func storedPosition(t *testing.T, dir, client, filter string) int64 {
	t.Helper()
	n := int64(-1)
	queryCatalog(t, dir, func(db *sql.DB) error {
		err := db.QueryRow(`SELECT next_offset FROM tributary_mqtt_positions WHERE client_id = ? AND filter = ? AND part = 0`,
			client, filter).Scan(&n)
		if err == sql.ErrNoRows {
			return nil
		}
		return err
	})
	return n
}

func queryCatalog(t *testing.T, dir string, fn func(*sql.DB) error) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "catalog.db")+"?_pragma=busy_timeout(30000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := fn(db); err != nil && !strings.Contains(err.Error(), "no such table") {
		t.Fatal(err)
	}
}

// startCloudMQTT starts `tributary cloud` on dir's catalog with only the
// MQTT listener serving (and the catalog on a free port).
func startCloudMQTT(t *testing.T, dir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"cloud", "--data", dir, "--catalog-addr", "127.0.0.1:0", "--kafka-addr", "", "--pulsar-addr", "",
		"--mqtt-addr", "127.0.0.1:0", "--maintenance=false"}, extra...)
	c := startProc(t, dir, args...)
	if c.CloudMQTT == "" {
		t.Fatal("tributary cloud has no MQTT listener")
	}
	return c
}

// TestCloudMQTTResume: a paho persistent session (clean start false,
// session expiry) reading a stream with manual acknowledgements and a
// Receive Maximum. (1) The client is killed (its socket closed, no
// DISCONNECT) mid-stream: reconnecting to the same server resumes without
// a SUBSCRIBE, from the first unacknowledged offset. (2) The cloud server
// is killed with SIGKILL mid-stream: reconnecting to a second cloud server
// resumes from the first unacknowledged offset too, and receives every
// remaining row and the rows published meanwhile. Nothing acknowledged is
// received again; every offset is received.
func TestCloudMQTTResume(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	rows := publishRows(t, p, 2, 150, 300)
	c1 := startCloudMQTT(t, dir)
	c2 := startCloudMQTT(t, dir)
	const client, filter = "resume-1", "$stream/" + cloudStream + "/factory/#"
	expiry, rm := uint32(3600), uint16(40)
	cp := paho.Connect{ClientID: client, CleanStart: false,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry, ReceiveMaximum: &rm}}
	received := map[int64]int{}
	acked := map[int64]bool{}
	// take receives until the message at offset upto-1 has arrived,
	// acknowledging offsets below ackBelow, then checks that no more than
	// the Receive Maximum arrive unacknowledged.
	take := func(cc *cloudClient, first, ackBelow, upto int64) {
		t.Helper()
		for want := first; want < upto; want++ {
			m := cc.next(t, 15*time.Second)
			off := offsetOf(t, m)
			if off != want {
				t.Fatalf("got offset %d, want %d (in order, no gap)", off, want)
			}
			if acked[off] {
				t.Fatalf("offset %d received again after it was acknowledged", off)
			}
			checkDelivered(t, m, rows[off])
			received[off]++
			if off < ackBelow {
				if err := cc.Ack(m); err != nil {
					t.Fatal(err)
				}
				acked[off] = true
			}
		}
	}
	// Phase 1: subscribe from earliest; ack 0..99, hold 100..139.
	cc := connectCloud(t, c1.CloudMQTT, cp, true)
	if cc.present {
		t.Fatal("a new session is present")
	}
	if code := cc.subscribe(t, filter, "stream-offset", "earliest"); code != 1 {
		t.Fatalf("SUBACK 0x%02x, want QoS 1", code)
	}
	take(cc, 0, 100, 140)
	select {
	case m := <-cc.msgs:
		t.Fatalf("offset %s beyond the Receive Maximum of %d unacknowledged", m.Properties.User.Get("offset"), rm)
	case <-time.After(500 * time.Millisecond):
	}
	waitFor(t, 10*time.Second, "position 100 stored", func() bool { return storedPosition(t, dir, client, filter) == 100 })
	cc.conn.Close() // the client dies

	// Phase 2: same server, no SUBSCRIBE: from 100 (the unacknowledged
	// ones again); ack 100..199, hold 200..239, then kill -9 the server.
	cc = connectCloud(t, c1.CloudMQTT, cp, true)
	if !cc.present {
		t.Fatal("the persistent session is not present after reconnecting")
	}
	take(cc, 100, 200, 240)
	waitFor(t, 10*time.Second, "position 200 stored", func() bool { return storedPosition(t, dir, client, filter) == 200 })
	c1.kill()

	// Rows published while the client is away.
	more := publishRows(t, p, 1, 50, 350)
	rows = more

	// Phase 3: a second cloud server; from 200 to the end, acking all.
	cc = connectCloud(t, c2.CloudMQTT, cp, true)
	if !cc.present {
		t.Fatal("the persistent session is not present on the second cloud server")
	}
	take(cc, 200, 350, 350)
	for off := range int64(350) {
		if received[off] == 0 {
			t.Fatalf("offset %d never received", off)
		}
		if received[off] > 1 && off < 100 || received[off] > 2 {
			t.Fatalf("offset %d received %d times", off, received[off])
		}
	}
	waitFor(t, 10*time.Second, "position 350 stored", func() bool { return storedPosition(t, dir, client, filter) == 350 })
}

// TestCloudMQTTReplay: start positions from the stream-offset user
// property — earliest, an offset, per-partition offsets, an RFC 3339
// time, latest (the default: only rows after the subscription) — the
// latest value per topic (stream-latest=true), a $share group of two
// members on two cloud servers splitting the rows, and a bad value
// refused in the SUBACK.
func TestCloudMQTTReplay(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	rows := publishRows(t, p, 2, 50, 100)
	const filter = "$stream/" + cloudStream + "/factory/#"
	// The time of row 60: the first row accepted at or after it.
	at := time.UnixMicro(rows[60].Timestamp).UTC()
	firstAt := int64(0)
	for firstAt < int64(len(rows)) && rows[firstAt].Timestamp < rows[60].Timestamp {
		firstAt++
	}
	for _, c := range []struct {
		start string
		first int64
	}{
		{"earliest", 0},
		{"37", 37},
		{"0:81", 81},
		{at.Format(time.RFC3339Nano), firstAt},
	} {
		cc := connectCloud(t, p.CloudMQTT, paho.Connect{ClientID: "replay-" + c.start[:2], CleanStart: true}, false)
		if code := cc.subscribe(t, filter, "stream-offset", c.start); code != 1 {
			t.Fatalf("stream-offset %s: SUBACK 0x%02x", c.start, code)
		}
		for want := c.first; want < int64(len(rows)); want++ {
			m := cc.next(t, 15*time.Second)
			if off := offsetOf(t, m); off != want {
				t.Fatalf("stream-offset %s: offset %d, want %d", c.start, off, want)
			}
			checkDelivered(t, m, rows[want])
		}
		cc.Disconnect(&paho.Disconnect{})
	}
	// stream-latest=true: the newest row of each topic first (retain flag
	// set), then from the start position (latest: nothing more of the past).
	newest := map[string]*tributary.Record{}
	for _, r := range rows {
		newest[r.Topic] = r
	}
	lv := connectCloud(t, p.CloudMQTT, paho.Connect{ClientID: "replay-lv", CleanStart: true}, false)
	if code := lv.subscribe(t, filter, "stream-latest", "true"); code != 1 {
		t.Fatalf("stream-latest: SUBACK 0x%02x", code)
	}
	for range newest {
		m := lv.next(t, 10*time.Second)
		r := newest[m.Topic]
		if r == nil || !m.Retain || offsetOf(t, m) != r.Offset {
			t.Fatalf("stream-latest: %s offset %d retain %v, want the newest row of each topic", m.Topic, offsetOf(t, m), m.Retain)
		}
		checkDelivered(t, m, r)
		delete(newest, m.Topic)
	}
	// latest (no property): nothing of the past, then the new rows.
	cc := connectCloud(t, p.CloudMQTT, paho.Connect{ClientID: "replay-latest", CleanStart: true}, false)
	if code := cc.subscribe(t, filter); code != 1 {
		t.Fatalf("SUBACK 0x%02x", code)
	}
	select {
	case m := <-cc.msgs:
		t.Fatalf("latest delivered offset %s of the past", m.Properties.User.Get("offset"))
	case <-time.After(700 * time.Millisecond):
	}
	rows = publishRows(t, p, 1, 10, 110)
	for want := int64(100); want < 110; want++ {
		m := cc.next(t, 15*time.Second)
		if off := offsetOf(t, m); off != want {
			t.Fatalf("latest: offset %d, want %d", off, want)
		}
		checkDelivered(t, m, rows[want])
	}
	// A $share group of two members on two cloud servers splits the rows
	// from earliest: each row to one member, none lost.
	c2 := startCloudMQTT(t, dir)
	share := "$share/dash/$stream/" + cloudStream + "/factory/#"
	// share-1 acknowledges by hand and holds its first 16 rows until
	// share-2 has received one: otherwise share-1 can drain every chunk
	// before share-2's SUBSCRIBE arrives, and the group need not split.
	rm := uint16(16)
	m1 := connectCloud(t, p.CloudMQTT, paho.Connect{ClientID: "share-1", CleanStart: true,
		Properties: &paho.ConnectProperties{ReceiveMaximum: &rm}}, true)
	m2 := connectCloud(t, c2.CloudMQTT, paho.Connect{ClientID: "share-2", CleanStart: true}, false)
	for _, m := range []*cloudClient{m1, m2} {
		if code := m.subscribe(t, share, "stream-offset", "earliest"); code != 1 {
			t.Fatalf("$share: SUBACK 0x%02x", code)
		}
	}
	shared := map[int64]int{}
	per := map[*cloudClient]int{}
	var held []*paho.Publish // share-1's, until share-2 has one
	ack := func(m *paho.Publish) {
		if err := m1.Ack(m); err != nil {
			t.Fatalf("share-1 ack: %v", err)
		}
	}
	deadline := time.After(20 * time.Second)
	for len(shared) < len(rows) {
		select {
		case m := <-m1.msgs:
			shared[offsetOf(t, m)]++
			per[m1]++
			if per[m2] == 0 {
				held = append(held, m)
			} else {
				ack(m)
			}
		case m := <-m2.msgs:
			shared[offsetOf(t, m)]++
			per[m2]++
			for _, h := range held {
				ack(h)
			}
			held = nil
		case <-deadline:
			t.Fatalf("$share group: %d of %d rows (members %d, %d)", len(shared), len(rows), per[m1], per[m2])
		}
	}
	time.Sleep(300 * time.Millisecond)
	if len(m1.msgs)+len(m2.msgs) > 0 {
		t.Fatal("$share group: more messages than rows")
	}
	for off, n := range shared {
		if n != 1 {
			t.Fatalf("$share group: offset %d delivered %d times", off, n)
		}
	}
	if per[m1] == 0 || per[m2] == 0 {
		t.Fatalf("$share group did not split: %d and %d", per[m1], per[m2])
	}
	// Bad values are refused, with a reason.
	for _, bad := range []string{"-5", "yesterday", "0:x", "2026-13-45T00:00:00Z"} {
		if code := cc.subscribe(t, "$stream/"+cloudStream+"/bad/+", "stream-offset", bad); code < 0x80 {
			t.Fatalf("stream-offset %q granted (0x%02x)", bad, code)
		}
	}
}

// cloudMQTTACL: anonymous devices may publish to the edge only (with
// client ids dev*: an anonymous client's id must be listed); dash
// subscribes to factory/ topics of factory.* streams; ops is an admin.
const cloudMQTTACL = `allow_anonymous: true
users_file: %s
acl:
  - principal: anonymous
    allow: [publish]
    client_ids: ["dev*"]
  - principal: dash
    allow: [subscribe]
    topics: ["factory/#"]
    streams: ["factory.*"]
  - principal: ops
    allow: [admin]
`

// TestCloudMQTTBadInput: what a hostile or mistaken subscriber can do to
// the cloud listener. Publishes are refused (QoS 1 with 0x87 and a reason
// string, QoS 0 and 3.1.1 publishes by closing the connection) and never
// reach the table; filters over every stream or topic need the ACL's
// grant ('#' and other streams refused for dash, granted for ops);
// wildcards in the stream part, unknown streams and malformed shared
// filters are refused with their reason codes; 50 subscribers that never
// acknowledge hold at most their window each (the server's memory stays
// bounded); 2,000 idle sessions cost the server little CPU and a live
// subscriber beside them still receives new rows at once.
func TestCloudMQTTBadInput(t *testing.T) {
	dir, conf := t.TempDir(), t.TempDir()
	users := filepath.Join(conf, "passwd")
	for _, u := range []string{"dash", "ops"} {
		cmd := exec.Command(binPath, "passwd", users, u)
		cmd.Stdin = strings.NewReader("pw-" + u + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tributary passwd %s: %v %s", u, err, out)
		}
	}
	sec := filepath.Join(conf, "security.yaml")
	writeFile(t, sec, fmt.Sprintf(cloudMQTTACL, users))
	p := startDev(t, dir, "--security", sec)
	rows := publishRows(t, p, 4, 500, 2000)
	login := func(user, id string, rm uint16) *cloudClient {
		cp := paho.Connect{ClientID: id, CleanStart: true, Username: user, Password: []byte("pw-" + user),
			UsernameFlag: true, PasswordFlag: true}
		if rm > 0 {
			cp.Properties = &paho.ConnectProperties{ReceiveMaximum: &rm}
		}
		return connectCloud(t, p.CloudMQTT, cp, true)
	}
	dash, ops := login("dash", "dash", 0), login("ops", "ops", 0)

	t.Run("publish refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pr, err := ops.Publish(ctx, &paho.Publish{Topic: "factory/evil", QoS: 1, Payload: []byte("evil-1")})
		if err != nil && pr == nil {
			t.Fatal(err)
		}
		if pr.ReasonCode != 0x87 || !strings.Contains(pr.Properties.ReasonString, "read-only") {
			t.Fatalf("QoS 1 publish: reason 0x%02x %q, want 0x87 read-only", pr.ReasonCode, pr.Properties.ReasonString)
		}
		// QoS 0 (no answer possible) ends the connection with DISCONNECT 0x87.
		q0 := login("ops", "ops-q0", 0)
		q0.Publish(ctx, &paho.Publish{Topic: "factory/evil", QoS: 0, Payload: []byte("evil-2")})
		select {
		case d := <-q0.disc:
			if d.ReasonCode != 0x87 {
				t.Fatalf("QoS 0 publish: DISCONNECT 0x%02x, want 0x87", d.ReasonCode)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("QoS 0 publish: no DISCONNECT")
		}
		// MQTT 3.1.1 has no refusal: the connection is closed.
		host, port, _ := net.SplitHostPort(p.CloudMQTT)
		out, _ := exec.Command(mosquittoPub(t), "-h", host, "-p", port, "-V", "mqttv311", "-u", "ops", "-P", "pw-ops", "-q", "1",
			"-t", "factory/evil", "-m", "evil-3", "-d").CombinedOutput()
		if strings.Contains(string(out), "received PUBACK") {
			t.Fatalf("3.1.1 publish acknowledged:\n%s", out)
		}
		time.Sleep(500 * time.Millisecond)
		for _, r := range readTable(t, dir, cloudStream) {
			if strings.HasPrefix(string(r.Value), "evil") {
				t.Fatalf("a publish to the cloud listener reached the table: %q", r.Value)
			}
		}
	})

	t.Run("filters", func(t *testing.T) {
		if code := dash.subscribe(t, "$stream/"+cloudStream+"/factory/line1/#", "stream-offset", "earliest"); code != 1 {
			t.Fatalf("dash on factory/line1/#: 0x%02x", code)
		}
		m := dash.next(t, 10*time.Second)
		if !strings.HasPrefix(m.Topic, "factory/line1/") {
			t.Fatalf("dash got %s", m.Topic)
		}
		for _, c := range []struct {
			who    *cloudClient
			filter string
			code   byte
		}{
			{dash, "$stream/" + cloudStream + "/#", 0x87},      // '#' beyond factory/#
			{dash, "$stream/office.telemetry/factory/#", 0x87}, // a stream outside factory.*
			{ops, "$stream/" + cloudStream + "/#", 1},          // an admin may
			{ops, "$stream/+/#", 0x8F},                         // no wildcards in the stream part
			{ops, "$stream/factory.*/#", 0x8F},                 //
			{ops, "$stream/#", 0x8F},                           //
			{ops, "$stream/nosuch.stream/#", 0x8F},             // unknown stream
			{ops, "$stream/" + cloudStream + "/a/#/b", 0x8F},   // a bad topic filter
		} {
			if code := c.who.subscribe(t, c.filter); code != c.code {
				t.Fatalf("subscribe %s: 0x%02x, want 0x%02x", c.filter, code, c.code)
			}
		}
		// A plain '#' reads every stream the edge routes topics to: for an
		// admin, once the edge node has recorded its routes.
		waitFor(t, 10*time.Second, "ops granted the plain filter #", func() bool { return ops.subscribe(t, "#") == 1 })
		// A malformed shared subscription (no group name), from a raw
		// client: 0x8F.
		c, err := net.DialTimeout("tcp", p.CloudMQTT, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(rawConnect("ops-raw", "ops", "pw-ops"))
		c.Write(rawSubscribe("$share//$stream/" + cloudStream + "/#"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if first, _ := readRawPacket(t, br); first != 0x20 {
			t.Fatalf("first packet 0x%02x, want CONNACK", first)
		}
		if first, body := readRawPacket(t, br); first != 0x90 || body[len(body)-1] != 0x8F {
			t.Fatalf("$share// SUBACK 0x%02x % x, want reason 0x8F", first, body)
		}
	})

	t.Run("never acknowledges", func(t *testing.T) {
		before := rssKiB(t, p)
		var subs []*cloudClient
		for i := range 50 {
			// Receive Maximum 65535: the server's cap (256) holds.
			cc := login("ops", fmt.Sprintf("ops-hold-%d", i), 65535)
			if code := cc.subscribe(t, "$stream/"+cloudStream+"/#", "stream-offset", "earliest"); code != 1 {
				t.Fatalf("SUBACK 0x%02x", code)
			}
			subs = append(subs, cc)
		}
		for i, cc := range subs {
			for n := range 256 {
				if off := offsetOf(t, cc.next(t, 15*time.Second)); off != int64(n) {
					t.Fatalf("subscriber %d: offset %d, want %d", i, off, n)
				}
			}
		}
		time.Sleep(time.Second)
		for i, cc := range subs {
			if len(cc.msgs) > 0 {
				t.Fatalf("subscriber %d got %d messages beyond 256 unacknowledged", i, len(cc.msgs))
			}
		}
		after := rssKiB(t, p)
		t.Logf("RSS %d MiB before, %d MiB with 50 subscribers holding 256 unacknowledged each", before>>10, after>>10)
		if after-before > 200<<10 {
			t.Fatalf("RSS grew by %d MiB", (after-before)>>10)
		}
		for _, cc := range subs {
			cc.conn.Close()
		}
	})

	t.Run("idle sessions", func(t *testing.T) {
		const idle = 2000
		var conns []net.Conn
		t.Cleanup(func() {
			for _, c := range conns {
				c.Close()
			}
		})
		_, port, _ := net.SplitHostPort(p.CloudMQTT)
		for i := range idle {
			// 1000 connections per source address is listen's per-IP cap.
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%3))}, Timeout: 5 * time.Second}
			c, err := d.Dial("tcp", "127.0.0.1:"+port)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, c)
			id := fmt.Sprintf("idle-%d", i)
			c.Write(rawConnect(id, "ops", "pw-ops"))
			c.Write(rawSubscribe("$stream/" + cloudStream + "/idle/#"))
		}
		for i, c := range conns {
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			b := make([]byte, 4+5) // CONNACK (v5, no properties... at least 4 bytes) then SUBACK
			if _, err := io.ReadAtLeast(c, b, 4); err != nil {
				t.Fatalf("idle session %d: no CONNACK: %v", i, err)
			}
			if b[0] != 0x20 {
				t.Fatalf("idle session %d: first packet 0x%02x, want CONNACK", i, b[0])
			}
		}
		time.Sleep(time.Second) // the SUBACKs
		cpu0 := cpuTicks(t, p)
		time.Sleep(3 * time.Second)
		used := cpuTicks(t, p) - cpu0 // 100 ticks a second
		t.Logf("%d idle sessions: the server used %d ms of CPU in 3 s", idle, used*10)
		if used > 150 {
			t.Fatalf("%d idle sessions cost %d ms of CPU in 3 s", idle, used*10)
		}
		live := login("ops", "ops-live", 0)
		if code := live.subscribe(t, "$stream/"+cloudStream+"/factory/#"); code != 1 {
			t.Fatalf("SUBACK 0x%02x", code)
		}
		rows = publishRows(t, p, 1, 5, len(rows)+5)
		for i := len(rows) - 5; i < len(rows); i++ {
			if off := offsetOf(t, live.next(t, 5*time.Second)); off != int64(i) {
				t.Fatalf("live subscriber: offset %d, want %d", off, i)
			}
		}
	})
}

// rawConnect is an MQTT 5 CONNECT (clean start, keep-alive 0) with a
// user name and password.
func rawConnect(id, user, pw string) []byte {
	body := append(testkit.MQTTString("MQTT"), 5, 0xC2, 0, 0, 0) // v5, user+password+clean, keep-alive 0, no properties
	body = append(body, testkit.MQTTString(id)...)
	body = append(body, testkit.MQTTString(user)...)
	body = append(body, testkit.MQTTString(pw)...)
	return testkit.MQTTPacket(0x10, body)
}

// rawSubscribe is an MQTT 5 SUBSCRIBE (packet id 1, QoS 1) of filter.
func rawSubscribe(filter string) []byte {
	body := append([]byte{0, 1, 0}, testkit.MQTTString(filter)...)
	return testkit.MQTTPacket(0x82, append(body, 1))
}

// readRawPacket reads one MQTT packet: its first byte and body.
func readRawPacket(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	first, err := br.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	n, mul := 0, 1
	for {
		b, err := br.ReadByte()
		if err != nil {
			t.Fatal(err)
		}
		n += int(b&0x7f) * mul
		if b&0x80 == 0 {
			break
		}
		mul <<= 7
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	return first, body
}

// rssKiB is the resident set size of p's process.
func rssKiB(t *testing.T, p *proc) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// cpuTicks is p's user + system CPU time in clock ticks.
func cpuTicks(t *testing.T, p *proc) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(raw)[strings.LastIndexByte(string(raw), ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// TestCloudMQTTWebSocket: a browser-style client (MQTT over a WebSocket
// with the "mqtt" subprotocol) on the cloud listener receives rows.
func TestCloudMQTTWebSocket(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir, "--cloud-mqtt-ws-addr", "127.0.0.1:0")
	if p.CloudMQTTWS == "" {
		t.Fatal("no cloud MQTT WebSocket listener")
	}
	rows := publishRows(t, p, 1, 20, 20)
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 5 * time.Second}
	// A browser page of the node's own origin (another site's is refused
	// unless mqtt.ws_allowed_origins lists it: TestHostileOpenDevBrowser).
	ws, resp, err := d.Dial("ws://"+p.CloudMQTTWS+"/mqtt", http.Header{"Origin": {"http://" + p.CloudMQTTWS}})
	if err != nil {
		t.Fatalf("websocket dial: %v %v", err, resp)
	}
	if ws.Subprotocol() != "mqtt" {
		t.Fatalf("subprotocol %q", ws.Subprotocol())
	}
	conn := listen.NewWSConn(ws)
	msgs := make(chan *paho.Publish, 100)
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			msgs <- pr.Packet
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ca, err := c.Connect(ctx, &paho.Connect{ClientID: "browser", CleanStart: true, KeepAlive: 30}); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect over websocket: %v %+v", err, ca)
	}
	defer c.Disconnect(&paho.Disconnect{})
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$stream/" + cloudStream + "/#", QoS: 1}},
		Properties: &paho.SubscribeProperties{User: paho.UserProperties{{Key: "stream-offset", Value: "earliest"}}}})
	if err != nil || sa.Reasons[0] != 1 {
		t.Fatalf("subscribe over websocket: %v %+v", err, sa)
	}
	for _, r := range rows {
		select {
		case m := <-msgs:
			checkDelivered(t, m, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("offset %d not received over websocket", r.Offset)
		}
	}
}
