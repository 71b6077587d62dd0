package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// faultLayer is a journal file layer that keeps what is written in memory
// until it is synced, as the page cache does until fdatasync; crash drops
// every unsynced byte (writing a torn prefix of them, as a power failure
// may), and every later write or sync fails. lie makes Sync report
// success without making anything durable: the missing fsync a test must
// catch.
type faultLayer struct {
	mu      sync.Mutex
	files   []*faultFile
	crashed bool
	lie     bool
	torn    int // bytes of the unsynced data written at the crash
}

type faultFile struct {
	l       *faultLayer
	f       *os.File
	pending []byte
}

var errCrashed = errors.New("fault layer: crashed")

func (l *faultLayer) OpenSegment(name string) (journalFile, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return nil, errCrashed
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	ff := &faultFile{l: l, f: f}
	l.files = append(l.files, ff)
	return ff, nil
}

func (l *faultLayer) SyncDir(string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.crashed {
		return errCrashed
	}
	return nil
}

func (f *faultFile) Write(p []byte) (int, error) {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	if f.l.crashed {
		return 0, errCrashed
	}
	f.pending = append(f.pending, p...)
	return len(p), nil
}

func (f *faultFile) Sync() error {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	if f.l.crashed {
		return errCrashed
	}
	if f.l.lie {
		return nil
	}
	if _, err := f.f.Write(f.pending); err != nil {
		return err
	}
	f.pending = f.pending[:0]
	return nil
}

func (f *faultFile) Close() error {
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	return f.f.Close()
}

// crash drops what was not synced (after writing its first torn bytes).
func (l *faultLayer) crash() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.crashed = true
	for _, f := range l.files {
		if n := min(l.torn, len(f.pending)); n > 0 {
			f.f.Write(f.pending[:n])
		}
		f.pending = nil
	}
}

// ackLog collects acknowledged records by (stream, partition, offset).
type ackLog struct {
	mu    sync.Mutex
	acked map[ackKey]string
}

func (a *ackLog) add(recs []*tributary.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range recs {
		a.acked[ackKey{r.Stream, r.Partition, r.Offset}] = string(r.Value)
	}
}

// writeUntilCrash appends from several goroutines (records and Kafka
// batches) until n records were acknowledged, then crashes l and the WAL.
func writeUntilCrash(t *testing.T, w *WAL, l *faultLayer, n int) *ackLog {
	t.Helper()
	acks := &ackLog{acked: map[ackKey]string{}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var once sync.Once
	count := func() int {
		acks.mu.Lock()
		defer acks.mu.Unlock()
		return len(acks.acked)
	}
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				recs := []*tributary.Record{rec("j.s", int32(g%2), fmt.Sprintf("g%d-%d", g, i)), rec("j.t", 0, fmt.Sprintf("t%d-%d", g, i))}
				if err := w.Append(context.Background(), recs...); err != nil {
					return // crashed
				}
				acks.add(recs)
				if count() >= n {
					once.Do(func() { l.crash(); close(stop) })
				}
			}
		}()
	}
	wg.Wait()
	once.Do(func() { l.crash(); close(stop) })
	w.crash()
	return acks
}

// lostAcks reopens the WAL at path and returns how many acknowledged
// records it lacks; it also checks that offsets are dense and that
// appending continues at the next offset.
func lostAcks(t *testing.T, path string, acks *ackLog) int {
	t.Helper()
	w, err := Open(Options{Path: path, NoSync: true})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer w.Close()
	stored := map[ackKey]string{}
	for _, ps := range w.Partitions() {
		recs := readPartition(t, w, ps.Stream, ps.Partition)
		if int64(len(recs)) != ps.Next-ps.Released {
			t.Fatalf("%+v holds %d records", ps, len(recs))
		}
		for i, r := range recs {
			if r.Offset != ps.Released+int64(i) {
				t.Fatalf("%s/%d: record %d at offset %d: not dense", ps.Stream, ps.Partition, i, r.Offset)
			}
			stored[ackKey{r.Stream, r.Partition, r.Offset}] = string(r.Value)
		}
		r := rec(ps.Stream, ps.Partition, "after")
		if err := w.Append(context.Background(), r); err != nil || r.Offset != ps.Next {
			t.Fatalf("append after the crash: offset %d, want %d (%v)", r.Offset, ps.Next, err)
		}
	}
	lost := 0
	for k, v := range acks.acked {
		if stored[k] != v {
			lost++
		}
	}
	return lost
}

// TestJournalLostUnsyncedWrites: a crash loses every journal byte not
// synced (some of it written torn); every acknowledged record survives,
// whether bbolt holds it (the applier running) or only the journal does
// (a crash between the journal's sync and bbolt's commit). The same
// crash with a layer whose sync does nothing loses acknowledged records,
// so this test fails when the acknowledgement does not wait for the
// journal's sync.
func TestJournalLostUnsyncedWrites(t *testing.T) {
	rng := testkit.Rand(t, 0, 1)
	for _, c := range []struct {
		name       string
		pause, lie bool
	}{{"applying", false, false}, {"journal only", true, false}, {"no sync", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			for round := range 3 {
				path := filepath.Join(t.TempDir(), "wal.db")
				l := &faultLayer{lie: c.lie, torn: rng.IntN(200)}
				w, err := Open(Options{Path: path, fs: l, testPause: c.pause})
				if err != nil {
					t.Fatal(err)
				}
				acks := writeUntilCrash(t, w, l, 50+rng.IntN(500))
				lost := lostAcks(t, path, acks)
				switch {
				case c.lie && lost == 0:
					t.Fatalf("round %d: a journal that is never synced lost none of %d acknowledged records: the test cannot see a missing fsync", round, len(acks.acked))
				case !c.lie && lost > 0:
					t.Fatalf("round %d: %d of %d acknowledged records lost", round, lost, len(acks.acked))
				}
			}
		})
	}
}

// TestJournalTornTail: the journal's last record is torn (cut short, a
// byte flipped, or followed by garbage); the WAL opens without it and
// with every record before it, and appends after it are kept across the
// next crash too (the torn bytes are overwritten, never appended to).
func TestJournalTornTail(t *testing.T) {
	for _, tear := range []string{"cut", "flip", "garbage"} {
		t.Run(tear, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "wal.db")
			w, err := Open(Options{Path: path, testPause: true})
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				appendRecs(t, w, "s", 0, 3)
			}
			seg := w.journal.curSeg.name
			w.crash()
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			// The records' sizes: find the last one's start.
			var starts []int
			for off := 0; off < len(b); {
				_, _, size, err := nextRecord(b[off:])
				if err != nil {
					break
				}
				starts = append(starts, off)
				off += size
			}
			if len(starts) != 5 {
				t.Fatalf("%d journal records, want 5", len(starts))
			}
			last := starts[4]
			switch tear {
			case "cut":
				b = b[:last+(len(b)-last)/2]
			case "flip":
				b[len(b)-3] ^= 0x40
			case "garbage":
				b = append(b[:last], []byte("\x10\x00\x00\x00garbage garbage garbage")...)
			}
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
			w, err = Open(Options{Path: path, testPause: true})
			if err != nil {
				t.Fatalf("open after a torn journal tail: %v", err)
			}
			if ps, _ := w.Partition("s", 0); ps.Next != 12 {
				t.Fatalf("next %d after the torn tail, want 12 (the records before it)", ps.Next)
			}
			r := rec("s", 0, "after")
			if err := w.Append(context.Background(), r); err != nil || r.Offset != 12 {
				t.Fatalf("append after the torn tail: offset %d, %v", r.Offset, err)
			}
			w.crash()
			w, err = Open(Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			recs := readPartition(t, w, "s", 0)
			if len(recs) != 13 || string(recs[12].Value) != "after" {
				t.Fatalf("%d records after the second crash, want 13 ending with the append after the tear", len(recs))
			}
		})
	}
}

// TestJournalReaders: records bbolt does not hold yet are read as soon
// as they are acknowledged — by Read, ReadEntries and ReadChunks, from
// any offset, across the boundary between bbolt's chunks and the
// journaled ones, with record and byte limits — and the same once bbolt
// holds them.
func TestJournalReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w := openTest(t, Options{Path: path, NoSync: true})
	appendRecs(t, w, "s", 0, 7)
	b, _ := testBatch("s", 0, 5, -1, 0, 7, 1000)
	if err := appendBatch(t, w, b); err != nil {
		t.Fatal(err)
	}
	if err := w.drainApplier(); err != nil {
		t.Fatal(err)
	}
	w.amu.Lock()
	w.apaused = true
	w.amu.Unlock()
	for range 3 {
		appendRecs(t, w, "s", 0, 2)
	}
	b2, _ := testBatch("s", 0, 4, -1, 0, 18, 1000)
	if err := appendBatch(t, w, b2); err != nil {
		t.Fatal(err)
	}
	appendRecs(t, w, "new", 3, 4) // a partition only the journal has
	if ps, _ := w.Partition("s", 0); ps.Next != 22 {
		t.Fatalf("next %d, want 22", ps.Next)
	}
	type read struct {
		from     int64
		max      int
		maxBytes int64
	}
	var reads []read
	for from := range int64(23) {
		reads = append(reads, read{from, 0, 0}, read{from, 3, 0}, read{from, 0, 100})
	}
	before := map[read][]*tributary.Record{}
	chunks := map[int64]int{}
	for _, rd := range reads {
		before[rd] = readAll(t, w, "s", 0, rd.from, rd.max, rd.maxBytes)
		if rd.max == 0 && rd.maxBytes == 0 {
			if want := max(0, 22-rd.from); int64(len(before[rd])) != want {
				t.Fatalf("read from %d: %d records, want %d", rd.from, len(before[rd]), want)
			}
			cs, err := w.ReadChunks("s", 0, rd.from, 0)
			if err != nil {
				t.Fatal(err)
			}
			chunks[rd.from] = len(cs)
			if rd.from < 22 {
				first, _, _ := ChunkOffsets(cs[0])
				_, end, _ := ChunkOffsets(cs[len(cs)-1])
				if first > rd.from || end != 22 {
					t.Fatalf("chunks from %d cover [%d, %d)", rd.from, first, end)
				}
			}
		}
	}
	if got := readPartition(t, w, "new", 3); len(got) != 4 {
		t.Fatalf("%d records of a partition only the journal holds, want 4", len(got))
	}
	w.amu.Lock()
	w.apaused = false
	w.amu.Unlock()
	w.kickApplier()
	if err := w.drainApplier(); err != nil {
		t.Fatal(err)
	}
	if w.pendingOf(pkey{"s", 0}) != nil {
		t.Fatal("bbolt holds everything, yet chunks are pending")
	}
	for _, rd := range reads {
		sameRecords(t, fmt.Sprintf("from bbolt %+v", rd), readAll(t, w, "s", 0, rd.from, rd.max, rd.maxBytes), before[rd])
	}
	for from, n := range chunks {
		cs, err := w.ReadChunks("s", 0, from, 0)
		if err != nil || len(cs) != n {
			t.Fatalf("chunks from %d: %d once in bbolt, %d before (%v)", from, len(cs), n, err)
		}
	}
}

// TestJournalSegmentsReused: segments bbolt holds entirely are reused
// (renamed and overwritten) or deleted, so the journal's files stay few
// however much is written, and a crash at any point still recovers
// everything acknowledged.
func TestJournalSegmentsReused(t *testing.T) {
	old := segmentMax
	segmentMax = 4 << 10
	defer func() { segmentMax = old }()
	path := filepath.Join(t.TempDir(), "wal.db")
	w, err := Open(Options{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0) // records of s/1
	for i := range 400 {
		appendRecs(t, w, "s", int32(i%3), 5)
		if i%3 == 1 {
			want += 5
		}
		if i%50 == 0 {
			if err := w.Release("s", 0, int64(i)); err != nil { // a group that needs bbolt
				t.Fatal(err)
			}
		}
	}
	if err := w.drainApplier(); err != nil {
		t.Fatal(err)
	}
	for range 40 { // at least one more segment: the applied ones are freed
		appendRecs(t, w, "s", 2, 5)
	}
	segs, err := listSegments(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) > freeSegments+2 {
		t.Fatalf("%d journal segments after 440 groups, want at most %d", len(segs), freeSegments+2)
	}
	w.amu.Lock()
	w.apaused = true
	w.amu.Unlock()
	for range 30 {
		appendRecs(t, w, "s", 1, 5) // several segments only the journal holds
		want += 5
	}
	w.crash()
	w, err = Open(Options{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if ps, _ := w.Partition("s", 1); ps.Next != want {
		t.Fatalf("s/1: next %d, want %d", ps.Next, want)
	}
	if int64(len(readPartition(t, w, "s", 1))) != want {
		t.Fatal("records of s/1 lost")
	}
}

// FuzzDecodeJournal: journal records and their mutations decode or end
// the journal, never panic, and a decoded record re-encodes to itself.
func FuzzDecodeJournal(f *testing.F) {
	rec := beginRecord(nil)
	rec = appendCreate(rec, []byte("dbucket"))
	rec = appendPut(rec, []byte("meta"), []byte("k"), []byte("value"))
	sealRecord(rec, 7)
	f.Add(rec)
	f.Add(rec[:len(rec)-1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, payload, size, err := nextRecord(b)
		if err != nil {
			return
		}
		if size > len(b) || len(payload) != size-journalHeader {
			t.Fatalf("size %d of %d bytes, payload %d", size, len(b), len(payload))
		}
		encode := func(payload []byte) ([]byte, error) {
			again := beginRecord(nil)
			err := eachMutation(payload, func(m mutation) error {
				if m.create {
					again = appendCreate(again, m.bucket)
				} else {
					again = appendPut(again, m.bucket, m.key, m.val)
				}
				return nil
			})
			sealRecord(again, seq)
			return again, err
		}
		again, err := encode(payload)
		if err != nil {
			return
		}
		twice, err := encode(again[journalHeader:])
		if err != nil || string(twice) != string(again) {
			t.Fatalf("re-encoded record differs (%v)", err)
		}
		if s2, _, _, err := nextRecord(again); err != nil || s2 != seq {
			t.Fatalf("re-encoded record: seq %d, %v", s2, err)
		}
	})
}
