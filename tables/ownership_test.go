package tables

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
)

func mustOwners(t *testing.T, c *Catalog, stream string) map[int32]Ownership {
	t.Helper()
	o, err := c.Owners(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestAllocateSetsOwner(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	pa, err := c.AllocatePartition(ctx, "o.s", "a")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := c.AllocatePartition(ctx, "o.s", "b")
	if err != nil {
		t.Fatal(err)
	}
	got := mustOwners(t, c, "o.s")
	if len(got) != 2 || got[pa] != (Ownership{"a", 0}) || got[pb] != (Ownership{"b", 0}) {
		t.Fatalf("owners %v", got)
	}
	tb, _ := c.LoadTable(ctx, "o.s")
	if tb.Properties()[PropOwner+"0"] != "a" || tb.Properties()[PropEpoch+"0"] != "0" {
		t.Fatalf("properties %v", tb.Properties())
	}
}

// TestOwnersOldTable: without owner properties the node mapping owns at
// epoch 0; explicit properties win over it.
func TestOwnersOldTable(t *testing.T) {
	got := ownersOf(iceberg.Properties{
		PropNodePartition + "a": "0", PropNodePartition + "b": "1", PropNextPartition: "2",
		PropHighWater + "0": "5",
	})
	if len(got) != 2 || got[0] != (Ownership{"a", 0}) || got[1] != (Ownership{"b", 0}) {
		t.Fatalf("old table owners %v", got)
	}
	got = ownersOf(iceberg.Properties{
		PropNodePartition + "a": "0", PropNodePartition + "b": "1",
		PropOwner + "0": "b", PropEpoch + "0": "3", PropEpoch + "7": "2", PropEpoch + "x": "1",
	})
	if len(got) != 2 || got[0] != (Ownership{"b", 3}) || got[1] != (Ownership{"b", 0}) {
		t.Fatalf("owners %v", got)
	}
}

func TestTakeOver(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	p, _ := c.AllocatePartition(ctx, "o.s", "a")
	if _, err := c.AllocatePartition(ctx, "o.s", "b"); err != nil {
		t.Fatal(err)
	}
	e, err := c.TakeOver(ctx, "o.s", p, "a", "b")
	if err != nil || e != 1 {
		t.Fatalf("take over: %d, %v", e, err)
	}
	// A retry by the winner is a no-op returning its epoch.
	if e, err := c.TakeOver(ctx, "o.s", p, "a", "b"); err != nil || e != 1 {
		t.Fatalf("repeat: %d, %v", e, err)
	}
	var ne *NotOwnerError
	if _, err := c.TakeOver(ctx, "o.s", p, "a", "c"); !errors.As(err, &ne) || !errors.Is(err, ErrNotOwner) || ne.Owner != "b" || ne.Epoch != 1 {
		t.Fatalf("stale take over: %v", err)
	}
	if _, err := c.TakeOver(ctx, "o.s", 9, "a", "c"); !errors.As(err, &ne) || ne.Owner != "" {
		t.Fatalf("unknown partition: %v", err)
	}
	if _, err := c.TakeOver(ctx, "o.s", p, "b", "b"); !errors.Is(err, ErrInvalidTakeOver) {
		t.Fatalf("to itself: %v", err)
	}
	// Taking it back raises the epoch again.
	if e, err := c.TakeOver(ctx, "o.s", p, "b", "a"); err != nil || e != 2 {
		t.Fatalf("take back: %d, %v", e, err)
	}
	if got := mustOwners(t, c, "o.s")[p]; got != (Ownership{"a", 2}) {
		t.Fatalf("owner %v", got)
	}
}

// TestTakeOverConcurrent: several nodes race to take one partition from
// its dead owner; exactly one wins, the others learn who did.
func TestTakeOverConcurrent(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	p, _ := c.AllocatePartition(ctx, "o.s", "dead")
	nodes := []string{"n1", "n2", "n3"}
	epochs := make([]int64, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			epochs[i], errs[i] = c.TakeOver(ctx, "o.s", p, "dead", n)
		}()
	}
	wg.Wait()
	winner := ""
	for i, n := range nodes {
		var ne *NotOwnerError
		switch {
		case errs[i] == nil:
			if winner != "" {
				t.Fatalf("%s and %s both took partition %d", winner, n, p)
			}
			winner = n
			if epochs[i] != 1 {
				t.Fatalf("winner's epoch %d", epochs[i])
			}
		case !errors.As(errs[i], &ne):
			t.Fatalf("%s: %v", n, errs[i])
		}
	}
	if winner == "" {
		t.Fatal("nobody took the partition")
	}
	for i := range nodes {
		var ne *NotOwnerError
		if errors.As(errs[i], &ne) && (ne.Owner != winner || ne.Epoch != 1) {
			t.Fatalf("loser told owner %q epoch %d, winner is %s", ne.Owner, ne.Epoch, winner)
		}
	}
	if got := mustOwners(t, c, "o.s")[p]; got != (Ownership{winner, 1}) {
		t.Fatalf("owner %v, winner %s", got, winner)
	}
}

// TestStaleEpochFenced: after a take-over, the old owner's append (epoch 0)
// is fenced and never committed, whether it covers new offsets or the
// same offsets as the new owner's; the new owner commits at its epoch.
func TestStaleEpochFenced(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "factory.telemetry"
	p, _ := c.AllocatePartition(ctx, stream, "a")
	ts := time.Now().UnixMicro()
	first := testRecords(p, 0, 10, ts)
	if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: 0, To: 10, Files: []FileMeta{writeFile(t, c, stream, first)}}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TakeOver(ctx, stream, p, "a", "b"); err != nil {
		t.Fatal(err)
	}
	stale := testRecords(p, 10, 5, ts)
	var fe *FencedError
	_, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: 10, To: 15, Epoch: 0, Files: []FileMeta{writeFile(t, c, stream, stale)}}}, nil)
	if !errors.As(err, &fe) || !errors.Is(err, ErrFenced) || fe.Owner != "b" || fe.Epoch != 1 || fe.Have != 0 || fe.HighWater != 10 {
		t.Fatalf("stale commit: %v", err)
	}
	// An append the mark already covers is not fenced: it is done.
	res, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: 0, To: 10, Epoch: 0}}, nil)
	if err != nil || len(res.Already) != 1 {
		t.Fatalf("covered append: %+v, %v", res, err)
	}
	// The new owner continues densely at its epoch.
	next := testRecords(p, 10, 3, ts)
	for _, r := range next {
		r.Node = "b"
	}
	if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: 10, To: 13, Epoch: 1, Files: []FileMeta{writeFile(t, c, stream, next)}}}, nil); err != nil {
		t.Fatal(err)
	}
	// The old owner, even at the new mark, is still fenced.
	_, err = c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: 13, To: 15, Epoch: 0, Files: []FileMeta{writeFile(t, c, stream, testRecords(p, 13, 2, ts))}}}, nil)
	if !errors.As(err, &fe) || fe.HighWater != 13 {
		t.Fatalf("stale commit at the mark: %v", err)
	}
	got, err := c.ScanSorted(ctx, stream, ScanOptions{Partition: -1})
	if err != nil || len(got) != 13 {
		t.Fatalf("scan: %v, %d rows", err, len(got))
	}
	for i, r := range got {
		want := "n1" // testRecords' node
		if i >= 10 {
			want = "b"
		}
		if r.Offset != int64(i) || r.Node != want {
			t.Fatalf("row %d: offset %d node %s", i, r.Offset, r.Node)
		}
	}
}

// TestFenceRacesTakeOver: a stale committer racing a take-over either
// commits before it (its data is in, with the old epoch's mark) or is
// fenced; the take-over's epoch always ends up in the table.
func TestFenceRacesTakeOver(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "factory.telemetry"
	p, _ := c.AllocatePartition(ctx, stream, "a")
	ts := time.Now().UnixMicro()
	committed := 0
	for round := 0; round < 4; round++ {
		from := committed
		recs := testRecords(p, from, 5, ts)
		f := writeFile(t, c, stream, recs)
		var wg sync.WaitGroup
		var commitErr, takeErr error
		from64 := int64(from)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, commitErr = c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: from64, To: from64 + 5, Epoch: int64(2 * round), Files: []FileMeta{f}}}, nil)
		}()
		go func() {
			defer wg.Done()
			_, takeErr = c.TakeOver(ctx, stream, p, "a", "b")
		}()
		wg.Wait()
		if takeErr != nil {
			t.Fatal(takeErr)
		}
		switch {
		case commitErr == nil:
			committed += 5
		case !errors.Is(commitErr, ErrFenced):
			t.Fatalf("round %d: %v", round, commitErr)
		}
		tb, _ := c.LoadTable(ctx, stream)
		if HighWater(tb, p) != int64(committed) {
			t.Fatalf("round %d: mark %d, committed %d", round, HighWater(tb, p), committed)
		}
		// Hand it back to a for the next round (epoch 2*round+2).
		if e, err := c.TakeOver(ctx, stream, p, "b", "a"); err != nil || e != int64(2*round+2) {
			t.Fatalf("round %d: back: %d, %v", round, e, err)
		}
	}
}

// TestAllocateAfterTakeOver: a node whose partition was taken gets a new
// one (and keeps it); the taker keeps its own mapping.
func TestAllocateAfterTakeOver(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	pa, _ := c.AllocatePartition(ctx, "o.s", "a")
	pb, _ := c.AllocatePartition(ctx, "o.s", "b")
	if _, err := c.TakeOver(ctx, "o.s", pa, "a", "b"); err != nil {
		t.Fatal(err)
	}
	na, err := c.AllocatePartition(ctx, "o.s", "a")
	if err != nil || na == pa || na == pb {
		t.Fatalf("a after losing %d: %d, %v", pa, na, err)
	}
	if again, _ := c.AllocatePartition(ctx, "o.s", "a"); again != na {
		t.Fatalf("a again: %d, want %d", again, na)
	}
	if got, _ := c.AllocatePartition(ctx, "o.s", "b"); got != pb {
		t.Fatalf("b: %d, want its own %d", got, pb)
	}
	owners := mustOwners(t, c, "o.s")
	if owners[pa] != (Ownership{"b", 1}) || owners[pb] != (Ownership{"b", 0}) || owners[na] != (Ownership{"a", 0}) {
		t.Fatalf("owners %v", owners)
	}
}

// TestTakeOverAtRecordsStart: a take-over with a start records, in its
// own commit, the first offset of the new owner's history: the start
// given (the end of the taker's copy), or the table's mark if that is
// higher (the old owner committed past the copy). A take-over without a
// start clears it, so an old start is never read as the new epoch's.
func TestTakeOverAtRecordsStart(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "o.s"
	p, _ := c.AllocatePartition(ctx, stream, "a")
	ts := time.Now().UnixMicro()
	f := writeFile(t, c, stream, testRecords(p, 0, 5, ts))
	if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: 0, To: 5, Files: []FileMeta{f}}}, nil); err != nil {
		t.Fatal(err)
	}
	tb, _ := c.LoadTable(ctx, stream)
	if _, _, ok := EpochStart(tb, p); ok {
		t.Fatal("a start before any take-over")
	}
	for _, tc := range []struct {
		from, to   string
		start      int64
		wantEpoch  int64
		wantStart  int64
		wantRecord bool
	}{
		{"a", "b", 9, 1, 9, true}, // the copy ends above the mark
		{"b", "a", 3, 2, 5, true}, // the mark is above the copy's end
		{"a", "b", -1, 3, 0, false},
	} {
		e, err := c.TakeOverAt(ctx, stream, p, tc.from, tc.to, tc.start)
		if err != nil || e != tc.wantEpoch {
			t.Fatalf("take over %+v: %d, %v", tc, e, err)
		}
		o, start, ok, err := c.EpochStart(ctx, stream, p)
		if err != nil || o != (Ownership{tc.to, tc.wantEpoch}) || ok != tc.wantRecord || start != tc.wantStart {
			t.Fatalf("take over %+v: owner %v start %d %v, %v", tc, o, start, ok, err)
		}
	}
}
