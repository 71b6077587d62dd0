package uplink

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
)

// Quarantine: a fence never drops acknowledged records silently. Before
// records leave the WAL without reaching the table — the uplink dropping a
// fenced partition (invariant 4), or the ownership book (package owner)
// dropping a partition's stale records when this node takes it over or
// adopts it at a higher epoch — they are copied into a quarantine file
// under Config.QuarantineDir: one JSON object per line, a
// tributary.Record with []byte fields in base64 (a field the writer's
// Record did not have yet, such as Principal, reads as its zero value)
// and the reason in QuarantineReason, written to a temporary name,
// fsynced, renamed and its folder fsynced; only then are the records
// dropped. If the copy fails, nothing is dropped. The operator inspects
// the files (`tributary quarantine list`) and replays them to a stream
// through any node (`tributary quarantine replay`): the new owner may have
// uploaded some of them already (the copies it took over), so a replay can
// duplicate rows, never lose one.

// QuarantineFileSuffix ends every quarantine file's name.
const QuarantineFileSuffix = ".quarantine.jsonl"

// quarantineChunk bounds one WAL read while copying.
const quarantineChunk = 8 << 20

// Quarantine is a quarantine folder. Keep is what package owner's Book
// writes through (owner.Quarantine); the uplink's own fence uses the same
// folder (Uplink.Quarantine). Safe for concurrent use.
type Quarantine struct {
	dir  string
	kept atomic.Int64
}

// NewQuarantine is the quarantine in dir ("" = none: every write fails,
// so nothing is dropped).
func NewQuarantine(dir string) *Quarantine { return &Quarantine{dir: dir} }

// Kept counts the records written to the quarantine and kept there.
func (q *Quarantine) Kept() int64 { return q.kept.Load() }

// Keep writes recs, records of one partition of stream, to a new
// quarantine file with reason, and returns once it is durable.
func (q *Quarantine) Keep(stream string, partition int32, recs []*tributary.Record, reason string) error {
	if len(recs) == 0 {
		return nil
	}
	f, err := q.create(stream, partition, recs[0].Offset)
	if err != nil {
		return err
	}
	if err := f.add(recs, reason); err != nil {
		f.abort()
		return err
	}
	if _, err := f.finish(); err != nil {
		return err
	}
	q.kept.Add(int64(len(recs)))
	return nil
}

// quarantineFile is a quarantine file being written (under a temporary
// name until finish).
type quarantineFile struct {
	dir, final, tmp string
	f               *os.File
	w               *bufio.Writer
	enc             *json.Encoder
	n               int64
}

// quarantineLine is one line of a quarantine file.
type quarantineLine struct {
	*tributary.Record
	QuarantineReason string `json:",omitempty"`
}

func (q *Quarantine) create(stream string, partition int32, from int64) (*quarantineFile, error) {
	if q.dir == "" {
		return nil, errors.New("uplink: no quarantine folder configured")
	}
	if err := os.MkdirAll(q.dir, 0o700); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s-p%d-%d-%d%s", strings.ReplaceAll(stream, "/", "_"), partition, from, time.Now().UnixNano(), QuarantineFileSuffix)
	final := filepath.Join(q.dir, name)
	f, err := os.OpenFile(final+".tmp", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	return &quarantineFile{dir: q.dir, final: final, tmp: final + ".tmp", f: f, w: w, enc: json.NewEncoder(w)}, nil
}

func (qf *quarantineFile) add(recs []*tributary.Record, reason string) error {
	for _, r := range recs {
		if err := qf.enc.Encode(quarantineLine{Record: r, QuarantineReason: reason}); err != nil {
			return err
		}
		qf.n++
	}
	return nil
}

// abort removes the unfinished file.
func (qf *quarantineFile) abort() {
	qf.f.Close()
	os.Remove(qf.tmp)
}

// finish makes the file durable under its final name and returns that.
func (qf *quarantineFile) finish() (string, error) {
	err := qf.w.Flush()
	if err == nil {
		err = qf.f.Sync()
	}
	if err != nil {
		qf.abort()
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
	return qf.final, syncPath(qf.dir)
}

// Quarantine is the uplink's quarantine (Config.QuarantineDir), for the
// ownership book's drops (owner.Book.UseQuarantine); Stats counts what is
// kept there either way.
func (u *Uplink) Quarantine() *Quarantine { return u.q }

// quarantine copies the records of (stream, partition) from the WAL into a
// new quarantine file and returns its path and record count ("" and 0 when
// the partition holds none). The caller counts them once it has dropped
// them from the WAL.
func (u *Uplink) quarantine(stream string, partition int32, from, next int64, reason string) (string, int64, error) {
	if next <= from {
		return "", 0, nil
	}
	qf, err := u.q.create(stream, partition, from)
	if err != nil {
		return "", 0, err
	}
	for off := from; off < next; {
		recs, err := u.log.Read(stream, partition, off, 0, quarantineChunk)
		if err == nil && len(recs) > 0 {
			err = qf.add(recs, reason)
		}
		if err != nil {
			qf.abort()
			return "", 0, err
		}
		if len(recs) == 0 {
			break
		}
		off = recs[len(recs)-1].Offset + 1
	}
	path, err := qf.finish()
	if err != nil {
		return "", 0, err
	}
	return path, qf.n, nil
}

// ReadQuarantine reads the records of a quarantine file.
func ReadQuarantine(path string) ([]*tributary.Record, error) {
	recs, _, err := ReadQuarantineReason(path)
	return recs, err
}

// ReadQuarantineReason reads the records of a quarantine file and the
// reason they were quarantined ("" in files written before reasons were
// recorded).
func ReadQuarantineReason(path string) ([]*tributary.Record, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	recs, reason, err := decodeQuarantine(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return recs, reason, fmt.Errorf("quarantine %s: %w", path, err)
	}
	return recs, reason, nil
}

// DecodeQuarantine decodes quarantined records (JSON objects, one a line).
func DecodeQuarantine(r io.Reader) ([]*tributary.Record, error) {
	recs, _, err := decodeQuarantine(r)
	return recs, err
}

// decodeQuarantine is DecodeQuarantine, also returning the first line's
// reason.
func decodeQuarantine(r io.Reader) ([]*tributary.Record, string, error) {
	dec := json.NewDecoder(r)
	var out []*tributary.Record
	var reason string
	for dec.More() {
		line := quarantineLine{Record: new(tributary.Record)}
		if err := dec.Decode(&line); err != nil {
			return out, reason, fmt.Errorf("record %d: %w", len(out), err)
		}
		if len(out) == 0 {
			reason = line.QuarantineReason
		}
		out = append(out, line.Record)
	}
	return out, reason, nil
}
