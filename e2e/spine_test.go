package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
)

// idOf extracts the test's message id from a payload written by publishN
// or by the mosquitto_pub part.
func idOf(v []byte) string {
	const pfx = `{"id":"`
	if !bytes.HasPrefix(v, []byte(pfx)) {
		return ""
	}
	rest := v[len(pfx):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return ""
	}
	return string(rest[:end])
}

// checkRows asserts that each acked message is in rows exactly once,
// byte-exact with its topic and user properties; unacked ones at most once.
func checkRows(t *testing.T, l *ledger, rows []*tributary.Record) {
	t.Helper()
	count := map[string]int{}
	for _, r := range rows {
		id := idOf(r.Value)
		if id == "" {
			t.Fatalf("row %d@%d has a payload the test did not send: %q", r.Offset, r.Partition, r.Value)
		}
		count[id]++
		s := l.msgs[id]
		if s == nil {
			t.Fatalf("row with unknown id %s", id)
		}
		if !bytes.Equal(r.Value, s.Payload) || r.Topic != s.Topic || r.Source != "mqtt" {
			t.Fatalf("row %s differs: topic %q value %q, sent topic %q value %q", id, r.Topic, r.Value, s.Topic, s.Payload)
		}
		if len(r.Headers) != len(s.Props) {
			t.Fatalf("row %s: %d headers, sent %d user properties", id, len(r.Headers), len(s.Props))
		}
		for i, h := range r.Headers {
			if h.Key != s.Props[i].Key || string(h.Value) != s.Props[i].Value {
				t.Fatalf("row %s header %d: %q=%q, sent %q=%q", id, i, h.Key, h.Value, s.Props[i].Key, s.Props[i].Value)
			}
		}
	}
	lost, dup := 0, 0
	for id, s := range l.msgs {
		switch {
		case s.Acked && count[id] == 0:
			lost++
		case count[id] > 1:
			dup++
		}
	}
	if lost > 0 || dup > 0 {
		t.Fatalf("%d acknowledged messages missing from the table, %d messages duplicated", lost, dup)
	}
}

// TestRoundTrip: 10 paho clients × 1,000 QoS 1 publishes plus 100 from
// mosquitto_pub; the table has exactly 10,100 rows, dense offsets, and every
// payload, topic and user property byte-exact.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	roundTrip(t, func() *proc { return startDev(t, dir) }, func() []*tributary.Record { return readTable(t, dir, "factory.telemetry") })
}

// roundTrip is TestRoundTrip's body for any node setup: start starts the
// node, read reads the stream's table back with iceberg-go.
func roundTrip(t *testing.T, start func() *proc, read func() []*tributary.Record) {
	p := start()
	ctx := context.Background()
	l := newLedger()
	var wg sync.WaitGroup
	errs := make(chan error, 11)
	for c := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("pub%d", c)
			cl, err := mqttClient(ctx, p.MQTT, name)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Disconnect(&paho.Disconnect{})
			if _, err := publishN(ctx, cl, l, name, 0, 1000); err != nil {
				errs <- err
			}
		}()
	}
	// mosquitto_pub, MQTT 3.1.1, one message per stdin line.
	var lines strings.Builder
	for i := range 100 {
		id := fmt.Sprintf("mosq-%06d", i)
		payload := fmt.Sprintf(`{"id":"%s","v":%d}`, id, i)
		l.add(&sent{ID: id, Topic: "factory/line9/mosquitto", Payload: []byte(payload)})
		lines.WriteString(payload + "\n")
	}
	host, port, _ := strings.Cut(p.MQTT, ":")
	cmd := exec.Command(mosquittoPub(t), "-h", host, "-p", port, "-V", "mqttv311", "-q", "1",
		"-t", "factory/line9/mosquitto", "-i", "mosq-e2e", "-l")
	cmd.Stdin = strings.NewReader(lines.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_pub: %v: %s", err, out)
	}
	for i := range 100 {
		l.ack(fmt.Sprintf("mosq-%06d", i))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.stop() // final commit
	rows := read()
	if len(rows) != 10100 {
		t.Fatalf("table has %d rows, want 10100", len(rows))
	}
	counts := checkDense(t, rows)
	checkRows(t, l, rows)
	t.Logf("10,100 rows, partitions %v", counts)
}

func mosquittoPub(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("mosquitto_pub")
	if err != nil {
		t.Fatalf("mosquitto_pub not found (Debian package mosquitto-clients; `make test` installs it): %v", err)
	}
	return path
}

// TestCrashKill9: publishers run while the node is killed with SIGKILL at
// random moments (5 times) and restarted on the same data directory. Every
// acknowledged message is in the table exactly once; offsets stay dense.
func TestCrashKill9(t *testing.T) {
	dir := t.TempDir()
	crashRounds(t, 5, func() *proc { return startDev(t, dir) }, func() []*tributary.Record { return readTable(t, dir, "factory.telemetry") })
}

// crashRounds is TestCrashKill9's body for any node setup.
func crashRounds(t *testing.T, rounds int, start func() *proc, read func() []*tributary.Record) {
	crashRoundsInFlight(t, rounds, 8, 1, start, read)
}

// crashRoundsInFlight is crashRounds with clients connections, each with
// inFlight publishers (messages in flight) sharing it.
func crashRoundsInFlight(t *testing.T, rounds, clients, inFlight int, start func() *proc, read func() []*tributary.Record) {
	l := newLedger()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	next := make([]int, clients*inFlight) // next message index per publisher
	for round := range rounds {
		p := start()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var mu sync.Mutex
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("crash%d", c)
				cl, err := mqttClient(ctx, p.MQTT, name)
				if err != nil {
					return
				}
				var pubs sync.WaitGroup
				for j := range inFlight {
					pubs.Go(func() {
						id, k := name, c*inFlight+j
						if inFlight > 1 {
							id = fmt.Sprintf("%s.%d", name, j)
						}
						mu.Lock()
						start := next[k]
						mu.Unlock()
						// Publish until the node dies; messages not acked are
						// not re-sent (they may or may not be in the table).
						n, _ := publishN(ctx, cl, l, id, start, 100000)
						mu.Lock()
						next[k] = start + n + 1
						mu.Unlock()
					})
				}
				pubs.Wait()
			}()
		}
		before := l.acked()
		delay := time.Duration(100+rng.IntN(900)) * time.Millisecond
		waitFor(t, 30*time.Second, "publishes flowing", func() bool { return l.acked() > before+50 })
		time.Sleep(delay) // a random kill point, not a synchronisation
		p.kill()
		cancel()
		wg.Wait()
		t.Logf("round %d: killed after %s, %d acked so far", round, delay, l.acked())
	}
	// A final clean run drains everything.
	p := start()
	waitFor(t, 60*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
	p.stop()
	rows := read()
	counts := checkDense(t, rows)
	checkRows(t, l, rows)
	t.Logf("%d rows (%d acked publishes), partitions %v", len(rows), l.acked(), counts)
}

// TestCrashKill9Pipelined: TestCrashKill9 with 16 messages in flight on
// each of 4 connections, acknowledged asynchronously (many of one
// connection share a group commit): every acknowledged message is in the
// table exactly once after kill -9 at random moments; offsets stay dense.
func TestCrashKill9Pipelined(t *testing.T) {
	dir := t.TempDir()
	crashRoundsInFlight(t, 3, 4, 16, func() *proc { return startDev(t, dir) }, func() []*tributary.Record { return readTable(t, dir, "factory.telemetry") })
}

// TestQoS0AndQoS2: QoS 0 publishes (queued without waiting for the fsync)
// and QoS 2 publishes (PUBREC after the fsync) land like QoS 1 ones.
func TestQoS0AndQoS2(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	ctx := context.Background()
	cl, err := mqttClient(ctx, p.MQTT, "qos02")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 1000 {
		qos := byte(0)
		if i%2 == 1 {
			qos = 2
		}
		id := fmt.Sprintf("q%d-%06d", qos, i)
		want[id] = true
		payload := []byte(fmt.Sprintf(`{"id":"%s"}`, id))
		if _, err := cl.Publish(ctx, &paho.Publish{Topic: "factory/q", QoS: qos, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	cl.Disconnect(&paho.Disconnect{})
	p.stop()
	rows := readTable(t, dir, "factory.telemetry")
	checkDense(t, rows)
	for _, r := range rows {
		id := idOf(r.Value)
		if !want[id] {
			t.Fatalf("unexpected or duplicate row %q", r.Value)
		}
		delete(want, id)
	}
	if len(want) != 0 {
		t.Fatalf("%d publishes missing from the table", len(want))
	}
}
