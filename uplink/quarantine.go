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
	"time"

	"github.com/tributary-io/tributary"
)

// Quarantine: a fence never drops acknowledged records silently. Before the
// uplink drops a fenced partition from the WAL (invariant 4), it copies
// every record still there into a quarantine file under
// Config.QuarantineDir — one JSON object per line, a tributary.Record with
// []byte fields in base64 (a field the writer's Record did not have yet,
// such as Principal, reads as its zero value) — written to a temporary name, fsynced, renamed
// and its folder fsynced; only then is the partition dropped. If the copy
// fails, nothing is dropped and the pass is retried. The operator inspects
// the files (`tributary quarantine list`) and replays them to a stream
// through any node (`tributary quarantine replay`): the new owner may have
// uploaded some of them already (the copies it took over), so a replay can
// duplicate rows, never lose one.

// QuarantineFileSuffix ends every quarantine file's name.
const QuarantineFileSuffix = ".quarantine.jsonl"

// quarantineChunk bounds one WAL read while copying.
const quarantineChunk = 8 << 20

// quarantine copies the records of (stream, partition) from the WAL into a
// new quarantine file and returns its path and record count ("" and 0 when
// the partition holds none).
func (u *Uplink) quarantine(stream string, partition int32, from, next int64) (string, int64, error) {
	if u.cfg.QuarantineDir == "" {
		return "", 0, errors.New("uplink: no quarantine folder configured")
	}
	if next <= from {
		return "", 0, nil
	}
	if err := os.MkdirAll(u.cfg.QuarantineDir, 0o700); err != nil {
		return "", 0, err
	}
	name := fmt.Sprintf("%s-p%d-%d-%d%s", strings.ReplaceAll(stream, "/", "_"), partition, from, time.Now().UnixNano(), QuarantineFileSuffix)
	final := filepath.Join(u.cfg.QuarantineDir, name)
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", 0, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	var n int64
	for off := from; off < next; {
		recs, err := u.log.Read(stream, partition, off, 0, quarantineChunk)
		if err != nil {
			return "", 0, err
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return "", 0, err
			}
			n++
		}
		off = recs[len(recs)-1].Offset + 1
	}
	if err := w.Flush(); err != nil {
		return "", 0, err
	}
	if err := f.Sync(); err != nil {
		return "", 0, err
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", 0, err
	}
	ok = true
	if err := syncPath(u.cfg.QuarantineDir); err != nil {
		return "", 0, err
	}
	return final, n, nil
}

// ReadQuarantine reads the records of a quarantine file.
func ReadQuarantine(path string) ([]*tributary.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := DecodeQuarantine(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return recs, fmt.Errorf("quarantine %s: %w", path, err)
	}
	return recs, nil
}

// DecodeQuarantine decodes quarantined records (JSON objects, one a line).
func DecodeQuarantine(r io.Reader) ([]*tributary.Record, error) {
	dec := json.NewDecoder(r)
	var out []*tributary.Record
	for dec.More() {
		rec := new(tributary.Record)
		if err := dec.Decode(rec); err != nil {
			return out, fmt.Errorf("record %d: %w", len(out), err)
		}
		out = append(out, rec)
	}
	return out, nil
}
