package uplink

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/owner"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/uplink/quarantine"
	"github.com/tributary-io/tributary/wal"
)

// racingLog appends race (once) to the WAL just before the fence's
// first write to it (seal, re-admission or drop): a record acknowledged
// after the fence read the partition's state.
type racingLog struct {
	*wal.WAL
	once sync.Once
	race *tributary.Record
	err  error
}

func (l *racingLog) hook() {
	l.once.Do(func() {
		if l.race != nil {
			l.err = l.WAL.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{l.race}}).Err
		}
	})
}

// Apply races before the fence's writes: OpSeal, OpReadmit and OpDrop.
func (l *racingLog) Apply(ctx context.Context, o wal.Op) wal.Result {
	switch o.Kind {
	case wal.OpSeal, wal.OpReadmit, wal.OpDrop:
		l.hook()
	}
	return l.WAL.Apply(ctx, o)
}

// fencedSite is node n1 with partition p of a stream, 5 records
// committed and 7 more only in its WAL (offsets 5-11, mine-0..6), when n2
// takes p over (start: where n2's copy ends, -1 for a take-over that
// records none) and commits its copy of [5, start).
type fencedSite struct {
	e     *env
	p     int32
	book  *owner.Book
	first [][]byte
	mine  [][]byte
}

const readmitStream = "r.s"

func newFencedSite(t *testing.T, start int64) *fencedSite {
	t.Helper()
	e := newEnv(t, 0)
	ctx := context.Background()
	book := owner.New("n1", e.wal, e.cat, quietLogger())
	p, _, err := book.Own(ctx, readmitStream)
	if err != nil {
		t.Fatal(err)
	}
	fs := &fencedSite{e: e, p: p, book: book}
	fs.first = appendVals(t, e.wal, readmitStream, p, 0, "first", 5)
	u := New(Config{Node: "n1", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	fs.mine = appendVals(t, e.wal, readmitStream, p, 0, "mine", 7)
	if _, err := e.cat.TakeOverAt(ctx, readmitStream, p, "n1", "n2", start); err != nil {
		t.Fatal(err)
	}
	if start > 5 { // n2 uploads its copy of [5, start) at epoch 1
		var recs []*tributary.Record
		for off := int64(5); off < start; off++ {
			recs = append(recs, &tributary.Record{Stream: readmitStream, Partition: p, Offset: off, Epoch: 1,
				Timestamp: time.Now().UnixMicro(), Value: fs.mine[off-5], Topic: "t", Source: "mqtt"})
		}
		u2 := New(Config{Node: "n2", Logger: quietLogger()}, e.wal, e.cat, e.bucket)
		files, err := u2.upload(ctx, readmitStream, recs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cat.CommitAppend(ctx, readmitStream, []tables.PartitionAppend{{Partition: p, From: 5, To: start, Epoch: 1, Files: files}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return fs
}

// uplink is n1's uplink over log, re-admitting into its book's partition.
func (fs *fencedSite) uplink(t *testing.T, log Log, qdir string) *Uplink {
	u := New(Config{Node: "n1", Logger: quietLogger(), QuarantineDir: qdir}, log, fs.e.cat, fs.e.bucket)
	u.OnFence(fs.book)
	u.ReadmitInto(fs.book)
	return u
}

func quarantined(t *testing.T, dir string) [][]byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"+quarantine.FileSuffix))
	var out [][]byte
	for _, f := range files {
		recs, err := quarantine.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			out = append(out, r.Value)
		}
	}
	return out
}

// TestFenceReadmits: n2 took partition p over from a stale copy ending
// at offset 8, so n1's acknowledged records at 8-11 are only in n1's WAL.
// The fence re-admits exactly those into n1's own (new) partition, with
// dense new offsets from its next one and every other field kept, and
// drops 5-7 (n2 uploaded them). The table then holds every record once,
// the quarantine nothing; p is sealed in the WAL, so a late append of
// the old epoch is refused, not stored at offset 0.
func TestFenceReadmits(t *testing.T) {
	fs := newFencedSite(t, 8)
	ctx := context.Background()
	qdir := t.TempDir()
	u := fs.uplink(t, fs.e.wal, qdir)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	q, _, err := fs.book.Own(ctx, readmitStream)
	if err != nil || q == fs.p {
		t.Fatalf("own partition after the fence: %d, %v", q, err)
	}
	recs, err := fs.e.wal.Read(readmitStream, q, 0, 0, 0)
	if err != nil || len(recs) != 4 {
		t.Fatalf("owned partition: %d records, %v", len(recs), err)
	}
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprintf("mine-%d", 3+i) || r.Topic != "t" || r.Source != "mqtt" {
			t.Fatalf("re-admitted record %d: %+v", i, r)
		}
	}
	if st := u.Stats(); st.Fenced != 1 || st.ReadmittedRecords != 4 || st.FencedRecords != 3 || st.QuarantinedRecords != 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := fs.e.wal.Partition(readmitStream, fs.p); ok {
		t.Fatal("fenced partition still in the WAL")
	}
	late := &tributary.Record{Stream: readmitStream, Partition: fs.p, Epoch: 0, Value: []byte("late")}
	if err := fs.e.wal.Apply(ctx, wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{late}}).Err; !errors.Is(err, tributary.ErrFenced) {
		t.Fatalf("append to the fenced partition at the old epoch: %v", err)
	}
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	checkTable(t, fs.e.cat, readmitStream, map[int32][][]byte{
		fs.p: append(append([][]byte{}, fs.first...), fs.mine[:3]...),
		q:    fs.mine[3:],
	})
	if got := quarantined(t, qdir); len(got) != 0 {
		t.Fatalf("quarantined %q", got)
	}
	if n := unreleased(fs.e.wal); n != 0 {
		t.Fatalf("%d records left", n)
	}
}

// TestFenceRace: a record acknowledged into the fenced partition after
// the fence read its state, just before the fence's first WAL write, is
// neither lost nor doubled: re-admitted with the others (the table holds
// it once), or — for a table that does not record the new owner's start
// — in the quarantine with the others.
func TestFenceRace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start int64
	}{{"readmit", 8}, {"quarantine", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFencedSite(t, tc.start)
			ctx := context.Background()
			qdir := t.TempDir()
			rl := &racingLog{WAL: fs.e.wal, race: &tributary.Record{Stream: readmitStream, Partition: fs.p, Epoch: 0,
				Value: []byte("raced"), Topic: "t", Source: "mqtt"}}
			u := fs.uplink(t, rl, qdir)
			if err := u.SyncAll(ctx); err != nil {
				t.Fatal(err)
			}
			if rl.err != nil {
				t.Fatalf("the racing append: %v", rl.err)
			}
			if err := u.SyncAll(ctx); err != nil {
				t.Fatal(err)
			}
			q, _, err := fs.book.Own(ctx, readmitStream)
			if err != nil {
				t.Fatal(err)
			}
			want := map[int32][][]byte{fs.p: fs.first}
			var wantQ [][]byte
			if tc.start < 0 {
				wantQ = append(append(wantQ, fs.mine...), []byte("raced"))
			} else {
				want[fs.p] = append(want[fs.p], fs.mine[:3]...)
				want[q] = append(append([][]byte{}, fs.mine[3:]...), []byte("raced"))
			}
			checkTable(t, fs.e.cat, readmitStream, want)
			if got := quarantined(t, qdir); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", wantQ) {
				t.Fatalf("quarantined %q, want %q", got, wantQ)
			}
			if _, ok := fs.e.wal.Partition(readmitStream, fs.p); ok {
				t.Fatal("fenced partition still in the WAL")
			}
		})
	}
}

// TestFenceWithoutStartQuarantines: a table whose take-over recorded no
// start (an older version's) still quarantines the fenced records, with
// a home configured: nothing is re-admitted on a guess.
func TestFenceWithoutStartQuarantines(t *testing.T) {
	fs := newFencedSite(t, -1)
	ctx := context.Background()
	qdir := t.TempDir()
	u := fs.uplink(t, fs.e.wal, qdir)
	if err := u.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if st := u.Stats(); st.Fenced != 1 || st.ReadmittedRecords != 0 || st.QuarantinedRecords != 7 {
		t.Fatalf("stats %+v", st)
	}
	if got := quarantined(t, qdir); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", fs.mine) {
		t.Fatalf("quarantined %q", got)
	}
}
