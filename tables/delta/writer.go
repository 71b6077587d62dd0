package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// The idempotent append: Tributary's exactly-once mark in a Delta log.
//
// Invariants:
//
//   - One txn per appId is the mark. An Append of [From, To) for an appId
//     is committed with a txn action of version To, and only when the
//     log's txn for the appId is From (0 when it has none); when it is To
//     or more the append is already in the log; anything else is a
//     StaleError, and the caller brings the log up from its other source
//     (the Iceberg table) before trying again.
//   - A commit is a put-if-absent of the next version: of two writers of
//     one version exactly one wins; the other reloads and decides again,
//     so an append lands once whatever the interleaving, and appends of
//     different appIds (two edge nodes' partitions) both land.
//   - A file is never added twice: a path that is live already refuses
//     the commit.
//   - What is written is reader version 1 / writer version 2, and only a
//     table whose protocol asks no more is written to (Writable).

// File is a data file an append adds.
type File struct {
	Path             string // relative to the table root, not encoded
	Size             int64
	ModificationTime int64 // unix ms
	Stats            string
	PartitionValues  map[string]*string
	DataChange       bool
}

// Append is one appId's part of a commit: the files holding its versions
// [From, To).
type Append struct {
	AppID    string
	From, To int64
	Files    []File
}

// AppendOptions says what the table should look like.
type AppendOptions struct {
	// Schema of the files; the table's schema evolves to it (a new
	// metaData action) when it has gained columns, and a table whose
	// schema it does not cover is refused (ErrSchema).
	Schema *StructType
	// Name and Configuration of a table this append creates.
	Name          string
	Configuration map[string]string
	// CheckpointInterval: a checkpoint after every version that is a
	// multiple of it (0: 10, Delta's default checkpointInterval).
	CheckpointInterval int64
	// Operation and EngineInfo go into commitInfo.
	Operation, EngineInfo string
	Now                   func() time.Time
}

// AppendResult reports what Commit did.
type AppendResult struct {
	Version       int64    // the version committed, -1 when all was there already
	Committed     []string // appIds this call committed
	Already       []string // appIds the log already covered
	Attempts      int
	Checkpoint    bool  // a checkpoint was written at Version
	CheckpointErr error // a checkpoint that failed (the commit stands)
	Snapshot      *Snapshot
}

// ErrSchema: the table's Delta schema is not one the files' schema covers.
var ErrSchema = errors.New("delta: schema disagrees")

// StaleError: an appId's mark in the log is neither the append's start
// nor past its end.
type StaleError struct {
	AppID    string
	Version  int64
	From, To int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("delta txn %s is at %d, the append is [%d,%d)", e.AppID, e.Version, e.From, e.To)
}

// MaxAttempts bounds the reload-decide-commit loop.
const MaxAttempts = 50

// Append commits appends in one version of the log (see the invariants
// above). A table without a log is created by it.
func (t *Table) Append(ctx context.Context, appends []Append, o AppendOptions) (AppendResult, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	var res AppendResult
	err := t.commitLoop(ctx, o.CheckpointInterval, now, &res, func(s *Snapshot, ts int64) ([]Action, int64, error) {
		var acts []Action
		acts = append(acts, commitInfo(ts, nz(o.Operation, "WRITE"), map[string]string{"mode": "Append"}, true, o.EngineInfo))
		version := int64(0)
		if s.Version < 0 {
			if o.Schema == nil {
				return nil, 0, fmt.Errorf("delta: creating %s needs a schema", t.logKey(""))
			}
			created := ts
			acts = append(acts, Action{Protocol: &Protocol{MinReaderVersion: 1, MinWriterVersion: 2}},
				Action{MetaData: &Metadata{ID: uuid.NewString(), Name: o.Name, Format: Format{Provider: "parquet", Options: map[string]string{}},
					SchemaString: o.Schema.String(), PartitionColumns: []string{}, CreatedTime: &created, Configuration: nz2(o.Configuration)}})
		} else {
			version = s.Version + 1
			if o.Schema != nil && o.Schema.String() != s.Schema.String() {
				if err := o.Schema.Covers(s.Schema); err != nil {
					return nil, 0, fmt.Errorf("%w: %s: %v", ErrSchema, t.logKey(""), err)
				}
				m := s.Metadata
				m.SchemaString = o.Schema.String()
				acts = append(acts, Action{MetaData: &m})
			}
		}
		var adds []Action
		for _, a := range appends {
			v, _ := s.TxnVersion(a.AppID)
			switch {
			case v >= a.To:
				res.Already = append(res.Already, a.AppID)
				continue
			case v != a.From:
				return nil, 0, &StaleError{AppID: a.AppID, Version: v, From: a.From, To: a.To}
			}
			res.Committed = append(res.Committed, a.AppID)
			tsCopy := ts
			acts = append(acts, Action{Txn: &Txn{AppID: a.AppID, Version: a.To, LastUpdated: &tsCopy}})
			for _, f := range a.Files {
				if _, ok := s.Files[f.Path]; ok {
					return nil, 0, fmt.Errorf("%w: %s: %s is in the log already (appId %s, [%d,%d))", ErrCorrupt, t.logKey(""), f.Path, a.AppID, a.From, a.To)
				}
				adds = append(adds, addAction(f, true))
			}
		}
		if len(res.Committed) == 0 {
			return nil, 0, nil
		}
		return append(acts, adds...), version, nil
	})
	return res, err
}

// commitLoop is the reload-decide-commit loop of every writer here:
// decide gets the latest snapshot (an empty one, Version -1, when there
// is no log) and returns the actions of the next version, or none when
// there is nothing to commit; a put-if-absent that loses to another
// writer, or whose outcome is unknown, reloads and decides again. A
// commit that lands on a multiple of interval (0: 10) is checkpointed.
func (t *Table) commitLoop(ctx context.Context, interval int64, now func() time.Time, res *AppendResult,
	decide func(s *Snapshot, ts int64) ([]Action, int64, error)) error {
	if interval <= 0 {
		interval = 10
	}
	var lastErr error
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		*res = AppendResult{Version: -1, Attempts: attempt}
		s, err := t.Snapshot(ctx)
		if errors.Is(err, ErrNotTable) {
			s, err = newSnapshot(), nil
		}
		if err != nil {
			return err
		}
		if s.Version >= 0 {
			if err := Writable(s.Protocol, s.Metadata); err != nil {
				return fmt.Errorf("%s: %w", t.logKey(""), err)
			}
		}
		acts, version, err := decide(s, now().UnixMilli())
		if err != nil {
			return err
		}
		if len(acts) == 0 {
			res.Snapshot = s
			return nil
		}
		err = t.Commit(ctx, version, acts)
		if err == nil {
			for i := range acts {
				if err := s.apply(&acts[i]); err != nil {
					return err
				}
			}
			s.Version = version
			res.Version, res.Snapshot = version, s
			if version > 0 && version%interval == 0 {
				res.Checkpoint = true
				res.CheckpointErr = t.WriteCheckpoint(ctx, s, now())
			}
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A conflict, or an outcome we cannot know (the store may have
		// taken the object): reload and decide again.
		pause := time.Duration(attempt) * 5 * time.Millisecond
		if pause > 250*time.Millisecond {
			pause = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	return fmt.Errorf("delta: %s: giving up after %d attempts: %w", t.logKey(""), MaxAttempts, lastErr)
}

func commitInfo(ts int64, op string, params map[string]string, blind bool, engine string) Action {
	info, _ := json.Marshal(map[string]any{"timestamp": ts, "operation": op,
		"operationParameters": params, "isBlindAppend": blind, "engineInfo": nz(engine, "tributary")})
	return Action{CommitInfo: info}
}

func addAction(f File, dataChange bool) Action {
	pv := f.PartitionValues
	if pv == nil {
		pv = map[string]*string{}
	}
	return Action{Add: &Add{Path: EncodePath(f.Path), PartitionValues: pv, Size: f.Size,
		ModificationTime: f.ModificationTime, DataChange: dataChange, Stats: f.Stats}}
}

func nz(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func nz2(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// Stats is an add action's statistics (PROTOCOL.md "Per-file Statistics"),
// keyed by column name.
type Stats struct {
	NumRecords int64            `json:"numRecords"`
	MinValues  map[string]any   `json:"minValues,omitempty"`
	MaxValues  map[string]any   `json:"maxValues,omitempty"`
	NullCount  map[string]int64 `json:"nullCount,omitempty"`
}

// String renders the stats JSON.
func (s Stats) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// StatsTimestamp renders a timestamp bound of unix micros in the stats'
// millisecond form: a minimum rounded down, a maximum up, so that a
// reader skipping by them never skips a row.
func StatsTimestamp(micros int64, max bool) string {
	ms := micros / 1000
	if micros%1000 != 0 && micros < 0 {
		ms--
	}
	if max && micros%1000 != 0 {
		ms++
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}
