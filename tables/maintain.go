package tables

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/tributary-io/tributary/tables/delta"
)

// Lease properties.
const (
	PropMaintainHolder = "tributary.maintain.holder"
	PropMaintainUntil  = "tributary.maintain.until"
)

// Per-stream policy overrides in table properties. The first two are the
// standard Iceberg keys, which a table may only raise above the node's
// policy; the rest are Tributary's (the orphan grace floored at
// MinOrphanGrace). gc.enabled is not honoured: see expire.
const (
	PropSnapshotMaxAgeMs = table.MaxSnapshotAgeMsKey   // history.expire.max-snapshot-age-ms
	PropRetainSnapshots  = table.MinSnapshotsToKeepKey // history.expire.min-snapshots-to-keep
	PropTargetFileSize   = "tributary.maintain.target-file-size-bytes"
	PropMaxManifests     = "tributary.maintain.max-manifests"
	PropOrphanGraceMs    = "tributary.maintain.orphan-grace-ms"
)

// ErrLeaseHeld is returned by a pass when another maintainer holds the
// table's lease; the pass did nothing.
var ErrLeaseHeld = errors.New("maintenance lease held by another maintainer")

// ErrLeaseLost is returned when this maintainer's lease expired or was taken
// during a pass; the pass stopped at a safe point.
var ErrLeaseLost = errors.New("maintenance lease lost")

// Policy says how a table is maintained. Zero fields take the defaults
// below; a stream's table properties (Prop* above) override them.
type Policy struct {
	// SnapshotMaxAge: snapshots younger than this are kept. Default 1h.
	SnapshotMaxAge time.Duration
	// RetainSnapshots: at least this many of the newest snapshots are kept,
	// whatever their age. Default 100.
	RetainSnapshots int
	// TargetFileSize of compacted files. Default 128 MiB.
	TargetFileSize int64
	// MaxManifests: above this many data manifests in the current snapshot,
	// manifests are merged. Default 10.
	MaxManifests int
	// OrphanGrace: unreferenced files younger than this are kept. Default 24h.
	OrphanGrace time.Duration
	// LeaseTTL is how long a lease lasts without renewal. Default 10m.
	LeaseTTL time.Duration
	// MaxCompactBytes bounds the input bytes compacted per pass. Default 1 GiB.
	MaxCompactBytes int64
	// Holder names this maintainer in the lease. Default host-pid-random.
	Holder string
	// DeltaFileRetention: a data file a table's Delta log removed (a
	// compaction input) is kept this long after the remove, for Delta
	// readers' time travel. Default 7 days; a Delta table's own
	// delta.deletedFileRetentionDuration may raise it, and a pass raises
	// the table's to it (deltamaint.go).
	DeltaFileRetention time.Duration
	// DeltaLogRetention: a Delta log's JSON commits and checkpoints
	// below its latest checkpoint are deleted once older than this.
	// Default 30 days; delta.logRetentionDuration may raise it.
	DeltaLogRetention time.Duration
}

// Policy defaults.
const (
	DefaultSnapshotMaxAge  = time.Hour
	DefaultRetainSnapshots = 100
	DefaultTargetFileSize  = 128 << 20
	DefaultMaxManifests    = 10
	DefaultOrphanGrace     = 24 * time.Hour
	// MinOrphanGrace is the floor of any orphan grace (configured, given
	// on the command line or set as a table property): an upload whose
	// commit is still being retried must never look like an orphan.
	MinOrphanGrace         = time.Hour
	DefaultLeaseTTL        = 10 * time.Minute
	DefaultMaxCompactBytes = 1 << 30
	// DefaultDeltaFileRetention and DefaultDeltaLogRetention are Delta's
	// own defaults of delta.deletedFileRetentionDuration and
	// delta.logRetentionDuration.
	DefaultDeltaFileRetention = delta.DefaultTombstoneRetention
	DefaultDeltaLogRetention  = delta.DefaultLogRetention
)

var defaultHolder = func() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", h, os.Getpid(), uuid.NewString()[:8])
}()

// withDefaults fills zero fields, then applies the table's overrides.
func (p Policy) withDefaults(props iceberg.Properties) Policy {
	if p.SnapshotMaxAge <= 0 {
		p.SnapshotMaxAge = DefaultSnapshotMaxAge
	}
	if p.RetainSnapshots <= 0 {
		p.RetainSnapshots = DefaultRetainSnapshots
	}
	if p.TargetFileSize <= 0 {
		p.TargetFileSize = DefaultTargetFileSize
	}
	if p.MaxManifests <= 0 {
		p.MaxManifests = DefaultMaxManifests
	}
	if p.OrphanGrace <= 0 {
		p.OrphanGrace = DefaultOrphanGrace
	}
	clamp := func() {
		if p.OrphanGrace < MinOrphanGrace {
			p.OrphanGrace = MinOrphanGrace
		}
	}
	clamp()
	if p.LeaseTTL <= 0 {
		p.LeaseTTL = DefaultLeaseTTL
	}
	if p.MaxCompactBytes <= 0 {
		p.MaxCompactBytes = DefaultMaxCompactBytes
	}
	if p.Holder == "" {
		p.Holder = defaultHolder
	}
	if p.DeltaFileRetention <= 0 {
		p.DeltaFileRetention = DefaultDeltaFileRetention
	}
	if p.DeltaLogRetention <= 0 {
		p.DeltaLogRetention = DefaultDeltaLogRetention
	}
	if props != nil {
		// The history a table keeps is floored at the node's policy, as
		// the orphan grace is at MinOrphanGrace: a client that may commit
		// (history.expire.* are standard Iceberg keys, outside tributary.)
		// may keep more, never make the node expire sooner.
		if v, err := strconv.ParseInt(props[PropSnapshotMaxAgeMs], 10, 64); err == nil && v > 0 && v < math.MaxInt64/int64(time.Millisecond) {
			p.SnapshotMaxAge = max(p.SnapshotMaxAge, time.Duration(v)*time.Millisecond)
		}
		if v, err := strconv.Atoi(props[PropRetainSnapshots]); err == nil && v > 0 {
			p.RetainSnapshots = max(p.RetainSnapshots, v)
		}
		if v, err := strconv.ParseInt(props[PropTargetFileSize], 10, 64); err == nil && v > 0 {
			p.TargetFileSize = v
		}
		if v, err := strconv.Atoi(props[PropMaxManifests]); err == nil && v > 0 {
			p.MaxManifests = v
		}
		if v, err := strconv.ParseInt(props[PropOrphanGraceMs], 10, 64); err == nil && v > 0 {
			p.OrphanGrace = time.Duration(v) * time.Millisecond
			clamp()
		}
	}
	return p
}

// MaintainOptions tune one pass.
type MaintainOptions struct {
	Policy Policy
	// DryRun plans every step and reports what it would do, committing and
	// deleting nothing (and taking no lease).
	DryRun bool
	// Progress, if set, is told about each step as it starts and ends.
	Progress func(Progress)
	// DeltaStore is the warehouse's store for the tables' Delta logs
	// (deltamaint.go). Nil: on a file:// warehouse its folder; on any
	// other, a table with a Delta log has its manifests merged and
	// nothing else.
	DeltaStore delta.Store

	// beforeCommit is a test hook run before each maintenance commit.
	beforeCommit func(ctx context.Context, step string)
	// beforeDeltaRewrite is a test hook run between a compaction's
	// Iceberg commit and its Delta one; an error stands for a crash there.
	beforeDeltaRewrite func() error
}

// Progress reports a step of a pass.
type Progress struct {
	Step  string // lease, delta, compact, manifests, expire, orphans, delta-log, release
	Done  bool   // false when the step starts
	Note  string // what it did or would do
	Index int    // for compaction: group number (1-based), else 0
	Of    int    // for compaction: number of groups
}

// PassResult says what one pass did (or, dry-run, would do).
type PassResult struct {
	Stream string
	DryRun bool
	// Compaction.
	CompactGroups  int   // output files written (would write)
	CompactInputs  int   // input files replaced
	CompactRows    int64 // rows rewritten
	CompactBytes   int64 // input bytes
	CompactAborted int   // groups given up (an input vanished)
	// Manifests.
	ManifestsBefore, ManifestsAfter int
	// Snapshots.
	SnapshotsBefore, SnapshotsExpired int
	// Orphans.
	OrphansFound   int
	OrphansDeleted int
	OrphanBytes    int64
	// DeletesRefused counts deletes of paths outside the table's folder
	// that the pass refused (a statistics file, manifest list, manifest or
	// data file of an expired snapshot naming a file elsewhere);
	// RefusedPaths lists the first maxRefusedPaths of them.
	DeletesRefused int
	RefusedPaths   []string
	// Delta log (a table with one): its version after the pass, commits
	// made to it (rewrites, caught-up rewrites, retention settings), files
	// expiry or orphan cleanup left because it still references them,
	// log files cleaned up, and why the Delta-aware steps were skipped
	// ("" when they were not).
	DeltaVersion     int64
	DeltaCommits     int
	DeltaKept        int
	DeltaLogsDeleted int
	DeltaSkipped     string
	// Commits made by the pass and conflicts retried.
	Commits, Conflicts int
	Started            time.Time
	Duration           time.Duration
	Stats              TableStats
}

const maxMaintainAttempts = 50

// Maintain runs one maintenance pass over a stream's table: see the
// section above. It returns ErrLeaseHeld (wrapped) when another maintainer
// holds the table.
func (c *Catalog) Maintain(ctx context.Context, stream string, opts MaintainOptions) (res PassResult, err error) {
	res = PassResult{Stream: stream, DryRun: opts.DryRun, Started: time.Now(), DeltaVersion: -1}
	defer func() { res.Duration = time.Since(res.Started) }()
	progress := func(p Progress) {
		if opts.Progress != nil {
			opts.Progress(p)
		}
	}
	t, err := c.LoadTable(ctx, stream)
	if err != nil {
		return res, err
	}
	// Maintenance deletes files (expired snapshots' and orphans): only ever
	// of a table that lives in its own folder of the warehouse.
	if loc, want := strings.TrimRight(t.Location(), "/"), c.TableLocation(stream); loc != want {
		return res, fmt.Errorf("maintain %s: %w: table location %s is not its folder %s of the warehouse", stream, ErrForeignLocation, loc, want)
	}
	pol := opts.Policy.withDefaults(t.Properties())
	m := &pass{c: c, stream: stream, folder: c.TableLocation(stream), pol: pol, opts: opts, res: &res, progress: progress}

	if !opts.DryRun {
		progress(Progress{Step: "lease"})
		if err := m.acquire(ctx); err != nil {
			return res, err
		}
		progress(Progress{Step: "lease", Done: true, Note: "held by " + pol.Holder})
		defer func() {
			progress(Progress{Step: "release"})
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := m.release(rctx); err != nil {
				progress(Progress{Step: "release", Done: true, Note: "not released (expires by itself): " + err.Error()})
			} else {
				progress(Progress{Step: "release", Done: true, Note: "released"})
			}
		}()
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"delta", m.prepareDelta},
		{"manifests", m.rewriteManifests}, // first: a replace rewrites every manifest holding an input
		{"compact", m.compact},
		{"manifests", m.rewriteManifests},
		{"expire", m.expire},
		{"orphans", m.orphans},
		{"delta-log", m.cleanDeltaLog},
	}
	for i, s := range steps {
		if opts.DryRun && i == 3 {
			continue // a dry run merged nothing before compacting
		}
		if err := s.fn(ctx); err != nil {
			return res, fmt.Errorf("maintain %s: %s: %w", stream, s.name, err)
		}
	}
	st, err := c.Stats(ctx, stream)
	if err != nil {
		return res, err
	}
	res.Stats = st
	return res, nil
}

// pass is the state of one Maintain call.
type pass struct {
	c        *Catalog
	stream   string
	folder   string // the table's own folder: every delete stays inside it
	pol      Policy
	opts     MaintainOptions
	res      *PassResult
	progress func(Progress)
	leased   bool

	manifestsSeen bool
	refusedMu     sync.Mutex

	dl *deltaSide // the table's Delta log, nil when it has none
}

const maxRefusedPaths = 20

// loadTable loads the table with its FileIO confined to the table's
// folder (confine.go): every delete of the pass, and of iceberg-go's
// post-commit cleanup of its transactions, goes through it.
func (m *pass) loadTable(ctx context.Context) (*table.Table, error) {
	t, err := m.c.LoadTable(ctx, m.stream)
	if err != nil {
		return nil, err
	}
	return confine(t, m.c.cat, m.folder, m.refused, m.deltaKeeps), nil
}

// refused records a delete the confined FileIO refused.
func (m *pass) refused(path string) {
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	m.res.DeletesRefused++
	if len(m.res.RefusedPaths) < maxRefusedPaths {
		m.res.RefusedPaths = append(m.res.RefusedPaths, path)
	}
}

// leaseState reads the lease properties of a loaded table.
func leaseState(t *table.Table) (holder string, until time.Time) {
	props := t.Properties()
	ms, _ := strconv.ParseInt(props[PropMaintainUntil], 10, 64)
	return props[PropMaintainHolder], time.UnixMilli(ms)
}

// LeaseHolder returns who holds a table's maintenance lease and until when
// ("" when nobody does).
func LeaseHolder(t *table.Table) (string, time.Time) {
	h, u := leaseState(t)
	if h == "" || !u.After(time.Now()) {
		return "", time.Time{}
	}
	return h, u
}

func (m *pass) acquire(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		t, err := m.loadTable(ctx)
		if err != nil {
			return err
		}
		holder, until := leaseState(t)
		now := time.Now()
		if holder != "" && holder != m.pol.Holder && until.After(now) {
			return fmt.Errorf("maintain %s: %w: %s until %s", m.stream, ErrLeaseHeld, holder, until.UTC().Format(time.RFC3339))
		}
		tx := t.NewTransaction()
		if err := tx.SetProperties(m.leaseProps(now)); err != nil {
			return err
		}
		// The empty append moves the branch: see "The lease".
		if err := tx.AddFiles(ctx, nil, iceberg.Properties{"tributary.operation": "maintain-lease", "tributary.maintainer": m.pol.Holder}, true); err != nil {
			return err
		}
		if err := m.commit(ctx, "lease", tx, attempt); err != nil {
			if errors.Is(err, errRetry) {
				continue
			}
			return err
		}
		m.leased = true
		return nil
	}
}

func (m *pass) leaseProps(now time.Time) iceberg.Properties {
	return iceberg.Properties{
		PropMaintainHolder: m.pol.Holder,
		PropMaintainUntil:  strconv.FormatInt(now.Add(m.pol.LeaseTTL).UnixMilli(), 10),
	}
}

// load reloads the table and, outside dry runs, checks that this pass
// still holds an unexpired lease on it.
func (m *pass) load(ctx context.Context) (*table.Table, error) {
	t, err := m.loadTable(ctx)
	if err != nil {
		return nil, err
	}
	if m.opts.DryRun {
		return t, nil
	}
	holder, until := leaseState(t)
	if holder != m.pol.Holder || !until.After(time.Now().Add(m.pol.LeaseTTL/10)) {
		return nil, fmt.Errorf("%w: holder %q until %s", ErrLeaseLost, holder, until.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// renewIfDue adds a lease renewal to tx when less than half the TTL is left.
func (m *pass) renewIfDue(t *table.Table, tx *table.Transaction) error {
	_, until := leaseState(t)
	if time.Until(until) > m.pol.LeaseTTL/2 {
		return nil
	}
	return tx.SetProperties(m.leaseProps(time.Now()))
}

func (m *pass) release(ctx context.Context) error {
	if !m.leased {
		return nil
	}
	for attempt := 1; ; attempt++ {
		t, err := m.loadTable(ctx)
		if err != nil {
			return err
		}
		if holder, _ := leaseState(t); holder != m.pol.Holder {
			return nil // taken over after expiry: nothing of ours to release
		}
		tx := t.NewTransaction()
		if err := tx.SetProperties(iceberg.Properties{PropMaintainHolder: "", PropMaintainUntil: "0"}); err != nil {
			return err
		}
		if err := m.commit(ctx, "release", tx, attempt); err != nil {
			if errors.Is(err, errRetry) {
				continue
			}
			return err
		}
		m.leased = false
		return nil
	}
}

var errRetry = errors.New("retry")

// commit commits a maintenance transaction. A conflict returns errRetry
// (after a short pause) while attempts remain; the caller reloads and
// re-plans. A commit that succeeded but whose post-commit cleanup failed
// counts as committed.
func (m *pass) commit(ctx context.Context, step string, tx *table.Transaction, attempt int) error {
	if m.opts.beforeCommit != nil {
		m.opts.beforeCommit(ctx, step)
	}
	nt, err := tx.Commit(ctx)
	if err == nil || nt != nil {
		m.res.Commits++
		if nt != nil {
			m.c.remember(m.stream, nt)
		}
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if isConflict(err) && attempt < maxMaintainAttempts {
		m.res.Conflicts++
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.N(min(attempt, 20))+1) * 10 * time.Millisecond):
		}
		return errRetry
	}
	return fmt.Errorf("commit %s: %w", step, err)
}

func (m *pass) rewriteManifests(ctx context.Context) error {
	m.progress(Progress{Step: "manifests"})
	for attempt := 1; ; attempt++ {
		t, err := m.load(ctx)
		if err != nil {
			return err
		}
		n, err := dataManifestCount(ctx, t)
		if err != nil {
			return err
		}
		if !m.manifestsSeen {
			m.res.ManifestsBefore, m.manifestsSeen = n, true
		}
		m.res.ManifestsAfter = n
		if n <= m.pol.MaxManifests {
			m.progress(Progress{Step: "manifests", Done: true, Note: fmt.Sprintf("%d data manifests, at most %d wanted: nothing to do", n, m.pol.MaxManifests)})
			return nil
		}
		if m.opts.DryRun {
			m.progress(Progress{Step: "manifests", Done: true, Note: fmt.Sprintf("would merge %d data manifests", n)})
			return nil
		}
		tx := t.NewTransaction()
		r, err := tx.RewriteManifests(ctx)
		if err != nil {
			return err
		}
		if r.IsNoOp() {
			m.progress(Progress{Step: "manifests", Done: true, Note: fmt.Sprintf("%d data manifests already optimal", n)})
			return nil
		}
		if err := m.renewIfDue(t, tx); err != nil {
			return err
		}
		if err := m.commit(ctx, "manifests", tx, attempt); err != nil {
			if errors.Is(err, errRetry) {
				continue
			}
			return err
		}
		m.res.ManifestsAfter = n - len(r.RewrittenManifests) + len(r.AddedManifests)
		m.progress(Progress{Step: "manifests", Done: true, Note: fmt.Sprintf("merged %d data manifests into %d (now %d)",
			len(r.RewrittenManifests), len(r.AddedManifests), m.res.ManifestsAfter)})
		return nil
	}
}

func (m *pass) expire(ctx context.Context) error {
	if m.deltaBlocked("expire") {
		return nil
	}
	m.progress(Progress{Step: "expire"})
	for attempt := 1; ; attempt++ {
		t, err := m.load(ctx)
		if err != nil {
			return err
		}
		before := len(t.Metadata().Snapshots())
		m.res.SnapshotsBefore = before
		tx := t.NewTransaction()
		// gc.enabled=false would stop expiry (iceberg-go refuses it) and
		// so every later step, for good: a table's files are confined to
		// its own folder, which only its own metadata references, so the
		// node keeps gc on (see floors in withDefaults).
		if !t.Properties().GetBool(table.GCEnabledKey, table.GCEnabledDefault) {
			if err := tx.SetProperties(iceberg.Properties{table.GCEnabledKey: "true"}); err != nil {
				return err
			}
		}
		if err := tx.ExpireSnapshots(table.WithOlderThan(m.pol.SnapshotMaxAge), table.WithRetainLast(m.pol.RetainSnapshots)); err != nil {
			return err
		}
		st, err := tx.StagedTable()
		if err != nil {
			return err
		}
		n := before - len(st.Metadata().Snapshots())
		if n == 0 {
			m.progress(Progress{Step: "expire", Done: true, Note: fmt.Sprintf("%d snapshots, none expired (keep %s and the last %d)", before, m.pol.SnapshotMaxAge, m.pol.RetainSnapshots)})
			return nil
		}
		if m.opts.DryRun {
			m.res.SnapshotsExpired = n
			m.progress(Progress{Step: "expire", Done: true, Note: fmt.Sprintf("would expire %d of %d snapshots", n, before)})
			return nil
		}
		if err := m.renewIfDue(t, tx); err != nil {
			return err
		}
		if err := m.readDeltaRefs(ctx); err != nil { // what the post-commit cleanup must leave
			return err
		}
		if err := m.commit(ctx, "expire", tx, attempt); err != nil {
			if errors.Is(err, errRetry) {
				continue
			}
			return err
		}
		m.res.SnapshotsExpired = n
		m.progress(Progress{Step: "expire", Done: true, Note: fmt.Sprintf("expired %d of %d snapshots", n, before)})
		return nil
	}
}

func (m *pass) orphans(ctx context.Context) error {
	if m.deltaBlocked("orphans") {
		return nil
	}
	m.progress(Progress{Step: "orphans"})
	t, err := m.load(ctx)
	if err != nil {
		return err
	}
	if err := m.readDeltaRefs(ctx); err != nil {
		return err
	}
	plan, err := t.PlanOrphanFiles(ctx, table.WithFilesOlderThan(m.pol.OrphanGrace))
	if err != nil {
		return err
	}
	// gocloud.dev's fileblob keeps attributes of X in a sidecar X.attrs:
	// it belongs to X, which is not an orphan unless listed itself.
	planned := map[string]bool{}
	for _, f := range plan.OrphanFiles() {
		planned[f.Path] = true
	}
	var orphans []table.OrphanFile
	mirror := newestMirrorMetadata(plan.OrphanFiles())
	for _, f := range plan.OrphanFiles() {
		if base, ok := strings.CutSuffix(f.Path, ".attrs"); ok && !planned[base] && m.exists(ctx, t, base) {
			continue
		}
		if f.Path == mirror {
			continue
		}
		if strings.Contains(f.Path, "/_delta_log/") {
			continue // the Delta log of an [iceberg, delta] stream: not Iceberg's to judge
		}
		if m.deltaKeeps(f.Path) {
			continue // the Delta log still references it (deltamaint.go invariant 2)
		}
		orphans = append(orphans, f)
		m.res.OrphanBytes += f.SizeBytes
	}
	m.res.OrphansFound = len(orphans)
	if m.opts.DryRun || m.res.OrphansFound == 0 {
		verb := "would delete"
		if !m.opts.DryRun {
			verb = "deleted"
		}
		m.progress(Progress{Step: "orphans", Done: true, Note: fmt.Sprintf("%s %d unreferenced files older than %s (%d bytes)",
			verb, m.res.OrphansFound, m.pol.OrphanGrace, m.res.OrphanBytes)})
		return nil
	}
	// Deleting is not a commit: do it only with a comfortable lease. t was
	// loaded with the lease checked, so a renewal planned on it is fenced.
	if _, until := leaseState(t); time.Until(until) < m.pol.LeaseTTL/2 {
		tx := t.NewTransaction()
		if err := tx.SetProperties(m.leaseProps(time.Now())); err != nil {
			return err
		}
		if err := m.commit(ctx, "renew", tx, maxMaintainAttempts); err != nil {
			m.progress(Progress{Step: "orphans", Done: true, Note: "lease not renewed, orphans left for the next pass"})
			return nil
		}
	}
	fs, err := t.FS(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range orphans {
		if err := fs.Remove(f.Path); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		m.res.OrphansDeleted++
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.progress(Progress{Step: "orphans", Done: true, Note: fmt.Sprintf("deleted %d unreferenced files older than %s (%d bytes)",
		m.res.OrphansDeleted, m.pol.OrphanGrace, m.res.OrphanBytes)})
	return nil
}

func (m *pass) exists(ctx context.Context, t *table.Table, path string) bool {
	fs, err := t.FS(ctx)
	if err != nil {
		return true
	}
	f, err := fs.Open(path)
	if err != nil {
		return !errors.Is(err, iofs.ErrNotExist)
	}
	f.Close()
	return true
}

// dataManifestCount counts the data manifests of the current snapshot.
func dataManifestCount(ctx context.Context, t *table.Table) (int, error) {
	s := t.CurrentSnapshot()
	if s == nil {
		return 0, nil
	}
	fs, err := t.FS(ctx)
	if err != nil {
		return 0, err
	}
	mfs, err := s.Manifests(fs)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, mf := range mfs {
		if mf.ManifestContent() == iceberg.ManifestContentData {
			n++
		}
	}
	return n, nil
}

// mirrorMetadataRE matches the metadata files an external catalog writes
// into the table's metadata folder when package federation commits to
// the table's mirror there (SeaweedFS: vN.metadata.json); Tributary's own
// catalogs name theirs NNNNN-UUID.metadata.json.
var mirrorMetadataRE = regexp.MustCompile(`/metadata/v([0-9]{1,18})\.metadata\.json$`)

// newestMirrorMetadata is the orphan candidate that may be a mirror's
// current metadata file (the highest vN; "" when none), which orphan
// cleanup keeps: a stream that has not committed for longer than the
// grace would otherwise lose its mirror's metadata. Older ones go.
func newestMirrorMetadata(files []table.OrphanFile) string {
	best, bestN := "", int64(-1)
	for _, f := range files {
		m := mirrorMetadataRE.FindStringSubmatch(f.Path)
		if m == nil {
			continue
		}
		if n, err := strconv.ParseInt(m[1], 10, 64); err == nil && n > bestN {
			best, bestN = f.Path, n
		}
	}
	return best
}
