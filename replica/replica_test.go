package replica

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/wal"
)

func TestRing(t *testing.T) {
	ms := []Member{{ID: "c", Peer: "x", State: cluster.Alive}, {ID: "a", Peer: "x", State: cluster.Alive},
		{ID: "b", Peer: "x", State: cluster.Suspect}, {ID: "d", Peer: "x", State: cluster.Dead}, {ID: "e", State: cluster.Alive}}
	ids := func(ms []Member) string {
		s := ""
		for _, m := range ms {
			s += m.ID
		}
		return s
	}
	cases := []struct {
		self string
		k    int
		want string
	}{{"a", 1, "b"}, {"b", 1, "c"}, {"c", 1, "a"}, {"c", 2, "ab"}, {"a", 5, "bc"}, {"d", 1, "a"}, {"a", 0, ""}}
	for _, c := range cases {
		if got := ids(ringAfter(c.self, ms, c.k)); got != c.want {
			t.Errorf("ringAfter(%s, %d) = %s, want %s", c.self, c.k, got, c.want)
		}
	}
}

// TestReplicateToRing: concurrent appends on a reach its ring successor b
// (and not c) with the owner's offsets, before Replicate returns.
func TestReplicateToRing(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b", "c")
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 10; i++ {
				if err := a.ingest(t, 0, 3, 0); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if rel, next := b.stored(t, "a", 0); rel != 0 || next != 240 {
		t.Fatalf("b holds [%d, %d) of a, want [0, 240)", rel, next)
	}
	want, _ := a.main.Read("s.t", 0, 0, 0, 0)
	s, _ := b.r.storeOf("a")
	w, _ := s.wal()
	got, _ := w.Read("s.t", 0, 0, 0, 0)
	for i := range want {
		if string(got[i].Value) != string(want[i].Value) || got[i].Offset != want[i].Offset {
			t.Fatalf("offset %d: replica has %q@%d, owner %q@%d", i, got[i].Value, got[i].Offset, want[i].Value, want[i].Offset)
		}
	}
	if _, err := c.r.storeOf("a"); err == nil && c.r.stores["a"].exists() {
		t.Fatal("c holds a store of a, but is not a's replica")
	}
	st := a.r.Stats()
	if st.Degraded || st.ReplicatedRecords != 240 || st.LagRecords != 0 {
		t.Fatalf("owner stats %+v", st)
	}
	if st := b.r.Stats(); st.StoredRecords != 240 {
		t.Fatalf("replica stats %+v", st)
	}
}

// TestResyncAfterReplicaLoss: a replica that lost its store answers with a
// gap and the owner resends from its own WAL.
func TestResyncAfterReplicaLoss(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	if err := a.ingest(t, 0, 10, 0); err != nil {
		t.Fatal(err)
	}
	b.close()
	b = tc.start("b", 2, Degrade, t.TempDir()) // a new disk
	if err := a.ingest(t, 0, 5, 0); err != nil {
		t.Fatal(err)
	}
	if rel, next := b.stored(t, "a", 0); rel != 0 || next != 15 {
		t.Fatalf("b holds [%d, %d), want [0, 15)", rel, next)
	}
	if a.r.Stats().Degraded {
		t.Fatal("degraded after a resync")
	}
}

// TestReleaseAndBase: the owner's releases reach the replica, and a new
// replica starts at the owner's released offset.
func TestReleaseAndBase(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b", "c")
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	if err := a.ingest(t, 0, 10, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.main.Apply(context.Background(), wal.Op{Kind: wal.OpRelease, Stream: "s.t", Partition: 0, Offset: 6}).Err; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "b to release what a released", func() bool { rel, _ := b.stored(t, "a", 0); return rel == 6 })
	tc.setState("b", cluster.Dead) // a's ring successor is now c
	if err := a.ingest(t, 0, 4, 0); err != nil {
		t.Fatal(err)
	}
	if rel, next := c.stored(t, "a", 0); rel != 6 || next != 14 {
		t.Fatalf("c holds [%d, %d), want [6, 14)", rel, next)
	}
}

// TestDegradeAndRefuse: a missing replica degrades or refuses by policy,
// and a healed one catches up.
func TestDegradeAndRefuse(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	if err := a.ingest(t, 0, 5, 0); err != nil {
		t.Fatal(err)
	}
	tc.net.setCut("addr-b", true)
	start := time.Now()
	if err := a.ingest(t, 0, 5, 0); err != nil {
		t.Fatalf("degrade policy refused: %v", err)
	}
	if !a.r.Stats().Degraded {
		t.Fatal("not degraded with the replica cut off")
	}
	if err := a.ingest(t, 0, 5, 0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("degraded appends took %s: a known-missing replica must not be waited for each time", d)
	}
	tc.net.setCut("addr-b", false)
	testkit.Eventually(t, 10*time.Second, "the healed replica to catch up", func() bool { _, next := b.stored(t, "a", 0); return next == 15 })
	if err := a.ingest(t, 0, 1, 0); err != nil {
		t.Fatal(err)
	}
	if a.r.Stats().Degraded {
		t.Fatal("still degraded after healing")
	}

	tr := newTestCluster(t, 2, Refuse, "x", "y")
	x := tr.nodes["x"]
	tr.net.setCut("addr-y", true)
	if err := x.ingest(t, 0, 1, 0); !errors.Is(err, ErrNotReplicated) || errors.Is(err, wal.ErrBudgetExceeded) || tributary.ReasonOf(err) != tributary.ReasonReplication {
		t.Fatalf("refuse policy with the replica cut off: %v", err)
	}
	tr.setState("y", cluster.Dead)
	if err := x.r.Check(); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Check with no live replica: %v", err)
	}
	tr.setState("y", cluster.Alive)
	tr.net.setCut("addr-y", false)
	if err := x.r.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaBudget: a replica whose disk budget is full refuses, and the
// owner counts it as missing (degrade) instead of failing the append.
func TestReplicaBudget(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	b.r.cfg.MaxBytes = 2 << 10 // before b's store of a is opened
	if err := a.ingest(t, 0, 10, 0); err != nil || a.r.Stats().Degraded {
		t.Fatalf("first append: %v, %+v", err, a.r.Stats())
	}
	if err := a.ingest(t, 0, 200, 0); err != nil {
		t.Fatalf("append beyond the replica's budget under degrade: %v", err)
	}
	if !a.r.Stats().Degraded {
		t.Fatal("not degraded with the replica's budget exhausted")
	}
	if _, next := b.stored(t, "a", 0); next != 10 {
		t.Fatalf("replica holds up to %d, want 10", next)
	}
}

// TestFencedByReplica: a replica that owns the partition at a higher
// epoch refuses the old owner's appends.
func TestFencedByReplica(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	if err := a.ingest(t, 0, 3, 0); err != nil {
		t.Fatal(err)
	}
	b.r.MarkOwned("s.t", 0, 1)
	if err := a.ingest(t, 0, 3, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after the replica took over: %v", err)
	}
	select {
	case pk := <-a.fenced:
		if pk != (pkey{"s.t", 0}) {
			t.Fatalf("fenced %v", pk)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnFenced not called")
	}
	if err := a.ingest(t, 0, 1, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("later append: %v", err)
	}
	// A fenced partition is not replication lag: nothing of it is to be
	// replicated any more (the gauge stayed up on fenced nodes).
	if lag := a.r.Stats().LagRecords; lag != 0 {
		t.Fatalf("lag %d records on a fenced partition", lag)
	}
	// a takes the partition back at a higher epoch: replicated again.
	if err := a.ingest(t, 0, 2, 2); err != nil {
		t.Fatalf("append at a higher epoch: %v", err)
	}
	if _, next := b.stored(t, "a", 0); next != 9 {
		t.Fatalf("b holds a's partition up to %d, want 9", next)
	}
}

// TestDroppedPartition: a partition the WAL dropped (the uplink was fenced
// out of it) is no longer replicated.
func TestDroppedPartition(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a := tc.nodes["a"]
	if err := a.ingest(t, 0, 3, 0); err != nil {
		t.Fatal(err)
	}
	if wr := a.main.Apply(context.Background(), wal.Op{Kind: wal.OpDrop, Stream: "s.t", Partition: 0, Epoch: math.MaxInt64}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	err := a.r.Replicate(context.Background(), []*tributary.Record{{Stream: "s.t", Partition: 0, Offset: 3}})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("replicating a dropped partition: %v", err)
	}
}

// TestFencedByOwnership: the node's own view of what it owns (Owner.Epoch,
// which survives restarts through the table) fences an older owner too.
func TestFencedByOwnership(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	b.owner.set(func(o *testOwner) {
		o.epoch = func(stream string, p int32) (int64, bool) { return 2, stream == "s.t" && p >= 7 }
	})
	if err := a.ingest(t, 0, 3, 0); err != nil {
		t.Fatalf("partition b does not own: %v", err)
	}
	if err := a.ingest(t, 7, 3, 2); err != nil {
		t.Fatalf("same epoch as b's: %v", err)
	}
	if err := a.ingest(t, 8, 3, 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("older epoch: %v", err)
	}
}

// TestTakeover: gossip death alone moves nothing; death plus a failed data
// link makes exactly one of two holders take over, copying what is above
// the table's mark at the new epoch; the loser releases as the mark
// passes; the returning owner is fenced.
func TestTakeover(t *testing.T) {
	tc := newTestCluster(t, 3, Degrade, "a", "b", "c")
	a := tc.nodes["a"]
	tc.cat.owner[pkey{"s.t", 0}] = "a"
	if err := a.ingest(t, 0, 20, 0); err != nil {
		t.Fatal(err)
	}
	tc.cat.setMark("s.t", 0, 5)

	tc.setState("a", cluster.Dead) // gossip only: a still answers pings
	time.Sleep(5 * 300 * time.Millisecond)
	for _, id := range []string{"b", "c"} {
		select {
		case <-tc.nodes[id].adopted:
			t.Fatalf("%s took over a member that answers on its data link", id)
		default:
		}
	}

	a.close()
	tc.net.setCut("addr-a", true)
	var winner, loser *testNode
	select {
	case <-tc.nodes["b"].adopted:
		winner, loser = tc.nodes["b"], tc.nodes["c"]
	case <-tc.nodes["c"].adopted:
		winner, loser = tc.nodes["c"], tc.nodes["b"]
	case <-time.After(10 * time.Second):
		t.Fatal("nobody took over")
	}
	if o, e, _ := tc.cat.Owner(nil, "s.t", 0); o != winner.id || e != 1 || len(tc.cat.takers) != 1 {
		t.Fatalf("catalog owner %s epoch %d takers %v", o, e, tc.cat.takers)
	}
	recs, err := winner.main.Read("s.t", 0, 0, 0, 0)
	if err != nil || len(recs) != 15 || recs[0].Offset != 5 {
		t.Fatalf("winner's main WAL: %d records from %v (%v), want [5, 20)", len(recs), recs, err)
	}
	for i, r := range recs {
		if r.Epoch != 1 || string(r.Value) != fmt.Sprintf("a-%d", i+5) || r.Node != "a" {
			t.Fatalf("copied record %+v", r)
		}
	}
	tc.cat.mu.Lock()
	starts := fmt.Sprint(tc.cat.starts)
	tc.cat.mu.Unlock()
	if !strings.HasPrefix(starts, "[20") || strings.Trim(strings.ReplaceAll(starts, "20", ""), "[ ]") != "" {
		t.Fatalf("take-overs tried with starts %s, want the end of the copies, 20", starts)
	}
	testkit.Eventually(t, 10*time.Second, "the takeover to be counted", func() bool { return winner.r.Stats().Takeovers == 1 })
	if st := loser.r.Stats(); st.Takeovers != 0 {
		t.Fatalf("loser stats %+v", st)
	}
	testkit.Eventually(t, 10*time.Second, "the loser to release up to the mark", func() bool { rel, _ := loser.stored(t, "a", 0); return rel == 5 })
	tc.cat.setMark("s.t", 0, 20)
	testkit.Eventually(t, 10*time.Second, "the loser to release its whole copy", func() bool { rel, _ := loser.stored(t, "a", 0); return rel == 20 })

	// a comes back with its old WAL and tries to replicate partition 0.
	tc.net.setCut("addr-a", false)
	tc.setState("a", cluster.Alive)
	back := tc.start("a", 3, Degrade, t.TempDir())
	if err := back.ingest(t, 0, 1, 0); !errors.Is(err, ErrFenced) {
		t.Fatalf("returning owner's append: %v", err)
	}
}

// TestTakeoverByFullestHolder: b held a's partition, then left a's ring for
// a while (c caught up and got more); when a dies, b, whose copy is stale,
// leaves the takeover to c, which holds every acknowledged record. Copies
// out of the owner's ring are released as the table's mark passes.
func TestTakeoverByFullestHolder(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b", "c")
	a, b, c := tc.nodes["a"], tc.nodes["b"], tc.nodes["c"]
	tc.cat.owner[pkey{"s.t", 0}] = "a"
	if err := a.ingest(t, 0, 10, 0); err != nil {
		t.Fatal(err)
	}
	tc.setState("b", cluster.Dead) // a's ring moves on to c
	if err := a.ingest(t, 0, 10, 0); err != nil {
		t.Fatal(err)
	}
	tc.setState("b", cluster.Alive) // b back, but a appends nothing more
	if _, next := b.stored(t, "a", 0); next != 10 {
		t.Fatalf("b holds up to %d, want 10", next)
	}
	// c is out of a's ring again: its copy is released as the table's mark
	// passes, though nobody tells it.
	tc.cat.setMark("s.t", 0, 15)
	testkit.Eventually(t, 10*time.Second, "c to release its copy up to the mark", func() bool { rel, _ := c.stored(t, "a", 0); return rel == 15 })
	if _, next := c.stored(t, "a", 0); next != 20 {
		t.Fatalf("c holds up to %d, want 20", next)
	}
	a.close()
	tc.net.setCut("addr-a", true)
	tc.setState("a", cluster.Dead)
	select {
	case <-c.adopted:
	case <-b.adopted:
		t.Fatal("b, holding less, took over")
	case <-time.After(10 * time.Second):
		t.Fatal("nobody took over")
	}
	recs, err := c.main.Read("s.t", 0, 0, 0, 0)
	if err != nil || len(recs) != 5 || recs[0].Offset != 15 {
		t.Fatalf("c copied %d records (%v), want [15, 20)", len(recs), err)
	}
	tc.cat.setMark("s.t", 0, 20)
	testkit.Eventually(t, 10*time.Second, "b to release its stale copy", func() bool { rel, _ := b.stored(t, "a", 0); return rel == 10 })
}

// TestTakeoverClaimHeldAcrossRetries: a takeover whose first attempt fails
// after winning the catalog keeps ingest's claim on the partition until it
// has copied and adopted it on a later attempt.
func TestTakeoverClaimHeldAcrossRetries(t *testing.T) {
	tc := newTestCluster(t, 2, Degrade, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	var mu sync.Mutex
	claims, releases, heldAtAdopt := 0, 0, false
	b.owner.set(func(o *testOwner) {
		o.claim = func(string, int32) func() {
			mu.Lock()
			claims++
			mu.Unlock()
			return func() { mu.Lock(); releases++; mu.Unlock() }
		}
		o.adopt = func(s string, p int32, e, next int64) error {
			mu.Lock()
			heldAtAdopt = claims == 1 && releases == 0
			mu.Unlock()
			b.adopted <- pkey{s, p}
			return nil
		}
	})
	tc.cat.owner[pkey{"s.t", 0}] = "a"
	tc.cat.failMarks.FailNext(2)
	if err := a.ingest(t, 0, 5, 0); err != nil {
		t.Fatal(err)
	}
	a.close()
	tc.net.setCut("addr-a", true)
	tc.setState("a", cluster.Dead)
	select {
	case <-b.adopted:
	case <-time.After(10 * time.Second):
		t.Fatal("no takeover")
	}
	testkit.Eventually(t, 10*time.Second, "the claim to be released", func() bool { mu.Lock(); defer mu.Unlock(); return releases == 1 })
	mu.Lock()
	defer mu.Unlock()
	if !heldAtAdopt || claims != 1 {
		t.Fatalf("claims %d, releases %d, claim held at adopt: %v", claims, releases, heldAtAdopt)
	}
}

// TestFreezeRefusesOrigin: a replica partition frozen for a take-over
// refuses its origin's appends (the origin counts the replica as
// missing) and its end, read after the freeze, is exact: nothing the
// origin sends later is stored, so every record at or above it is one
// only the origin holds.
func TestFreezeRefusesOrigin(t *testing.T) {
	tc := newTestCluster(t, 2, Refuse, "a", "b")
	a, b := tc.nodes["a"], tc.nodes["b"]
	if err := a.ingest(t, 0, 5, 0); err != nil {
		t.Fatal(err)
	}
	s, err := b.r.storeOf("a")
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.wal()
	if err != nil {
		t.Fatal(err)
	}
	end, err := b.r.freeze(context.Background(), "a", w, pkey{"s.t", 0})
	if err != nil || end != 5 {
		t.Fatalf("freeze: end %d, %v", end, err)
	}
	if err := a.ingest(t, 0, 3, 0); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("append to a frozen replica under refuse: %v", err)
	}
	if _, next := b.stored(t, "a", 0); next != end {
		t.Fatalf("frozen replica stored up to %d, froze at %d", next, end)
	}
	b.r.unfreeze(pkey{"s.t", 0})
	testkit.Eventually(t, 10*time.Second, "the replica to catch up once unfrozen", func() bool { _, next := b.stored(t, "a", 0); return next == 8 })
}
