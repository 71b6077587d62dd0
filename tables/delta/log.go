package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Table is a Delta table: a root folder in a store, its log in
// <root>/_delta_log/.
type Table struct {
	st   Store
	root string // "" or "a/b", no trailing slash
}

// NewTable is the Delta table at root (a key prefix) of st.
func NewTable(st Store, root string) *Table {
	return &Table{st: st, root: strings.Trim(root, "/")}
}

// Store is the table's store.
func (t *Table) Store() Store { return t.st }

// Key is the store key of a path relative to the table root.
func (t *Table) Key(rel string) string {
	if t.root == "" {
		return rel
	}
	return t.root + "/" + rel
}

const logDir = "_delta_log"

func (t *Table) logKey(name string) string { return t.Key(logDir + "/" + name) }

// CommitName is the log file of version v.
func CommitName(v int64) string { return fmt.Sprintf("%020d.json", v) }

// CheckpointName is the single-part checkpoint of version v.
func CheckpointName(v int64) string { return fmt.Sprintf("%020d.checkpoint.parquet", v) }

// Caps on the log files read.
const (
	maxLastCheckpointBytes = 1 << 20
	MaxCheckpointBytes     = 1 << 30
)

// Snapshot is the table's state at a version: the reconciled actions.
type Snapshot struct {
	Version  int64
	Protocol Protocol
	Metadata Metadata
	Schema   *StructType
	// Files are the live data files by (decoded) path; Tombstones the
	// removed ones still within retention.
	Files      map[string]*Add
	Tombstones map[string]*Remove
	// Txns are the latest transaction identifier of every appId.
	Txns map[string]Txn
	// Checkpoint is the version of the checkpoint the replay started
	// from (-1: none), Commits the number of JSON commits it read.
	Checkpoint int64
	Commits    int
}

func newSnapshot() *Snapshot {
	return &Snapshot{Version: -1, Checkpoint: -1, Files: map[string]*Add{}, Tombstones: map[string]*Remove{}, Txns: map[string]Txn{}}
}

// TxnVersion is appId's committed version, ok false when it has none.
func (s *Snapshot) TxnVersion(appID string) (int64, bool) {
	t, ok := s.Txns[appID]
	return t.Version, ok
}

// Paths are the live files' paths, sorted.
func (s *Snapshot) Paths() []string {
	out := make([]string, 0, len(s.Files))
	for p := range s.Files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// apply reconciles one action into the snapshot (PROTOCOL.md "Action
// Reconciliation"): the latest protocol and metaData win, an add and a
// remove of one path cancel by version, the latest txn per appId wins.
func (s *Snapshot) apply(a *Action) error {
	switch {
	case a.Protocol != nil:
		s.Protocol = *a.Protocol
	case a.MetaData != nil:
		sch, err := a.MetaData.Schema()
		if err != nil {
			return err
		}
		if err := checkType(DataType{Struct: sch}, 0); err != nil {
			return err
		}
		s.Metadata, s.Schema = *a.MetaData, sch
	case a.Add != nil:
		p, err := decodePath(a.Add.Path)
		if err != nil {
			return err
		}
		s.Files[p] = a.Add
		delete(s.Tombstones, p)
	case a.Remove != nil:
		p, err := decodePath(a.Remove.Path)
		if err != nil {
			return err
		}
		delete(s.Files, p)
		s.Tombstones[p] = a.Remove
	case a.Txn != nil:
		s.Txns[a.Txn.AppID] = *a.Txn
	}
	return nil
}

// decodePath turns an action's path into the path it names: relative
// paths are URL-encoded (PROTOCOL.md "Add File and Remove File").
func decodePath(p string) (string, error) {
	if u, err := url.Parse(p); err == nil && u.Scheme != "" {
		return p, nil
	}
	d, err := url.PathUnescape(p)
	if err != nil {
		return "", fmt.Errorf("%w: path %q: %v", ErrCorrupt, p, err)
	}
	return d, nil
}

// EncodePath is the path an add action carries for a file at rel below
// the table root.
func EncodePath(rel string) string {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// Readable reports whether this package can read a table of protocol p
// and metadata m: reader version 1 (no deletion vectors), version 2
// (column mapping) whose mapping mode is none, or version 3 whose reader
// features are all ones a reader of version 1 semantics may ignore.
func Readable(p Protocol, m Metadata) error {
	switch p.MinReaderVersion {
	case 1:
		return nil
	case 2:
		if mode := m.Configuration["delta.columnMapping.mode"]; mode != "" && mode != "none" {
			return fmt.Errorf("%w: column mapping mode %q", ErrUnsupported, mode)
		}
		return nil
	case 3:
		for _, f := range p.ReaderFeatures {
			if f == "columnMapping" {
				if mode := m.Configuration["delta.columnMapping.mode"]; mode == "" || mode == "none" {
					continue
				}
			}
			if !harmlessReaderFeatures[f] {
				return fmt.Errorf("%w: reader feature %q", ErrUnsupported, f)
			}
		}
		return nil
	}
	return fmt.Errorf("%w: reader version %d (this reader implements 1)", ErrUnsupported, p.MinReaderVersion)
}

var harmlessReaderFeatures = map[string]bool{"timestampNtz": true, "vacuumProtocolCheck": true}

// Writable reports whether this package may commit to a table of
// protocol p: what it writes is reader 1 / writer 2 (appendOnly,
// invariants), so a table that requires more is left alone.
func Writable(p Protocol, m Metadata) error {
	if err := Readable(p, m); err != nil {
		return err
	}
	if p.MinWriterVersion > 2 {
		return fmt.Errorf("%w: writer version %d (this writer implements 2)", ErrUnsupported, p.MinWriterVersion)
	}
	return nil
}

// logFile is a parsed name in _delta_log.
type logFile struct {
	version     int64
	commit      bool
	part, parts int // a classic checkpoint: part of parts (1 of 1 for single-part)
	key         string
}

func parseLogName(key string) (logFile, bool) {
	name := path.Base(key)
	if len(name) < 21 || name[20] != '.' {
		return logFile{}, false
	}
	v, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil || v < 0 {
		return logFile{}, false
	}
	rest := name[21:]
	switch {
	case rest == "json":
		return logFile{version: v, commit: true, key: key}, true
	case rest == "checkpoint.parquet":
		return logFile{version: v, part: 1, parts: 1, key: key}, true
	case strings.HasPrefix(rest, "checkpoint.") && strings.HasSuffix(rest, ".parquet"):
		f := strings.Split(strings.TrimSuffix(strings.TrimPrefix(rest, "checkpoint."), ".parquet"), ".")
		if len(f) == 2 && len(f[0]) == 10 && len(f[1]) == 10 {
			p, e1 := strconv.Atoi(f[0])
			n, e2 := strconv.Atoi(f[1])
			if e1 == nil && e2 == nil && p >= 1 && p <= n {
				return logFile{version: v, part: p, parts: n, key: key}, true
			}
		}
	}
	return logFile{}, false // v2 checkpoints (uuid), .crc, compacted logs: not read
}

// LastCheckpoint is _last_checkpoint.
type LastCheckpoint struct {
	Version int64 `json:"version"`
	Size    int64 `json:"size"`
	Parts   *int  `json:"parts,omitempty"`
}

// Snapshot replays the log to its latest version: the newest complete
// checkpoint (the one _last_checkpoint names, or found by listing when it
// is missing or stale), then every JSON commit after it, which must be
// contiguous. A log with neither is ErrNotTable.
func (t *Table) Snapshot(ctx context.Context) (*Snapshot, error) { return t.snapshot(ctx, true) }

// ReplayCommits replays the JSON commits alone, from version 0, ignoring
// checkpoints: what a checkpoint must equal (a log whose early commits
// were cleaned up is ErrCorrupt here).
func (t *Table) ReplayCommits(ctx context.Context) (*Snapshot, error) { return t.snapshot(ctx, false) }

func (t *Table) snapshot(ctx context.Context, useCheckpoints bool) (*Snapshot, error) {
	keys, err := t.st.List(ctx, t.logKey(""))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", t.logKey(""), err)
	}
	var commits []logFile
	cps := map[int64][]logFile{}
	for _, k := range keys {
		lf, ok := parseLogName(k)
		if !ok {
			continue
		}
		if lf.commit {
			commits = append(commits, lf)
		} else if useCheckpoints {
			cps[lf.version] = append(cps[lf.version], lf)
		}
	}
	slices.SortFunc(commits, func(a, b logFile) int { return int(a.version - b.version) })
	// The checkpoint: the newest whose parts are all there.
	cpVersion := int64(-1)
	var cpParts []logFile
	for v, parts := range cps {
		if v <= cpVersion || !completeCheckpoint(parts) {
			continue
		}
		cpVersion, cpParts = v, nil
		n := parts[0].parts
		for _, p := range parts {
			if p.parts == n {
				cpParts = append(cpParts, p)
			}
		}
	}
	// _last_checkpoint names the checkpoint its writer finished last;
	// when its parts are all listed it is the one to start from (a
	// newer listed one may still be being written by a slow writer's
	// parts). Missing or stale, the listing decides.
	if lc, err := t.readLastCheckpoint(ctx); useCheckpoints && err == nil && lc.Version != cpVersion {
		if parts := cps[lc.Version]; len(parts) > 0 && completeCheckpoint(parts) && (lc.Parts == nil || *lc.Parts == parts[0].parts) {
			cpVersion, cpParts = lc.Version, parts
		}
	}
	if len(commits) == 0 && cpVersion < 0 {
		return nil, fmt.Errorf("%w: no commits in %s", ErrNotTable, t.logKey(""))
	}
	s := newSnapshot()
	if cpVersion >= 0 {
		if err := t.readCheckpoint(ctx, s, cpParts); err != nil {
			return nil, err
		}
		s.Version, s.Checkpoint = cpVersion, cpVersion
	}
	for _, c := range commits {
		if c.version <= s.Version {
			continue
		}
		if c.version != s.Version+1 {
			return nil, fmt.Errorf("%w: version %d follows %d in %s (a commit is missing)", ErrCorrupt, c.version, s.Version, t.logKey(""))
		}
		data, err := t.st.Read(ctx, c.key, MaxCommitBytes)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", c.key, err)
		}
		acts, err := DecodeCommit(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.key, err)
		}
		for i := range acts {
			if err := s.apply(&acts[i]); err != nil {
				return nil, fmt.Errorf("%s: %w", c.key, err)
			}
		}
		s.Version++
		s.Commits++
	}
	if s.Protocol.MinReaderVersion == 0 {
		return nil, fmt.Errorf("%w: no protocol action up to version %d", ErrCorrupt, s.Version)
	}
	if s.Schema == nil {
		return nil, fmt.Errorf("%w: no metaData action up to version %d", ErrCorrupt, s.Version)
	}
	if err := Readable(s.Protocol, s.Metadata); err != nil {
		return nil, fmt.Errorf("%s at version %d: %w", t.logKey(""), s.Version, err)
	}
	return s, nil
}

func completeCheckpoint(parts []logFile) bool {
	n := parts[0].parts
	seen := map[int]bool{}
	for _, p := range parts {
		if p.parts == n {
			seen[p.part] = true
		}
	}
	return len(seen) == n
}

func (t *Table) readLastCheckpoint(ctx context.Context) (LastCheckpoint, error) {
	var lc LastCheckpoint
	b, err := t.st.Read(ctx, t.logKey("_last_checkpoint"), maxLastCheckpointBytes)
	if err != nil {
		return lc, err
	}
	if err := json.Unmarshal(b, &lc); err != nil {
		return lc, fmt.Errorf("%w: _last_checkpoint: %v", ErrCorrupt, err)
	}
	return lc, nil
}

// LastCheckpoint reads _last_checkpoint (fs.ErrNotExist when missing).
func (t *Table) LastCheckpoint(ctx context.Context) (LastCheckpoint, error) {
	return t.readLastCheckpoint(ctx)
}

// readCheckpoint applies the actions of a checkpoint's parts.
func (t *Table) readCheckpoint(ctx context.Context, s *Snapshot, parts []logFile) error {
	for _, p := range parts {
		data, err := t.st.Read(ctx, p.key, MaxCheckpointBytes)
		if err != nil {
			return fmt.Errorf("read %s: %w", p.key, err)
		}
		rows, err := readParquetRows(ctx, data)
		if err != nil {
			return fmt.Errorf("%w: checkpoint %s: %v", ErrCorrupt, p.key, err)
		}
		for _, r := range rows {
			a, ok, err := checkpointAction(r)
			if err != nil {
				return fmt.Errorf("checkpoint %s: %w", p.key, err)
			}
			if !ok {
				continue
			}
			if err := s.apply(&a); err != nil {
				return fmt.Errorf("checkpoint %s: %w", p.key, err)
			}
		}
	}
	return nil
}

// checkpointAction is the action of one checkpoint row: the one non-null
// top-level column of the known ones, re-read through the JSON decoder so
// that a checkpoint and a commit obey the same rules.
func checkpointAction(r Row) (Action, bool, error) {
	for _, name := range []string{"protocol", "metaData", "add", "remove", "txn"} {
		v := r[name]
		if v == nil {
			continue
		}
		b, err := json.Marshal(map[string]any{name: v})
		if err != nil {
			return Action{}, false, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		a, err := DecodeAction(b)
		return a, err == nil, err
	}
	if r["sidecar"] != nil {
		return Action{}, false, fmt.Errorf("%w: sidecar files (v2 checkpoints)", ErrUnsupported)
	}
	return Action{}, false, nil
}

// Commit writes version v of the log: a put-if-absent, so ErrConflict
// when another writer has written v first.
func (t *Table) Commit(ctx context.Context, v int64, acts []Action) error {
	data, err := EncodeCommit(acts)
	if err != nil {
		return err
	}
	if err := t.st.PutIfAbsent(ctx, t.logKey(CommitName(v)), data); err != nil {
		if errors.Is(err, ErrExists) {
			return fmt.Errorf("%w: version %d exists", ErrConflict, v)
		}
		return fmt.Errorf("commit version %d: %w", v, err)
	}
	return nil
}

// Exists reports whether the table has a log.
func (t *Table) Exists(ctx context.Context) (bool, error) {
	keys, err := t.st.List(ctx, t.logKey(""))
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if lf, ok := parseLogName(k); ok && (lf.commit || lf.parts > 0) {
			return true, nil
		}
	}
	return false, nil
}

// ReadFile reads the rows of one live file: the schema's columns (null
// where the file predates a column), partition columns from the add's
// partitionValues.
func (t *Table) ReadFile(ctx context.Context, s *Snapshot, p string, limit int64) ([]Row, error) {
	add := s.Files[p]
	if add == nil {
		return nil, fmt.Errorf("%s is not a live file at version %d", p, s.Version)
	}
	if add.DeletionVector != nil {
		return nil, fmt.Errorf("%w: %s has a deletion vector", ErrUnsupported, p)
	}
	key := p
	if u, err := url.Parse(p); err != nil || u.Scheme == "" {
		key = t.Key(p)
	} else {
		return nil, fmt.Errorf("%w: absolute file path %s", ErrUnsupported, p)
	}
	data, err := t.st.Read(ctx, key, limit)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s is in the log but not in the store", ErrCorrupt, p)
		}
		return nil, err
	}
	raw, err := readParquetRows(ctx, data)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	parts := map[string]bool{}
	for _, c := range s.Metadata.PartitionColumns {
		parts[c] = true
	}
	out := make([]Row, 0, len(raw))
	for _, r := range raw {
		row := make(Row, len(s.Schema.Fields))
		for _, f := range s.Schema.Fields {
			if parts[f.Name] {
				pv, ok := add.PartitionValues[f.Name]
				if !ok {
					return nil, fmt.Errorf("%w: %s has no value for partition column %s", ErrCorrupt, p, f.Name)
				}
				v, err := partitionValue(f.Type, pv)
				if err != nil {
					return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
				}
				row[f.Name] = v
				continue
			}
			row[f.Name] = r[f.Name]
		}
		out = append(out, row)
	}
	return out, nil
}

// Rows reads every live file's rows, in path order.
func (t *Table) Rows(ctx context.Context, s *Snapshot) ([]Row, error) {
	var out []Row
	for _, p := range s.Paths() {
		rows, err := t.ReadFile(ctx, s, p, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}
