package delta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"time"
)

// Maintenance of a log: the rewrite a compaction commits, the files the
// log still references (so that no one deletes them), and the cleanup of
// expired commits and checkpoints.
//
// Invariants:
//
//   - A rewrite replaces live files by files holding the same rows, in one
//     version: a remove (dataChange false, deletionTimestamp) of every input
//     and an add (dataChange false) of every output. It is idempotent: when
//     the outputs are live and the inputs are not, it is in the log already
//     and nothing is committed; any other state is ErrRewriteStale, and
//     nothing is committed either (no file added twice, none removed that
//     is not live).
//   - A file is referenced while it is live or its remove is younger than
//     the file retention (delta.deletedFileRetentionDuration, default 7
//     days): a reader may still time-travel to a version listing it.
//   - Log cleanup deletes only JSON commits and checkpoints of versions
//     below the checkpoint the latest snapshot replays from, and only
//     those older than the log retention (delta.logRetentionDuration,
//     default 30 days): the latest state (and every txn, which that
//     checkpoint holds) replays as before.

// DefaultLogRetention is delta.logRetentionDuration's default.
const DefaultLogRetention = 30 * 24 * time.Hour

// FileRetention is the table's delta.deletedFileRetentionDuration, or
// its default.
func FileRetention(m Metadata) time.Duration { return retentionOf(m) }

// LogRetention is the table's delta.logRetentionDuration, or its default.
func LogRetention(m Metadata) time.Duration {
	if d, ok := parseInterval(m.Configuration["delta.logRetentionDuration"]); ok {
		return d
	}
	return DefaultLogRetention
}

// Interval renders d as a Delta duration property ("interval N seconds").
func Interval(d time.Duration) string {
	return fmt.Sprintf("interval %d seconds", int64((d+time.Second-1)/time.Second))
}

// Rewrite replaces live files (Remove, paths relative to the root, not
// encoded) by files holding the same rows (Add).
type Rewrite struct {
	Remove []string
	Add    []File
}

// RewriteOptions tune Table.Rewrite.
type RewriteOptions struct {
	// Configuration keys to set in the table's metaData (a new metaData
	// action when one differs); may be given without files.
	Configuration map[string]string
	// CheckpointInterval as for AppendOptions.
	CheckpointInterval int64
	// EngineInfo goes into commitInfo.
	EngineInfo string
	Now        func() time.Time
}

// ErrRewriteStale: some of a rewrite's inputs are not live, or some of
// its outputs are, but not all (another rewrite took part of them).
var ErrRewriteStale = errors.New("delta: rewrite does not match the log")

// Rewrite commits rw (and o.Configuration) in one version: see the
// invariants above.
func (t *Table) Rewrite(ctx context.Context, rw Rewrite, o RewriteOptions) (AppendResult, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	var res AppendResult
	err := t.commitLoop(ctx, o.CheckpointInterval, now, &res, func(s *Snapshot, ts int64) ([]Action, int64, error) {
		if s.Version < 0 {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotTable, t.logKey(""))
		}
		var acts []Action
		m := s.Metadata
		conf := maps.Clone(m.Configuration)
		if conf == nil {
			conf = map[string]string{}
		}
		changed := false
		for k, v := range o.Configuration {
			if conf[k] != v {
				conf[k], changed = v, true
			}
		}
		if changed {
			m.Configuration = conf
			acts = append(acts, Action{MetaData: &m})
		}
		removed, added := 0, 0
		for _, p := range rw.Remove {
			if s.Files[p] == nil {
				removed++
			}
		}
		for _, f := range rw.Add {
			if s.Files[f.Path] != nil {
				added++
			}
		}
		switch {
		case removed == len(rw.Remove) && added == len(rw.Add):
			// in the log already (or nothing to rewrite)
		case removed == 0 && added == 0:
			for _, p := range rw.Remove {
				a := s.Files[p]
				size, at := a.Size, ts
				acts = append(acts, Action{Remove: &Remove{Path: a.Path, DeletionTimestamp: &at, DataChange: false, ExtendedFileMetadata: true,
					PartitionValues: a.PartitionValues, Size: &size, Stats: a.Stats, Tags: a.Tags}})
			}
			for _, f := range rw.Add {
				acts = append(acts, addAction(f, false))
			}
		default:
			return nil, 0, fmt.Errorf("%w: %s at version %d: %d of %d inputs gone, %d of %d outputs live",
				ErrRewriteStale, t.logKey(""), s.Version, removed, len(rw.Remove), added, len(rw.Add))
		}
		if len(acts) == 0 {
			return nil, 0, nil
		}
		op := "OPTIMIZE"
		if len(rw.Remove)+len(rw.Add) == 0 {
			op = "SET TBLPROPERTIES"
		}
		info := commitInfo(ts, op, map[string]string{"predicate": "[]", "zOrderBy": "[]"}, false, o.EngineInfo)
		return append([]Action{info}, acts...), s.Version + 1, nil
	})
	return res, err
}

// Referenced are the paths s still references at now: the live files and
// those whose remove is younger than retention (or has no timestamp).
func (s *Snapshot) Referenced(now time.Time, retention time.Duration) map[string]bool {
	out := make(map[string]bool, len(s.Files)+len(s.Tombstones))
	for p := range s.Files {
		out[p] = true
	}
	cutoff := now.Add(-retention).UnixMilli()
	for p, r := range s.Tombstones {
		if r.DeletionTimestamp == nil || *r.DeletionTimestamp >= cutoff {
			out[p] = true
		}
	}
	return out
}

// ModTimer is a Store that knows when an object was written (both of
// this package's stores do); log cleanup needs it.
type ModTimer interface {
	ModTime(ctx context.Context, key string) (time.Time, error)
}

// ModTime is when key was last written.
func (d DirStore) ModTime(_ context.Context, key string) (time.Time, error) {
	fi, err := os.Stat(d.path(key))
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// ModTime is when key was last written.
func (s BlobStore) ModTime(ctx context.Context, key string) (time.Time, error) {
	a, err := s.B.Attributes(ctx, key)
	if err != nil {
		return time.Time{}, err
	}
	return a.ModTime, nil
}

// CleanupExpired deletes the JSON commits and checkpoints of versions
// below the checkpoint the latest snapshot replays from that were written
// before now-retention (see the invariants above). It returns how many
// it deleted.
func (t *Table) CleanupExpired(ctx context.Context, now time.Time, retention time.Duration) (int, error) {
	mt, ok := t.st.(ModTimer)
	if !ok {
		return 0, fmt.Errorf("delta: log cleanup of %s: the store cannot tell when a file was written", t.logKey(""))
	}
	cutoff := now.Add(-retention)
	return t.cleanupBelow(ctx, 0, func(k string) (bool, error) {
		at, err := mt.ModTime(ctx, k)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return err == nil && at.Before(cutoff), err
	})
}
