package produce

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tributary-io/tributary"
)

// ProducerStore keeps idempotent producers' state past the WAL's records,
// in a folder of the node (DATA_DIR/kafka), and hands out producer ids.
//
// State: the records themselves carry producer id, epoch and sequence, so
// the WAL holds the state of everything not yet uploaded. Before the uplink
// releases a committed range, the runs of its records are folded into a
// snapshot file (producers.json, written atomically and fsynced: Releasing),
// so a producer retrying after a restart is deduplicated even when its
// batch already left the WAL. A producer's runs are kept for
// ProducerStateTTL after its last batch.
//
// Ids: random 62-bit numbers from crypto/rand, never one the store holds
// state of. A client cannot guess another producer's id (and so cannot
// fence it, or have its own batch taken for the other's duplicate); ids
// need no coordination between nodes, and none is persisted.
type ProducerStore struct {
	dir string

	mu   sync.Mutex
	runs map[runKey]*savedRuns
}

// ProducerStateTTL is how long a producer's state outlives its last batch
// in the snapshot: well past the server's producer idle expiry.
const ProducerStateTTL = 7 * 24 * time.Hour

// KeepRuns is how many runs per producer and partition are kept.
const KeepRuns = 5

type savedRuns struct {
	Runs []ProducerRun `json:"runs"`
	At   int64         `json:"at"` // unix seconds
}

type runKey struct {
	stream    string
	partition int32
	pid       int64
}

// OpenProducerStore opens (creating) the store in dir.
func OpenProducerStore(dir string) (*ProducerStore, error) {
	s := &ProducerStore{dir: dir, runs: map[runKey]*savedRuns{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kafka producer state: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "producers.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("kafka producer state: %w", err)
	default:
		var saved []*savedRuns
		if err := json.Unmarshal(raw, &saved); err != nil {
			return nil, fmt.Errorf("kafka producer state %s: %w", filepath.Join(dir, "producers.json"), err)
		}
		for _, sr := range saved {
			if len(sr.Runs) > 0 {
				r := sr.Runs[0]
				s.runs[runKey{r.Stream, r.Partition, r.ProducerID}] = sr
			}
		}
	}
	return s, nil
}

// AllocateProducerID returns a fresh unguessable producer id.
func (s *ProducerStore) AllocateProducerID() (int64, error) {
	for {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("allocate producer id: %w", err)
		}
		id := int64(binary.BigEndian.Uint64(b[:]) & (1<<62 - 1))
		if id == 0 || s.known(id) {
			continue
		}
		return id, nil
	}
}

func (s *ProducerStore) known(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.runs {
		if k.pid == id {
			return true
		}
	}
	return false
}

// SavedRuns are the runs of records that left the WAL.
func (s *ProducerStore) SavedRuns() []ProducerRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ProducerRun
	for _, sr := range s.runs {
		out = append(out, sr.Runs...)
	}
	return out
}

// Releasing (uplink.ReleaseListener) folds the runs of records about to
// leave the WAL into the snapshot and persists it.
func (s *ProducerStore) Releasing(stream string, partition int32, recs []*tributary.Record) error {
	return s.save(RunsFromRecords(recs, KeepRuns))
}

// ReleasingEntries (uplink.EntryReleaseListener) is Releasing for the
// entries the records are stored in: a Kafka batch's run is read from its
// header, no record decoded.
func (s *ProducerStore) ReleasingEntries(stream string, partition int32, es []tributary.Entry) error {
	return s.save(RunsFromEntries(es, KeepRuns))
}

// save folds runs into the snapshot and persists it.
func (s *ProducerStore) save(runs []ProducerRun) error {
	if len(runs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, r := range runs {
		k := runKey{r.Stream, r.Partition, r.ProducerID}
		sr := s.runs[k]
		if sr == nil {
			sr = &savedRuns{}
			s.runs[k] = sr
		}
		sr.Runs = append(sr.Runs, r)
		if len(sr.Runs) > KeepRuns {
			sr.Runs = sr.Runs[len(sr.Runs)-KeepRuns:]
		}
		sr.At = now.Unix()
	}
	all := make([]*savedRuns, 0, len(s.runs))
	for k, sr := range s.runs {
		if now.Sub(time.Unix(sr.At, 0)) > ProducerStateTTL {
			delete(s.runs, k)
			continue
		}
		all = append(all, sr)
	}
	raw, err := json.Marshal(all)
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(s.dir, "producers.json"), raw)
}

// writeFileSync replaces a file atomically and durably.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
