package owner

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tributary-io/tributary/uplink/quarantine"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// checkQuarantined asserts that qdir holds exactly one quarantine file
// whose reason mentions why and whose records are want, in order, byte for
// byte what a replay produces again (stream, partition, offset, key, value,
// headers).
func checkQuarantined(t *testing.T, qdir, why string, want ...*tributary.Record) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(qdir, "*"+quarantine.FileSuffix))
	if len(files) != 1 {
		t.Fatalf("quarantine files %v, want one", files)
	}
	got, reason, err := quarantine.ReadReason(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, why) {
		t.Fatalf("quarantine reason %q, want it to say %q", reason, why)
	}
	if len(got) != len(want) {
		t.Fatalf("%d records quarantined, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Stream != w.Stream || g.Partition != w.Partition || g.Offset != w.Offset || g.Epoch != w.Epoch ||
			!bytes.Equal(g.Value, w.Value) || !bytes.Equal(g.Key, w.Key) || len(g.Headers) != len(w.Headers) || g.Node != w.Node {
			t.Fatalf("quarantined record %d: %+v, want %+v", i, g, w)
		}
	}
}

// lost is node a of a test, whose partition p of s.x was taken over by b
// (the fence noticed) while a's WAL still held its records stale.
type lost struct {
	ctx   context.Context
	dir   string
	cat   *tables.Catalog
	a     *ingestEnv
	p     int32
	stale []*tributary.Record
}

func losePartition(t *testing.T) *lost {
	t.Helper()
	l := &lost{ctx: context.Background(), dir: t.TempDir()}
	l.cat = openCatalog(t, l.dir)
	l.a = newIngestEnv(t, "a", l.dir, l.cat)
	first := l.a.publish(t, "s.x")
	l.p = first.Partition
	l.stale = []*tributary.Record{first, l.a.publish(t, "s.x"), l.a.publish(t, "s.x")}
	if _, err := l.cat.TakeOver(l.ctx, "s.x", l.p, "a", "b"); err != nil {
		t.Fatal(err)
	}
	l.a.in.Fenced("s.x", l.p)
	return l
}

// TestBookAdoptQuarantinesStale: a node whose partition was taken over
// (its records there unreleased: never uploaded, or not released yet)
// later owns it again at a higher epoch and adopts it: the records of its
// earlier ownership leave the WAL for the quarantine, with the reason,
// never silently.
func TestBookAdoptQuarantinesStale(t *testing.T) {
	l := losePartition(t)
	a, p := l.a, l.p
	qdir := filepath.Join(l.dir, "quarantine")
	q := quarantine.New(qdir)
	a.in.UseQuarantine(q)
	if r := a.publish(t, "s.x"); r.Partition == p { // a partition of its own again
		t.Fatalf("after the fence: %+v", r)
	}
	if _, err := l.cat.TakeOver(l.ctx, "s.x", p, "b", "a"); err != nil {
		t.Fatal(err)
	}
	r, err := a.produce("s.x", p) // adopted lazily at epoch 2
	if err != nil || r.Epoch != 2 {
		t.Fatalf("produce after taking it back: %+v, %v", r, err)
	}
	checkQuarantined(t, qdir, "adopted partition", l.stale...)
	if q.Kept() != 3 {
		t.Fatalf("kept %d", q.Kept())
	}
	recs, err := a.wal.Read("s.x", p, 0, 0, 0)
	if err != nil || len(recs) != 1 || recs[0].Epoch != 2 {
		t.Fatalf("wal after adopt: %d records, %v", len(recs), err)
	}
}

// brokenQuarantine fails Keep while broken; then keeps in memory.
type brokenQuarantine struct {
	mu     sync.Mutex
	broken bool
	kept   []*tributary.Record
}

func (q *brokenQuarantine) Keep(_ string, _ int32, recs []*tributary.Record, _ string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.broken {
		return errors.New("disk full")
	}
	q.kept = append(q.kept, recs...)
	return nil
}

// TestBookKeepsWhatCannotBeQuarantined: without a working quarantine the
// stale records stay in the WAL (claim, adopt), a take-over waits for
// them (TakeOver fails), and once the quarantine works they are kept
// there and the take-over goes on.
func TestBookKeepsWhatCannotBeQuarantined(t *testing.T) {
	l := losePartition(t)
	ctx, a, p := l.ctx, l.a, l.p
	// No quarantine at all: nothing is dropped.
	release := a.in.Claim("s.x", p)
	if st, ok := a.wal.Partition("s.x", p); !ok || st.Next-st.Released != 3 {
		t.Fatalf("claim without a quarantine dropped records: %+v", st)
	}
	release()
	q := &brokenQuarantine{broken: true}
	a.in.UseQuarantine(q)
	release = a.in.Claim("s.x", p)
	defer release()
	if st, ok := a.wal.Partition("s.x", p); !ok || st.Next-st.Released != 3 {
		t.Fatalf("claim with a failing quarantine dropped records: %+v", st)
	}
	if _, _, err := a.in.TakeOver(ctx, "s.x", p, "b", -1); err == nil {
		t.Fatal("take-over went on with stale records in the WAL")
	}
	if _, e, _ := a.in.Owner(ctx, "s.x", p); e != 1 {
		t.Fatalf("epoch %d after the refused take-over, want 1", e)
	}
	if err := a.in.Adopt("s.x", p, 2, 0); err == nil {
		t.Fatal("adopt dropped records it could not quarantine")
	}
	q.mu.Lock()
	q.broken = false
	q.mu.Unlock()
	epoch, won, err := a.in.TakeOver(ctx, "s.x", p, "b", -1)
	if err != nil || !won || epoch != 2 {
		t.Fatalf("take-over once the quarantine works: %d %v %v", epoch, won, err)
	}
	if _, ok := a.wal.Partition("s.x", p); ok || len(q.kept) != 3 {
		t.Fatalf("after the take-over: wal partition present %v, %d quarantined", ok, len(q.kept))
	}
}
