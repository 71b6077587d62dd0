package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/replica/wire"
	"github.com/tributary-io/tributary/wal"
)

// TestReplicatedBeforeFsync: with the owner's WAL holding each group for
// a second between its tap and its commit, the replica holds the records
// while the owner has not committed them yet, and the owner's Append plus
// Replicate returns once both are durable.
func TestReplicatedBeforeFsync(t *testing.T) {
	tc := &testCluster{t: t, net: &fakeNet{nodes: map[string]*fakePeer{}, cut: map[string]bool{}}, cat: newFakeCatalog(),
		members: map[string]Member{}, nodes: map[string]*testNode{}, tapDelay: time.Second}
	for _, id := range []string{"a", "b"} {
		tc.members[id] = Member{ID: id, Peer: "addr-" + id, State: "alive"}
	}
	a := tc.start("a", 2, Degrade, t.TempDir())
	b := tc.start("b", 2, Degrade, t.TempDir())
	if err := a.ingest(t, 0, 1, 0); err != nil { // targets exist, in step
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- a.ingest(t, 0, 20, 0) }()
	testkit.Eventually(t, 5*time.Second, "b to hold the group", func() bool { _, next := b.stored(t, "a", 0); return next == 21 })
	if ps, _ := a.main.Partition("s.t", 0); ps.Next != 1 {
		t.Fatalf("the owner committed the group (next %d) before the replica held it", ps.Next)
	}
	held := time.Since(start)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if held > 900*time.Millisecond {
		t.Fatalf("the replica held the group only after %s (the owner's commit waits 1s)", held)
	}
	t.Logf("replica durable after %s, owner after %s", held.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// sendAppend hands a wire.MsgAppend from origin to n's handler and waits
// for the reply.
func sendAppend(t *testing.T, n *testNode, origin string, m *wire.Append) (wire.Reply, error) {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	n.r.handleAppend(origin, m.Encode(), func(b []byte, err error) { ch <- res{b, err} })
	r := <-ch
	if r.err != nil {
		return wire.Reply{}, r.err
	}
	return wire.DecodeReply(r.b)
}

// chunk encodes records [from, to) of (s.t, 0) with values prefix-offset.
func chunk(from, to int64, prefix string) []byte {
	var recs [][]byte
	for o := from; o < to; o++ {
		recs = append(recs, wal.EncodeRecord(nil, &tributary.Record{Stream: "s.t", Offset: o, Timestamp: 1, Topic: "t",
			Value: []byte(fmt.Sprintf("%s-%d", prefix, o)), Source: "mqtt"}))
	}
	return wal.EncodeChunk(nil, from, recs)
}

// TestStoreScript drives a replica store of origin "x" with scripted
// messages: in order, duplicates, a gap (out of order), a bad checksum,
// a new incarnation that drops what the old one left above its durable
// start, a stale incarnation, a version 1 message, and a reopen.
func TestStoreScript(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade)
	dir := t.TempDir()
	b := tc.start("b", 2, Degrade, dir)
	app := func(inc, from int64, chunks ...[]byte) *wire.Append {
		return &wire.Append{Stream: "s.t", Incarnation: inc, From: from, Chunks: chunks}
	}
	step := func(where string, m *wire.Append, status byte, next int64) {
		t.Helper()
		rep, err := sendAppend(t, b, "x", m)
		if err != nil || rep.Status != status || rep.Next != next {
			t.Fatalf("%s: reply %+v, %v; want status %d next %d", where, rep, err, status, next)
		}
	}
	values := func(where string, want ...string) {
		t.Helper()
		s, _ := b.r.storeOf("x")
		w, _ := s.wal()
		recs, err := w.Read("s.t", 0, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, string(r.Value))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: store holds %v, want %v", where, got, want)
		}
	}
	step("first", app(5, 0, chunk(0, 3, "i5")), wire.StatusOK, 3)
	step("next two", app(5, 0, chunk(3, 4, "i5"), chunk(4, 6, "i5")), wire.StatusOK, 6)
	step("duplicate", app(5, 0, chunk(3, 4, "i5"), chunk(4, 6, "i5")), wire.StatusOK, 6)
	step("overlap", app(5, 0, chunk(5, 8, "i5")), wire.StatusOK, 8)
	step("out of order", app(5, 0, chunk(10, 12, "i5")), wire.StatusGap, 8)
	bad := chunk(8, 10, "i5")
	bad[len(bad)-1] ^= 1
	if _, err := sendAppend(t, b, "x", app(5, 0, bad)); !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("bad checksum: %v, want ErrCorrupt", err)
	}
	values("before the restart", "i5-0", "i5-1", "i5-2", "i5-3", "i5-4", "i5-5", "i5-6", "i5-7")
	// The owner restarted as incarnation 7 with [0, 6) durable: 6 and 7
	// were never durable there and go; its new 6 follows.
	step("new incarnation", app(7, 6, chunk(6, 7, "i7")), wire.StatusOK, 7)
	values("after the restart", "i5-0", "i5-1", "i5-2", "i5-3", "i5-4", "i5-5", "i7-6")
	if got := b.r.Stats().TruncatedRecords; got != 2 {
		t.Fatalf("TruncatedRecords %d, want 2", got)
	}
	step("stale incarnation", app(5, 0, chunk(7, 8, "i5")), wire.StatusStale, 7)
	// A node of the previous version sends records (version 1).
	v1 := &wire.Append{Stream: "s.t", Records: []*tributary.Record{{Stream: "s.t", Offset: 7, Timestamp: 1, Topic: "t", Value: []byte("v1-7"), Source: "mqtt"}}}
	step("version 1", v1, wire.StatusOK, 8)
	// An empty message of a newer incarnation only drops.
	step("empty new incarnation", app(9, 7), wire.StatusOK, 7)
	testkit.Eventually(t, 5*time.Second, "the drop", func() bool { _, next := b.stored(t, "x", 0); return next == 7 })
	values("after the empty one", "i5-0", "i5-1", "i5-2", "i5-3", "i5-4", "i5-5", "i7-6")

	// The store remembers the incarnation across a restart of b.
	b.close()
	b = tc.start("b", 2, Degrade, dir)
	step("stale after a restart", app(7, 6, chunk(7, 8, "i7")), wire.StatusStale, 7)
	step("current after a restart", app(9, 7, chunk(7, 8, "i9")), wire.StatusOK, 8)
	values("after the restart of b", "i5-0", "i5-1", "i5-2", "i5-3", "i5-4", "i5-5", "i7-6", "i9-7")
}

// asyncIngest appends count records as ingest's pipelined path does
// (Submit of an OpAppend, then ReplicateAsync from the WAL's callback) and returns
// the outcome of each.
func (n *testNode) asyncIngest(count int) []error {
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		rec := &tributary.Record{Stream: "s.t", Topic: "t", Value: []byte(fmt.Sprintf("%s-async-%d", n.id, i)), Source: "mqtt", Node: n.id}
		n.main.Submit(wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{rec}, Done: func(wr wal.Result) {
			if wr.Err != nil {
				errs[i] = wr.Err
				wg.Done()
				return
			}
			n.r.ReplicateAsync([]*tributary.Record{rec}, func(err error) { errs[i] = err; wg.Done() })
		}})
	}
	wg.Wait()
	return errs
}

// TestReplicateAsync: the callback form completes when the replica holds
// the records, degrades or refuses by policy when it is cut off, and
// fails with ErrClosed after Close.
func TestReplicateAsync(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	for i, err := range a.asyncIngest(50) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if _, next := b.stored(t, "a", 0); next != 50 {
		t.Fatalf("b holds up to %d, want 50 once every callback ran", next)
	}
	tc.net.setCut("addr-b", true)
	for i, err := range a.asyncIngest(5) {
		if err != nil {
			t.Fatalf("degrade, record %d: %v", i, err)
		}
	}
	if !a.r.Stats().Degraded {
		t.Fatal("not degraded with the replica cut off")
	}

	tr := newTestCluster(t, 2, Refuse, "x", "y")
	x := tr.nodes["x"]
	tr.net.setCut("addr-y", true)
	for i, err := range x.asyncIngest(3) {
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("refuse, record %d: %v", i, err)
		}
	}
	x.r.Close(context.Background())
	done := make(chan error, 1)
	x.r.ReplicateAsync([]*tributary.Record{{Stream: "s.t", Offset: 99}}, func(err error) { done <- err })
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReplicateAsync after Close never called back")
	}
}
