package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The journal: the acknowledgement path's one sequential write and sync
// (see the package doc, "Journal").
//
// A journal record is one group's writes to bbolt, as they are to be
// applied:
//
//	[0:4]   payload length n (little endian)
//	[4:8]   CRC-32C (Castagnoli) of bytes [8:16+n)
//	[8:16]  sequence number (little endian), 1, 2, 3, … without gaps
//	[16:16+n] payload: mutations, each
//	          'p' uvarint bucket length, bucket, uvarint key length, key,
//	              uvarint value length, value   (bucket.Put(key, value))
//	          'b' uvarint bucket length, bucket (CreateBucketIfNotExists)
//
// Records are appended to segment files named <wal file>-journal-<first
// sequence number in hex>; recovery reads the segments in the order of
// their first numbers and each from its start, taking records while their
// checksum holds and their numbers continue, so a torn tail, a record of
// an older use of a reused segment and anything after either end the
// segment.

const (
	journalHeader = 16
	// maxJournalRecord bounds a record's payload on replay (a group is
	// at most the budget's worth of bytes plus its keys).
	maxJournalRecord = 1 << 30
	// freeSegments is how many applied segments are kept for reuse.
	freeSegments = 2
)

// segmentMax is the size from which the next record starts a new
// segment (a variable for tests).
var segmentMax int64 = 32 << 20

// journalFile is the journal's view of a segment file: the seam for a
// fault-injecting layer in tests (journal_fault_test.go).
type journalFile interface {
	Write(p []byte) (int, error)
	// Sync makes everything written durable (fdatasync).
	Sync() error
	Close() error
}

// fileLayer opens journal segments and syncs their directory.
type fileLayer interface {
	// OpenSegment opens name for writing from its start, creating it if
	// needed, without truncating it.
	OpenSegment(name string) (journalFile, error)
	SyncDir(dir string) error
}

// osLayer is the real file layer.
type osLayer struct{}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return fdatasync(f.File) }

func (osLayer) OpenSegment(name string) (journalFile, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osLayer) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// appendMut appends a put mutation to a record's payload.
func appendPut(rec []byte, bucket, key, val []byte) []byte {
	rec = append(rec, 'p')
	rec = binary.AppendUvarint(rec, uint64(len(bucket)))
	rec = append(rec, bucket...)
	rec = binary.AppendUvarint(rec, uint64(len(key)))
	rec = append(rec, key...)
	rec = binary.AppendUvarint(rec, uint64(len(val)))
	return append(rec, val...)
}

func appendCreate(rec []byte, bucket []byte) []byte {
	rec = append(rec, 'b')
	rec = binary.AppendUvarint(rec, uint64(len(bucket)))
	return append(rec, bucket...)
}

// beginRecord starts a record in rec (its header filled in by
// sealRecord).
func beginRecord(rec []byte) []byte {
	return append(rec[:0], make([]byte, journalHeader)...)
}

// sealRecord fills in the header of a record built by beginRecord.
func sealRecord(rec []byte, seq uint64) {
	binary.LittleEndian.PutUint32(rec[0:], uint32(len(rec)-journalHeader))
	binary.LittleEndian.PutUint64(rec[8:], seq)
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], castagnoli))
}

// errJournalEnd ends a segment's records on replay: a torn or foreign
// record, or the end of the file.
var errJournalEnd = errors.New("end of journal")

// nextRecord decodes the record at the start of b: its sequence number,
// payload and total size; errJournalEnd if b does not start with a whole
// record whose checksum holds.
func nextRecord(b []byte) (seq uint64, payload []byte, size int, err error) {
	if len(b) < journalHeader {
		return 0, nil, 0, errJournalEnd
	}
	n := binary.LittleEndian.Uint32(b[0:])
	if n > maxJournalRecord || int(n) > len(b)-journalHeader {
		return 0, nil, 0, errJournalEnd
	}
	size = journalHeader + int(n)
	if crc32.Checksum(b[8:size], castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, nil, 0, errJournalEnd
	}
	return binary.LittleEndian.Uint64(b[8:]), b[journalHeader:size], size, nil
}

// mutation is one decoded bbolt write of a record.
type mutation struct {
	create           bool
	bucket, key, val []byte
}

// eachMutation decodes a record's payload, calling fn for each mutation
// (its slices alias payload). A payload that does not decode is
// ErrCorrupt: its checksum held, so it was written so.
func eachMutation(payload []byte, fn func(m mutation) error) error {
	field := func() ([]byte, bool) {
		n, k := binary.Uvarint(payload)
		if k <= 0 || n > uint64(len(payload)-k) {
			return nil, false
		}
		f := payload[k : k+int(n)]
		payload = payload[k+int(n):]
		return f, true
	}
	for len(payload) > 0 {
		kind := payload[0]
		payload = payload[1:]
		var m mutation
		var ok bool
		switch kind {
		case 'b':
			m.create = true
			m.bucket, ok = field()
		case 'p':
			var ok1, ok2 bool
			m.bucket, ok = field()
			m.key, ok1 = field()
			m.val, ok2 = field()
			ok = ok && ok1 && ok2
		}
		if !ok || len(m.bucket) == 0 {
			return fmt.Errorf("%w: journal record: mutation %q does not decode", ErrCorrupt, kind)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// segment is a journal segment file.
type segment struct {
	name  string
	first uint64 // sequence number of its first record (its name)
	last  uint64 // of its last record, once it is full
}

// journal is the committer's writer of segments.
type journal struct {
	fs      fileLayer
	dir     string
	prefix  string // segment names: prefix + hex first sequence number
	cur     journalFile
	curSeg  segment
	curSize int64
	full    []segment // older segments, oldest first
	free    []segment // segments bbolt holds entirely, for reuse
}

func segmentPrefix(path string) string { return filepath.Base(path) + "-journal-" }

// listSegments returns the segments beside the WAL file at path, in the
// order of their first sequence numbers.
func listSegments(path string) ([]segment, error) {
	dir, prefix := filepath.Dir(path), segmentPrefix(path)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		first, err := strconv.ParseUint(name[len(prefix):], 16, 64)
		if err != nil {
			continue
		}
		segs = append(segs, segment{name: filepath.Join(dir, name), first: first})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].first < segs[j].first })
	return segs, nil
}

// readJournal returns the records of the segments at path with sequence
// numbers above after, in order, stopping at the first that does not
// continue them (a torn tail). torn tells whether anything was left
// after the last record taken.
func readJournal(path string, after uint64) (recs [][]byte, last uint64, torn bool, err error) {
	segs, err := listSegments(path)
	if err != nil {
		return nil, after, false, err
	}
	last = after
	for _, s := range segs {
		f, err := os.Open(s.name)
		if err != nil {
			return nil, after, false, err
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, after, false, fmt.Errorf("read %s: %w", s.name, err)
		}
		want := s.first
		for len(b) > 0 {
			seq, _, size, err := nextRecord(b)
			if err != nil || seq != want {
				break
			}
			rec := b[:size]
			b = b[size:]
			want++
			if seq <= after {
				continue // bbolt holds it
			}
			if seq != last+1 {
				// A gap: what follows was never acknowledged after
				// what bbolt holds (it would have had to be synced
				// after the missing record).
				return recs, last, true, nil
			}
			recs = append(recs, rec)
			last = seq
		}
		if len(b) > 0 && !allZero(b) {
			torn = true
		}
	}
	return recs, last, torn, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// openJournal starts writing at sequence number next, reusing the
// segments found at path (bbolt holds all their records by now).
func openJournal(fs fileLayer, path string, next uint64) (*journal, error) {
	segs, err := listSegments(path)
	if err != nil {
		return nil, err
	}
	j := &journal{fs: fs, dir: filepath.Dir(path), prefix: segmentPrefix(path), free: segs}
	if err := j.start(next); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *journal) segName(first uint64) string {
	return filepath.Join(j.dir, j.prefix+fmt.Sprintf("%016x", first))
}

// start begins a segment whose first record is seq: a free one renamed,
// or a new file.
func (j *journal) start(seq uint64) error {
	name := j.segName(seq)
	if len(j.free) > 0 {
		pick := 0
		for i, s := range j.free {
			if s.name == name {
				pick = i // the file of that name is replaced by none other
			}
		}
		old := j.free[pick]
		j.free = append(j.free[:pick:pick], j.free[pick+1:]...)
		if old.name != name {
			if err := os.Rename(old.name, name); err != nil {
				return fmt.Errorf("journal: reuse %s: %w", old.name, err)
			}
		}
	}
	for len(j.free) > freeSegments {
		if err := os.Remove(j.free[0].name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("journal: %w", err)
		}
		j.free = j.free[1:]
	}
	f, err := j.fs.OpenSegment(name)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := j.fs.SyncDir(j.dir); err != nil {
		f.Close()
		return fmt.Errorf("journal: sync %s: %w", j.dir, err)
	}
	j.cur, j.curSeg, j.curSize = f, segment{name: name, first: seq}, 0
	return nil
}

// write appends the sealed record rec of sequence number seq and syncs
// it; applied is the highest sequence number bbolt holds durably, so
// segments at or below it may be reused.
func (j *journal) write(rec []byte, seq, applied uint64) error {
	if j.curSize > 0 && j.curSize+int64(len(rec)) > segmentMax {
		if err := j.cur.Close(); err != nil {
			return fmt.Errorf("journal: close %s: %w", j.curSeg.name, err)
		}
		j.curSeg.last = seq - 1
		j.full = append(j.full, j.curSeg)
		for len(j.full) > 0 && j.full[0].last <= applied {
			j.free = append(j.free, j.full[0])
			j.full = j.full[1:]
		}
		if err := j.start(seq); err != nil {
			return err
		}
	}
	if _, err := j.cur.Write(rec); err != nil {
		return fmt.Errorf("journal: write %s: %w", j.curSeg.name, err)
	}
	j.curSize += int64(len(rec))
	if err := j.cur.Sync(); err != nil {
		return fmt.Errorf("journal: sync %s: %w", j.curSeg.name, err)
	}
	return nil
}

func (j *journal) close() error {
	if j == nil || j.cur == nil {
		return nil
	}
	return j.cur.Close()
}

// noSyncLayer is a file layer whose syncs do nothing (Options.NoSync).
type noSyncLayer struct{ fileLayer }

type noSyncFile struct{ journalFile }

func (noSyncFile) Sync() error { return nil }

func (l noSyncLayer) OpenSegment(name string) (journalFile, error) {
	f, err := l.fileLayer.OpenSegment(name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncLayer) SyncDir(string) error { return nil }
