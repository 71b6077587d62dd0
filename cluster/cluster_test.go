package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// member is an in-process member with settable metadata.
type member struct {
	*Cluster
	mu   sync.Mutex
	meta Meta
}

func (m *member) setMeta(f func(*Meta)) {
	m.mu.Lock()
	f(&m.meta)
	m.mu.Unlock()
}

func open(t *testing.T, id string, join ...string) *member {
	t.Helper()
	return openKeyed(t, id, nil, nil, join...)
}

// openKeyed is open with a gossip key and secondary keys.
func openKeyed(t *testing.T, id string, key []byte, secondary [][]byte, join ...string) *member {
	t.Helper()
	m := &member{meta: Meta{MQTT: "127.0.0.1:1883", Kafka: "127.0.0.1:9092", HTTP: "127.0.0.1:8080",
		Partitions: map[string]int32{"factory.telemetry": 0}, WALBudget: 1 << 30, UplinkOK: true}}
	c, err := Open(Config{NodeID: id, BindAddr: "127.0.0.1:0", Join: join, Profile: "local",
		MetaInterval: 200 * time.Millisecond, Logger: testLogger(t), GossipKey: key, SecondaryKeys: secondary,
		Meta: func() Meta {
			m.mu.Lock()
			defer m.mu.Unlock()
			mm := m.meta
			mm.Partitions = map[string]int32{}
			for k, v := range m.meta.Partitions {
				mm.Partitions[k] = v
			}
			return mm
		}})
	if err != nil {
		t.Fatal(err)
	}
	m.Cluster = c
	t.Cleanup(func() { c.Close(context.Background()) })
	return m
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func stateOfID(c *Cluster, id string) State {
	for _, m := range c.Members() {
		if m.ID == id {
			return m.State
		}
	}
	return ""
}

func waitState(t *testing.T, timeout time.Duration, c *Cluster, id string, want State) time.Duration {
	t.Helper()
	start := time.Now()
	for stateOfID(c, id) != want {
		if time.Since(start) > timeout {
			t.Fatalf("%s: member %s is %q, not %q after %s: %+v", c.LocalID(), id, stateOfID(c, id), want, timeout, c.Members())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// three starts a, b and c (b and c seeded with a; c also with b) and waits
// until each sees all three alive.
func three(t *testing.T) (a, b, c *member) {
	a = open(t, "a")
	b = open(t, "b", a.Addr())
	c = open(t, "c", a.Addr(), b.Addr())
	for _, x := range []*member{a, b, c} {
		for _, id := range []string{"a", "b", "c"} {
			waitState(t, 10*time.Second, x.Cluster, id, Alive)
		}
	}
	return a, b, c
}

func TestJoinAndMetadata(t *testing.T) {
	a, b, c := three(t)
	if n := len(b.Members()); n != 3 {
		t.Fatalf("b sees %d members, want 3", n)
	}
	var ma Member
	for _, m := range c.Members() {
		if m.ID == "a" {
			ma = m
		}
	}
	if ma.Addr != a.Addr() || ma.Kafka != "127.0.0.1:9092" || ma.Partitions["factory.telemetry"] != 0 || !ma.UplinkOK || ma.WALBudget != 1<<30 {
		t.Fatalf("c's view of a: %+v", ma)
	}
	// A metadata change reaches the peers.
	a.setMeta(func(m *Meta) {
		m.Partitions["plant.vibration"] = 7
		m.WALBytes = 12345
		m.UplinkOK = false
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got Member
		for _, m := range b.Members() {
			if m.ID == "a" {
				got = m
			}
		}
		if got.Partitions["plant.vibration"] == 7 && got.WALBytes == 12345 && !got.UplinkOK && got.PartitionCount == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b's view of a after the update: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tr := a.Transitions(); tr[Alive] != 3 {
		t.Fatalf("a's transitions: %v (want 3 to alive: itself, b, c)", tr)
	}
}

// TestJoinBeforeSeed starts a member whose seed is not up yet.
func TestJoinBeforeSeed(t *testing.T) {
	// The seed's address is taken from a member that then goes away; in
	// the short gap another process may grab the port, so try a few
	// fresh addresses before giving up.
	for attempt := 1; ; attempt++ {
		a := open(t, "a")
		addr := a.Addr()
		a.Close(context.Background())
		b := open(t, "b", addr) // nobody at addr: b keeps retrying
		time.Sleep(500 * time.Millisecond)
		c, err := Open(Config{NodeID: "a2", BindAddr: addr, Profile: "local", Logger: testLogger(t)})
		if err != nil {
			b.Close(context.Background())
			if attempt == 5 {
				t.Fatalf("could not bind a seed on a freed loopback port in 5 attempts: %v", err)
			}
			continue
		}
		defer c.Close(context.Background())
		waitState(t, 10*time.Second, b.Cluster, "a2", Alive)
		waitState(t, 10*time.Second, c, "b", Alive)
		return
	}
}

func TestGracefulLeave(t *testing.T) {
	a, b, c := three(t)
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitState(t, 10*time.Second, a.Cluster, "c", Left)
	waitState(t, 10*time.Second, b.Cluster, "c", Left)
	if n := a.Transitions()[Dead]; n != 0 {
		t.Fatalf("a counted %d deaths for a graceful leave", n)
	}
	if got := a.Counts(); got[Alive] != 2 || got[Left] != 1 {
		t.Fatalf("a's counts: %v", got)
	}
}

// TestFailureAndHeal isolates c's gossip with the transport hook: a and b
// suspect c, then declare it dead; after healing c is alive again.
func TestFailureAndHeal(t *testing.T) {
	a, b, c := three(t)
	c.Transport().Isolate(true)
	start := time.Now()
	waitState(t, 15*time.Second, a.Cluster, "c", Suspect)
	suspected := time.Since(start)
	waitState(t, 30*time.Second, a.Cluster, "c", Dead)
	waitState(t, 30*time.Second, b.Cluster, "c", Dead)
	t.Logf("c suspected after %s, dead after %s", suspected.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if a.Transitions()[Suspect] < 1 || a.Transitions()[Dead] != 1 {
		t.Fatalf("a's transitions: %v", a.Transitions())
	}
	c.Transport().Isolate(false)
	start = time.Now()
	for _, x := range []*member{a, b, c} {
		for _, id := range []string{"a", "b", "c"} {
			waitState(t, 20*time.Second, x.Cluster, id, Alive)
		}
	}
	t.Logf("healed after %s", time.Since(start).Round(time.Millisecond))
}

// TestBlockPeer cuts only the a-c link (both ways, with Block): b still
// reaches c and answers a's indirect probes, so a may suspect c but must
// not declare it dead.
func TestBlockPeer(t *testing.T) {
	a, _, c := three(t)
	a.Transport().Block(c.Addr(), true)
	c.Transport().Block(a.Addr(), true)
	time.Sleep(5 * time.Second)
	if st := stateOfID(a.Cluster, "c"); st == Dead {
		t.Fatalf("a declared c dead although b relays probes")
	}
}

func TestMetaEncoding(t *testing.T) {
	m := Meta{MQTT: "10.0.0.1:1883", Kafka: "10.0.0.1:9092", HTTP: "10.0.0.1:8080", Peer: "10.0.0.1:7947", WALBytes: 1 << 40, WALBudget: 1 << 41,
		UplinkOK: true, Partitions: map[string]int32{"a.b": 1, "c.d": 2}}
	enc := m.encode(512)
	got, err := decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	m.PartitionCount = 2
	if fmt.Sprint(got) != fmt.Sprint(m) {
		t.Fatalf("round trip: %+v != %+v", got, m)
	}
	// Version 1 (before the peer address) still decodes: a rolling upgrade.
	v1 := []byte{1, flagUplinkOK, 1, 'm', 1, 'k', 1, 'h', 5, 6, 1, 3, 'a', '.', 'b', 7}
	old, err := decodeMeta(v1)
	if err != nil || old.MQTT != "m" || old.HTTP != "h" || old.Peer != "" || old.Partitions["a.b"] != 7 || old.WALBudget != 6 {
		t.Fatalf("v1 meta: %+v, %v", old, err)
	}
	t.Logf("meta with 2 partitions: %d bytes", len(enc))
	// Too many partitions: truncated to the limit, the count kept.
	m.Partitions = map[string]int32{}
	for i := range 100 {
		m.Partitions[fmt.Sprintf("namespace.stream_%03d", i)] = int32(i)
	}
	enc = m.encode(512)
	if len(enc) > 512 {
		t.Fatalf("encoded %d bytes > 512", len(enc))
	}
	got, err = decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Truncated || got.PartitionCount != 100 || len(got.Partitions) == 0 || len(got.Partitions) >= 100 {
		t.Fatalf("truncated: %v count %d, %d partitions", got.Truncated, got.PartitionCount, len(got.Partitions))
	}
	if _, err := decodeMeta([]byte{1, 0, 200}); err == nil {
		t.Fatal("malformed metadata decoded")
	}
}

// TestExpire: a suspicion memberlist outlived is cleared; long-departed
// members are forgotten.
func TestExpire(t *testing.T) {
	a := open(t, "a")
	now := time.Now()
	a.mu.Lock()
	a.members["x"] = &Member{ID: "x", State: Suspect, Since: now.Add(-time.Hour)}
	a.members["y"] = &Member{ID: "y", State: Left, Since: now.Add(-2 * keepLeft)}
	a.members["z"] = &Member{ID: "z", State: Dead, Since: now.Add(-time.Hour)}
	a.mu.Unlock()
	a.expire(now)
	if st := stateOfID(a.Cluster, "x"); st != Alive {
		t.Fatalf("x is %s after its suspicion outlived memberlist's", st)
	}
	if st := stateOfID(a.Cluster, "y"); st != "" {
		t.Fatalf("y, left long ago, is still listed as %s", st)
	}
	if st := stateOfID(a.Cluster, "z"); st != Dead {
		t.Fatalf("z, dead for an hour, is %q (want still listed dead)", st)
	}
}

// FuzzDecodeMeta: any bytes from the network decode or fail cleanly, and
// what decodes re-encodes to the same metadata.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(Meta{MQTT: "a:1", Kafka: "b:2", Partitions: map[string]int32{"s.t": 3}, UplinkOK: true}.encode(512))
	f.Add([]byte{1, 0, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil || len(b) == 0 {
			return
		}
		n := m.PartitionCount
		m2, err := decodeMeta(m.encode(1 << 20))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		m2.PartitionCount, m2.Truncated = n, m.Truncated
		if fmt.Sprint(m2) != fmt.Sprint(m) {
			t.Fatalf("%+v != %+v", m2, m)
		}
	})
}

// FuzzInspect: reading state messages off arbitrary packets never panics.
func FuzzInspect(f *testing.F) {
	f.Add([]byte{wireCompound, 1, 0, 3, wireSuspect, 0x80, 0x80})
	f.Add([]byte{wireHasCRC, 0, 0, 0, 0, wireDead, 0x81, 0xa4, 'N', 'o', 'd', 'e', 0xa1, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		inspect(b, func(stateMsg) {})
	})
}

// TestGossipKeyring: members sharing a gossip key form a cluster (and
// suspicion is still read off the encrypted wire); a member with a wrong
// key, or none, does not join; a rotation step (old primary + new
// secondary on one member, the swap on the other) keeps them together.
func TestGossipKeyring(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	a := openKeyed(t, "a", k1, nil)
	b := openKeyed(t, "b", k1, nil, a.Addr())
	waitState(t, 10*time.Second, a.Cluster, "b", Alive)
	waitState(t, 10*time.Second, b.Cluster, "a", Alive)

	wrong := openKeyed(t, "wrong", k2, nil, a.Addr())
	plain := open(t, "plain", a.Addr())
	time.Sleep(3 * time.Second) // several join attempts and gossip rounds
	for _, x := range []*member{a, b} {
		for _, id := range []string{"wrong", "plain"} {
			if st := stateOfID(x.Cluster, id); st != "" {
				t.Fatalf("%s lists %s (%s) although its gossip key differs", x.LocalID(), id, st)
			}
		}
	}
	for _, x := range []*member{wrong, plain} {
		if n := len(x.Members()); n != 1 {
			t.Fatalf("%s sees %d members, want itself alone: %+v", x.LocalID(), n, x.Members())
		}
	}

	// Rotation: d is at step 1 (its key k1, the new k2 as secondary), c at
	// step 2 (k2 as its key, the old k1 as secondary): each reads what the
	// other sends, so they form a cluster.
	c := openKeyed(t, "c", k2, [][]byte{k1}, a.Addr())
	d := openKeyed(t, "d", k1, [][]byte{k2}, c.Addr())
	waitState(t, 10*time.Second, c.Cluster, "d", Alive)
	waitState(t, 10*time.Second, d.Cluster, "c", Alive)

	// Suspicion is observed through the encryption: isolate b.
	b.Transport().Isolate(true)
	waitState(t, 15*time.Second, a.Cluster, "b", Suspect)
	b.Transport().Isolate(false)
	waitState(t, 15*time.Second, a.Cluster, "b", Alive)
}

func TestGossipKeyChecked(t *testing.T) {
	for name, cfg := range map[string]Config{
		"short key":               {GossipKey: []byte("short")},
		"secondary without a key": {SecondaryKeys: [][]byte{bytes.Repeat([]byte{1}, 16)}},
		"bad secondary":           {GossipKey: bytes.Repeat([]byte{1}, 16), SecondaryKeys: [][]byte{[]byte("x")}},
	} {
		cfg.NodeID, cfg.BindAddr, cfg.Logger = "a", "127.0.0.1:0", testLogger(t)
		if c, err := Open(cfg); err == nil {
			c.Close(context.Background())
			t.Errorf("%s: Open accepted it", name)
		}
	}
}
