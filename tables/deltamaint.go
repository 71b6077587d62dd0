package tables

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/tables/delta"
)

// Maintenance of a table with a Delta log beside it (deltalog.go): both
// logs list the same data files, so every step that changes the set or
// deletes a file does it in both.
//
// Invariants:
//
//  1. Compaction commits to Iceberg first, then to the Delta log: a
//     remove (deletionTimestamp, dataChange false) of every input and an
//     add (dataChange false, the output's exact stats) of every output,
//     in one version. Only files live in both logs are compacted. A crash
//     or failure between the two commits leaves the Delta log listing the
//     inputs; the next pass's first step, or the uplink's next SyncDelta,
//     commits the rewrite it missed from a diff of the two logs
//     (deltalog.go invariant 5).
//  2. A data file is deleted (by snapshot expiry's post-commit cleanup or
//     by orphan cleanup) only when the Delta log does not reference it
//     either: not live, and not removed less than the Delta file
//     retention ago (Policy.DeltaFileRetention, or the table's
//     delta.deletedFileRetentionDuration when longer). The references
//     are read before each deleting step; between then and the deletes
//     the Delta log can only add files Iceberg lists, or turn a live file
//     into a tombstone, which references it still. A file left this way is
//     an Iceberg orphan and goes, after both retentions, by orphan cleanup.
//  3. A Delta log that cannot be read, or a warehouse without a Delta
//     store, stops every step that rewrites or deletes (compaction,
//     expiry, orphans, log cleanup); manifests are still merged.
//  4. Log cleanup deletes the Delta log's JSON commits and checkpoints
//     below the checkpoint it replays from, older than the log retention
//     (Policy.DeltaLogRetention, or delta.logRetentionDuration when
//     longer): the latest state and every txn stay (delta.CleanupExpired).
//  5. The table's own retention settings are raised to the policy's when
//     lower, so that every checkpoint writer keeps the removes as long as
//     this pass counts on them.

// deltaSide is a pass's view of the table's Delta log.
type deltaSide struct {
	dt      *delta.Table
	root    string
	skip    string // why the Delta-aware steps do nothing ("" when they run)
	fileRet time.Duration
	logRet  time.Duration

	mu   sync.Mutex
	refs map[string]bool // paths below root the log references (invariant 2)
}

// deltaStore is the store of the tables' Delta logs for a pass.
func (c *Catalog) deltaStore(o MaintainOptions) delta.Store {
	if o.DeltaStore != nil {
		return o.DeltaStore
	}
	if dir, ok := strings.CutPrefix(c.cfg.Warehouse, "file://"); ok {
		return delta.DirStore{Root: dir}
	}
	return nil
}

// prepareDelta finds the table's Delta log, settles the retentions, and
// catches up rewrites the log missed (invariants 1, 3, 5).
func (m *pass) prepareDelta(ctx context.Context) error {
	t, err := m.load(ctx)
	if err != nil {
		return err
	}
	root, err := m.c.DeltaRoot(m.stream)
	if err != nil {
		return err
	}
	loc := strings.TrimSuffix(t.Location(), "/") + "/_delta_log/"
	st := m.c.deltaStore(m.opts)
	var has bool
	if st != nil {
		if has, err = delta.NewTable(st, root).Exists(ctx); err != nil {
			has = true // cannot tell: treat it as there, and unreadable below
		}
	} else {
		has = m.exists(ctx, t, loc+delta.CommitName(0)) || m.exists(ctx, t, loc+"_last_checkpoint")
	}
	if !has {
		return nil
	}
	m.dl = &deltaSide{dt: delta.NewTable(st, root), root: root}
	m.progress(Progress{Step: "delta"})
	if st == nil {
		m.dl.skip = "no Delta store for this warehouse"
		return m.deltaDone()
	}
	snap, err := m.dl.dt.Snapshot(ctx)
	if err != nil {
		m.dl.skip = "the Delta log cannot be read: " + err.Error()
		return m.deltaDone()
	}
	m.res.DeltaVersion = snap.Version
	m.dl.fileRet = max(m.pol.DeltaFileRetention, delta.FileRetention(snap.Metadata))
	m.dl.logRet = max(m.pol.DeltaLogRetention, delta.LogRetention(snap.Metadata))
	m.dl.refs = snap.Referenced(time.Now(), m.dl.fileRet)
	if m.opts.DryRun {
		return m.deltaDone()
	}
	conf := map[string]string{}
	if delta.FileRetention(snap.Metadata) < m.dl.fileRet {
		conf["delta.deletedFileRetentionDuration"] = delta.Interval(m.dl.fileRet)
	}
	if delta.LogRetention(snap.Metadata) < m.dl.logRet {
		conf["delta.logRetentionDuration"] = delta.Interval(m.dl.logRet)
	}
	if len(conf) > 0 {
		res, err := m.dl.dt.Rewrite(ctx, delta.Rewrite{}, delta.RewriteOptions{Configuration: conf, EngineInfo: "tributary/maintain"})
		if err != nil {
			m.dl.skip = "the Delta log cannot be written: " + err.Error()
			return m.deltaDone()
		}
		m.noteDeltaCommit(res.Version)
	}
	v, err := m.c.catchUpRewrites(ctx, m.dl.dt, root, m.stream, DeltaOptions{Node: "maintain"})
	if err != nil {
		m.dl.skip = "the Delta log did not catch up with the Iceberg table: " + err.Error()
		return m.deltaDone()
	}
	m.noteDeltaCommit(v)
	return m.deltaDone()
}

func (m *pass) noteDeltaCommit(v int64) {
	if v >= 0 {
		m.res.DeltaCommits++
		m.res.DeltaVersion = v
	}
}

func (m *pass) deltaDone() error {
	m.res.DeltaSkipped = m.dl.skip
	note := fmt.Sprintf("Delta log at version %d; %d commits; removed files kept %s, log files %s", m.res.DeltaVersion, m.res.DeltaCommits, m.dl.fileRet, m.dl.logRet)
	if m.dl.skip != "" {
		note = "Delta log: compaction, expiry, orphan and log cleanup skipped: " + m.dl.skip
	}
	m.progress(Progress{Step: "delta", Done: true, Note: note})
	return nil
}

// deltaBlocked reports, for a step that rewrites or deletes, whether the
// Delta log stops it (invariant 3), telling progress.
func (m *pass) deltaBlocked(step string) bool {
	if m.dl == nil || m.dl.skip == "" {
		return false
	}
	m.progress(Progress{Step: step, Done: true, Note: "skipped: " + m.dl.skip})
	return true
}

// deltaLive are the paths below the Delta root the log lists now (nil
// when the table has no Delta log).
func (m *pass) deltaLive(ctx context.Context) (map[string]bool, error) {
	if m.dl == nil {
		return nil, nil
	}
	s, err := m.dl.dt.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(s.Files))
	for p := range s.Files {
		live[p] = true
	}
	return live, nil
}

// readDeltaRefs reads what the Delta log references (invariant 2) before
// a deleting step.
func (m *pass) readDeltaRefs(ctx context.Context) error {
	if m.dl == nil {
		return nil
	}
	s, err := m.dl.dt.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("read the Delta log's references: %w", err)
	}
	refs := s.Referenced(time.Now(), m.dl.fileRet)
	m.dl.mu.Lock()
	m.dl.refs = refs
	m.dl.mu.Unlock()
	return nil
}

// deltaKeeps reports whether path is a file the Delta log references (the
// confined FileIO's kept: counted once per call).
func (m *pass) deltaKeeps(path string) bool {
	if !m.deltaRefers(path) {
		return false
	}
	m.refusedMu.Lock()
	m.res.DeltaKept++
	m.refusedMu.Unlock()
	return true
}

func (m *pass) deltaRefers(path string) bool {
	if m.dl == nil {
		return false
	}
	rel, ok := m.c.deltaRel(m.dl.root, path)
	if !ok {
		return false
	}
	m.dl.mu.Lock()
	defer m.dl.mu.Unlock()
	return m.dl.refs == nil || m.dl.refs[rel] // not read yet: keep everything
}

// deltaCompacted commits one compaction group's rewrite to the Delta log
// after its Iceberg commit (invariant 1).
func (m *pass) deltaCompacted(ctx context.Context, g []liveFile, outs []FileMeta) error {
	if m.dl == nil {
		return nil
	}
	if m.opts.beforeDeltaRewrite != nil {
		if err := m.opts.beforeDeltaRewrite(); err != nil {
			return err
		}
	}
	var rw delta.Rewrite
	for _, f := range g {
		rel, ok := m.c.deltaRel(m.dl.root, f.df.FilePath())
		if !ok {
			return fmt.Errorf("%s is not below the Delta root %s", f.df.FilePath(), m.dl.root)
		}
		rw.Remove = append(rw.Remove, rel)
	}
	now := time.Now().UnixMilli()
	for _, out := range outs {
		rel, ok := m.c.deltaRel(m.dl.root, out.URL)
		if !ok {
			return fmt.Errorf("%s is not below the Delta root %s", out.URL, m.dl.root)
		}
		rw.Add = append(rw.Add, delta.File{Path: rel, Size: out.Size, ModificationTime: now, Stats: deltaStats(out.Stats, true)})
	}
	res, err := m.dl.dt.Rewrite(ctx, rw, delta.RewriteOptions{EngineInfo: "tributary/maintain"})
	if err != nil {
		return err
	}
	m.noteDeltaCommit(res.Version)
	return res.CheckpointErr
}

// cleanDeltaLog is the last step: log cleanup (invariant 4).
func (m *pass) cleanDeltaLog(ctx context.Context) error {
	if m.dl == nil || m.deltaBlocked("delta-log") {
		return nil
	}
	m.progress(Progress{Step: "delta-log"})
	if m.opts.DryRun {
		m.progress(Progress{Step: "delta-log", Done: true, Note: "dry run: nothing deleted"})
		return nil
	}
	n, err := m.dl.dt.CleanupExpired(ctx, time.Now(), m.dl.logRet)
	m.res.DeltaLogsDeleted = n
	if err != nil {
		return err
	}
	m.progress(Progress{Step: "delta-log", Done: true, Note: fmt.Sprintf("deleted %d Delta log files below the latest checkpoint older than %s", n, m.dl.logRet)})
	return nil
}

// deltaFilter keeps the compaction candidates both logs list (invariant
// 1): of the Iceberg table's live files, those the Delta log lists too.
func (m *pass) deltaFilter(ctx context.Context, t *table.Table, files []liveFile) ([]liveFile, error) {
	live, err := m.deltaLive(ctx)
	if err != nil || live == nil {
		return files, err
	}
	out := files[:0:0]
	for _, f := range files {
		if rel, ok := m.c.deltaRel(m.dl.root, f.df.FilePath()); ok && live[rel] {
			out = append(out, f)
		}
	}
	return out, nil
}

var errDeltaBehind = errors.New("the Iceberg rewrite stands; the Delta log catches up on the next pass or uplink sync")
