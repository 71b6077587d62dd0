// Package quarantine is the folder where acknowledged records are kept
// when they must leave the WAL without reaching their table, and the file
// format they are kept in.
//
// A fence never drops acknowledged records silently. Before records leave
// the WAL without reaching the table — the uplink dropping a fenced
// partition (invariant 4), or the ownership book (package owner) dropping
// a partition's stale records when this node takes it over or adopts it at
// a higher epoch — they are copied into a quarantine file: one JSON object
// per line, a tributary.Record with []byte fields in base64 (a field the
// writer's Record did not have yet, such as Principal, reads as its zero
// value) and the reason in QuarantineReason, written to a temporary name,
// fsynced, renamed and its folder fsynced; only then are the records
// dropped. If the copy fails, nothing is dropped. The operator inspects the
// files (`tributary quarantine list`) and replays them to a stream through
// any node (`tributary quarantine replay`): the new owner may have uploaded
// some of them already (the copies it took over), so a replay can
// duplicate rows, never lose one.
//
// The package is apart from the uplink so that its decoder is fuzzed in a
// small test binary (one that does not link the table stack).
package quarantine

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/vfs"
)

// FileSuffix ends every quarantine file's name.
const FileSuffix = ".quarantine.jsonl"

// Folder is a quarantine folder. Keep is what package owner's Book writes
// through (owner.Quarantine); the uplink's own fence writes files with
// Create. Safe for concurrent use.
type Folder struct {
	dir  string
	kept atomic.Int64
}

// New is the quarantine in dir ("" = none: every write fails, so nothing
// is dropped).
func New(dir string) *Folder { return &Folder{dir: dir} }

// Kept counts the records written to the quarantine and kept there: by
// Keep, and by Count for the files of Create.
func (q *Folder) Kept() int64 { return q.kept.Load() }

// Count adds n records of a finished file made with Create to Kept, once
// the caller knows the file stays (it removes a file it turned out not to
// need).
func (q *Folder) Count(n int64) { q.kept.Add(n) }

// Keep writes recs, records of one partition of stream, to a new
// quarantine file with reason, and returns once it is durable.
func (q *Folder) Keep(stream string, partition int32, recs []*tributary.Record, reason string) error {
	if len(recs) == 0 {
		return nil
	}
	f, err := q.Create(stream, partition, recs[0].Offset)
	if err != nil {
		return err
	}
	if err := f.Add(recs, reason); err != nil {
		f.Abort()
		return err
	}
	if _, err := f.Finish(); err != nil {
		return err
	}
	q.Count(int64(len(recs)))
	return nil
}

// File is a quarantine file being written, under a temporary name until
// Finish.
type File struct {
	q          *Folder
	final, tmp string
	f          *os.File
	w          *bufio.Writer
	enc        *json.Encoder
	n          int64
}

// line is one line of a quarantine file.
type line struct {
	*tributary.Record
	QuarantineReason string `json:",omitempty"`
}

// Create starts a quarantine file for records of (stream, partition)
// from offset from on.
func (q *Folder) Create(stream string, partition int32, from int64) (*File, error) {
	if q.dir == "" {
		return nil, errors.New("quarantine: no quarantine folder configured")
	}
	if err := os.MkdirAll(q.dir, 0o700); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-p%d-%d-%d%s", strings.ReplaceAll(stream, "/", "_"), partition, from, time.Now().UnixNano(), FileSuffix)
	final := filepath.Join(q.dir, name)
	f, err := os.OpenFile(final+".tmp", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	return &File{q: q, final: final, tmp: final + ".tmp", f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// Add appends recs with reason.
func (qf *File) Add(recs []*tributary.Record, reason string) error {
	for _, r := range recs {
		if err := qf.enc.Encode(line{Record: r, QuarantineReason: reason}); err != nil {
			return err
		}
		qf.n++
	}
	return nil
}

// Records counts the records added so far.
func (qf *File) Records() int64 { return qf.n }

// Abort removes the unfinished file.
func (qf *File) Abort() {
	qf.f.Close()
	os.Remove(qf.tmp)
}

// Finish makes the file durable under its final name and returns the
// name.
func (qf *File) Finish() (string, error) {
	err := qf.w.Flush()
	if err == nil {
		err = qf.f.Sync()
	}
	if err != nil {
		qf.Abort()
		return "", err
	}
	if err := qf.f.Close(); err != nil {
		os.Remove(qf.tmp)
		return "", err
	}
	if err := os.Rename(qf.tmp, qf.final); err != nil {
		os.Remove(qf.tmp)
		return "", err
	}
	return qf.final, vfs.SyncDir(vfs.OS, qf.q.dir)
}

// Read reads the records of a quarantine file.
func Read(path string) ([]*tributary.Record, error) {
	recs, _, err := ReadReason(path)
	return recs, err
}

// ReadReason reads the records of a quarantine file and the reason they
// were quarantined ("" in files written before reasons were recorded).
func ReadReason(path string) ([]*tributary.Record, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	recs, reason, err := decode(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return recs, reason, fmt.Errorf("quarantine %s: %w", path, err)
	}
	return recs, reason, nil
}

// Decode decodes quarantined records (JSON objects, one a line).
func Decode(r io.Reader) ([]*tributary.Record, error) {
	recs, _, err := decode(r)
	return recs, err
}

// decode is Decode, also returning the first line's reason.
func decode(r io.Reader) ([]*tributary.Record, string, error) {
	dec := json.NewDecoder(r)
	var out []*tributary.Record
	var reason string
	for dec.More() {
		l := line{Record: new(tributary.Record)}
		if err := dec.Decode(&l); err != nil {
			return out, reason, fmt.Errorf("record %d: %w", len(out), err)
		}
		if len(out) == 0 {
			reason = l.QuarantineReason
		}
		out = append(out, l.Record)
	}
	return out, reason, nil
}
