// Package federation publishes a cloud server's streams into the Iceberg
// REST catalogs an organisation already runs (Unity, Polaris, Glue, S3
// Tables, Nessie, Lakekeeper, SeaweedFS): each selected stream's table is
// registered there as a read-only mirror (`register-table` with its
// current metadata location) and kept current after every commit.
//
// # How the mirror follows
//
// Each catalog has its own loop (Run): every interval it lists the
// streams of the server's own catalog, loads each selected one, and for a
// table whose metadata location moved since the last round brings the
// mirror up to date. The Iceberg REST protocol has no "point this entry at
// another metadata file" (re-registering needs a drop, and a drop purges
// the table's files on SeaweedFS and others), so the mirror is kept
// current by an ordinary commit to it: the source's schemas and partition
// specs it lacks, the snapshots it lacks (in sequence order, their
// manifest lists are the source's own files), main set to the source's
// current snapshot, the snapshots the source expired removed, and the
// properties (the tributary.* marks included) set or removed as in the
// source. The commit asserts the mirror's UUID (the source's, as
// registered) and its main snapshot, so a concurrent writer makes it fail
// and the next round decides again. The catalog writes its own metadata
// file for each such commit (SeaweedFS: TABLE/metadata/vN.metadata.json
// beside ours; the maintainer's orphan cleanup keeps the newest of them).
//
// # Invariants
//
//   - Nothing in a stream's own path waits for a mirror: the loops only
//     read the server's catalog and write the external one, each with its
//     own backoff (doubling to MaxBackoff) while it fails.
//   - A table of the mirror's name that is not this stream's (another
//     UUID) is never changed: it is reported as refused.
//   - Lag (Status, tributary_federation_lag_seconds) is measured from the
//     source commit the mirror is missing: the oldest snapshot it lacks, or
//     the source's last update when that is all it lacks.
package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// Defaults of Config.
const (
	DefaultInterval   = 2 * time.Second
	DefaultMaxBackoff = 30 * time.Second
	DefaultTimeout    = 30 * time.Second
	// maxStreams bounds the streams one round mirrors (the rest wait for
	// the next round), so that one round stays short.
	maxStreams = 10000
)

// Target is one external catalog.
type Target struct {
	// Name labels the catalog in metrics and on the console.
	Name string
	// Catalog opens it (a REST catalog: URI, Warehouse, token or
	// credential in Properties, or SigV4).
	Catalog tables.Config
	// Keys are the config keys its errors name (tables.CheckREST).
	Keys tables.CheckKeys
	// Namespace the mirrors are registered in ("a.b" for a nested one);
	// "" means each stream's own namespace. With a namespace, a stream
	// ns.name is mirrored as NAMESPACE.ns_name.
	Namespace string
	// Streams are the streams mirrored: names or path.Match globs over
	// "namespace.stream" (e.g. "factory.*"); none means all.
	Streams []string
}

// Mirror is the identifier of stream's mirror in t.
func (t Target) Mirror(stream string) (table.Identifier, error) {
	ns, name, err := tributary.ParseStream(stream)
	if err != nil {
		return nil, err
	}
	if t.Namespace == "" {
		return table.Identifier{ns, name}, nil
	}
	return append(strings.Split(t.Namespace, "."), ns+"_"+name), nil
}

// Selects tells whether t mirrors stream.
func (t Target) Selects(stream string) bool {
	if len(t.Streams) == 0 {
		return true
	}
	for _, p := range t.Streams {
		if ok, _ := path.Match(p, stream); ok || p == stream {
			return true
		}
	}
	return false
}

// Config configures the federation of one cloud server.
type Config struct {
	// Source is the server's own catalog, whose streams are mirrored.
	Source *tables.Catalog
	// Targets are the external catalogs.
	Targets []Target
	// Interval between rounds. Default DefaultInterval.
	Interval time.Duration
	// MaxBackoff bounds the wait after failed rounds. Default DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Timeout bounds each call to an external catalog (opening it, and
	// each mirror's update), so one that hangs costs a failed round, never
	// a stuck loop. Default DefaultTimeout.
	Timeout time.Duration
	// Open opens a target's catalog; default tables.CheckREST (tests may
	// put a fake in).
	Open   func(ctx context.Context, t Target) (catalog.Catalog, func(), error)
	Logger *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Federation runs one loop per target.
type Federation struct {
	cfg     Config
	loops   []*loop
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	metrics *collector
}

// New prepares the loops; Start runs them.
func New(cfg Config) *Federation {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Open == nil {
		cfg.Open = openREST
	}
	f := &Federation{cfg: cfg}
	for _, t := range cfg.Targets {
		f.loops = append(f.loops, &loop{cfg: &f.cfg, t: t, log: cfg.Logger.With("component", "federation", "catalog", t.Name),
			streams: map[string]*mirror{}})
	}
	f.metrics = &collector{f: f}
	return f
}

// openREST opens a target through tables.CheckREST, so that a wrong URI,
// credential or warehouse reads as the key to fix.
func openREST(ctx context.Context, t Target) (catalog.Catalog, func(), error) {
	c, err := tables.CheckREST(ctx, t.Catalog, t.Keys)
	if err != nil {
		return nil, nil, err
	}
	return c.Iceberg(), func() { c.Close() }, nil
}

// Start runs every target's loop until Close.
func (f *Federation) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for _, l := range f.loops {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			l.run(ctx)
		}()
	}
}

// Close stops the loops and waits for them.
func (f *Federation) Close() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
}

// CatalogStatus is the state of the mirrors in one catalog.
type CatalogStatus struct {
	Name string `json:"name"`
	URI  string `json:"uri"`
	// Mirrors is how many selected streams are current there; Behind how
	// many are not (yet).
	Mirrors int `json:"mirrors"`
	Behind  int `json:"behind"`
	// Lag is the age of the oldest commit a mirror lacks (0: all current).
	Lag time.Duration `json:"lag_ns"`
	// Errors counts failed rounds and refused mirror updates; LastError is
	// the latest ("" once a round succeeds).
	Errors    int64  `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// Streams that are behind, with why.
	Streams []StreamStatus `json:"streams,omitempty"`
}

// StreamStatus is one mirror that is behind.
type StreamStatus struct {
	Stream string        `json:"stream"`
	Mirror string        `json:"mirror"`
	Lag    time.Duration `json:"lag_ns"`
	Error  string        `json:"error,omitempty"`
}

// Status reports every catalog.
func (f *Federation) Status() []CatalogStatus {
	out := make([]CatalogStatus, 0, len(f.loops))
	for _, l := range f.loops {
		out = append(out, l.status())
	}
	return out
}

// loop mirrors into one target.
type loop struct {
	cfg *Config
	t   Target
	log *slog.Logger

	cat   catalog.Catalog
	close func()
	nsOK  map[string]bool // namespaces known to exist

	mu        sync.Mutex
	streams   map[string]*mirror
	errors    int64
	syncs     int64
	lastError string
}

// mirror is what the loop knows of one stream's mirror.
type mirror struct {
	id table.Identifier
	// synced is the source metadata location the mirror is known to
	// match ("" when unknown or behind).
	synced string
	// behindSince is when the oldest commit the mirror lacks was made
	// (zero when current).
	behindSince time.Time
	err         string
}

func (l *loop) run(ctx context.Context) {
	defer func() {
		if l.close != nil {
			l.close()
		}
	}()
	backoff := time.Duration(0)
	for {
		err := l.round(ctx)
		wait := l.cfg.Interval
		if err != nil && ctx.Err() == nil {
			l.mu.Lock()
			l.errors++
			l.lastError = err.Error()
			l.mu.Unlock()
			backoff = min(max(2*backoff, time.Second), l.cfg.MaxBackoff)
			wait = max(wait, backoff)
			l.log.Warn("federation round failed", "err", err, "retry_in", wait)
		} else {
			backoff = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// round brings every selected stream's mirror up to date once. A failure
// to reach the catalog ends the round (and drops the connection, opened
// again next round); a refusal of one mirror is recorded for it and the
// round goes on.
func (l *loop) round(ctx context.Context) error {
	src := l.cfg.Source
	// A SQL catalog answers every table's metadata location in one query:
	// only the tables that moved are loaded. A REST one: each is loaded.
	locs, err := src.MetadataLocations(ctx)
	if err != nil {
		return fmt.Errorf("read the metadata locations of catalog %s: %w", src.Name(), err)
	}
	var streams []string
	if locs != nil {
		for s := range locs {
			streams = append(streams, s)
		}
		sort.Strings(streams)
	} else if streams, err = src.ListStreams(ctx); err != nil {
		return fmt.Errorf("list the streams of catalog %s: %w", src.Name(), err)
	}
	var selected []string
	for _, s := range streams {
		if l.t.Selects(s) && len(selected) < maxStreams {
			selected = append(selected, s)
		}
	}
	now := l.cfg.Now()
	type todo struct {
		stream string
		tbl    *table.Table
	}
	var work []todo
	l.mu.Lock()
	for s := range l.streams {
		if !slices.Contains(selected, s) {
			delete(l.streams, s) // dropped, or no longer selected
		}
	}
	l.mu.Unlock()
	for _, s := range selected {
		l.mu.Lock()
		unmoved := locs != nil && l.streams[s] != nil && l.streams[s].synced != "" && l.streams[s].synced == locs[s]
		l.mu.Unlock()
		if unmoved {
			continue
		}
		tbl, err := src.LoadTable(ctx, s)
		if err != nil {
			if errors.Is(err, tables.ErrNoSuchStream) {
				continue
			}
			return err
		}
		l.mu.Lock()
		m := l.streams[s]
		if m == nil {
			id, err := l.t.Mirror(s)
			if err != nil {
				l.mu.Unlock()
				continue
			}
			m = &mirror{id: id}
			l.streams[s] = m
		}
		if m.synced != tbl.MetadataLocation() {
			if m.behindSince.IsZero() {
				m.behindSince = lastUpdated(tbl.Metadata(), now)
			}
			work = append(work, todo{s, tbl})
		}
		l.mu.Unlock()
	}
	if len(work) == 0 {
		l.mu.Lock()
		l.lastError = ""
		l.mu.Unlock()
		return nil
	}
	if l.cat == nil {
		octx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		cat, closeFn, err := l.cfg.Open(octx, l.t)
		cancel()
		if err != nil {
			return err
		}
		l.cat, l.close, l.nsOK = cat, closeFn, map[string]bool{}
	}
	var refused error
	for _, w := range work {
		l.mu.Lock()
		id := l.streams[w.stream].id
		l.mu.Unlock()
		since, err := l.sync(ctx, id, w.tbl)
		l.mu.Lock()
		m := l.streams[w.stream]
		switch {
		case err == nil:
			m.synced, m.behindSince, m.err = w.tbl.MetadataLocation(), time.Time{}, ""
		default:
			m.err = err.Error()
			if !since.IsZero() && since.Before(m.behindSince) {
				m.behindSince = since
			}
		}
		l.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			if unreachable(err) {
				l.reset()
				return fmt.Errorf("mirror %s: %w", w.stream, err)
			}
			l.log.Warn("mirror refused", "stream", w.stream, "mirror", strings.Join(id, "."), "err", err)
			l.mu.Lock()
			l.errors++
			l.mu.Unlock()
			refused = fmt.Errorf("mirror %s as %s: %w", w.stream, strings.Join(id, "."), err)
		}
	}
	l.mu.Lock()
	if refused != nil {
		l.lastError = refused.Error()
	} else {
		l.lastError = ""
	}
	l.mu.Unlock()
	return nil
}

// reset drops the connection to the catalog (opened again next round).
func (l *loop) reset() {
	if l.close != nil {
		l.close()
	}
	l.cat, l.close = nil, nil
}

// unreachable tells a failure to reach the catalog (or a refused
// credential: the session is opened again) from a refusal of one mirror.
func unreachable(err error) bool {
	s := strings.ToLower(err.Error())
	for _, sign := range []string{"connection refused", "no such host", "i/o timeout", "network is unreachable", "connection reset",
		"no route to host", "eof", "unauthorized", "not authorized", "oauth", "expired", "context deadline exceeded", "server misbehaving"} {
		if strings.Contains(s, sign) {
			return true
		}
	}
	return false
}

// sync registers src as the mirror id, or brings the mirror to src's
// state. since is the time of the oldest commit the mirror lacks, when
// known.
func (l *loop) sync(ctx context.Context, id table.Identifier, src *table.Table) (since time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	ns := table.Identifier(id[:len(id)-1])
	if key := strings.Join(ns, "."); !l.nsOK[key] {
		ok, err := l.cat.CheckNamespaceExists(ctx, ns)
		if err != nil {
			return since, fmt.Errorf("namespace %s: %w", key, err)
		}
		if !ok {
			if err := l.cat.CreateNamespace(ctx, ns, iceberg.Properties{"comment": "Tributary streams (read-only mirrors)"}); err != nil &&
				!errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
				return since, fmt.Errorf("create namespace %s: %w", key, err)
			}
		}
		l.nsOK[key] = true
	}
	cur, err := l.cat.LoadTable(ctx, id)
	switch {
	case errors.Is(err, catalog.ErrNoSuchTable):
		if _, err := registerer(l.cat).RegisterTable(ctx, id, src.MetadataLocation()); err != nil {
			return lastUpdated(src.Metadata(), time.Time{}), fmt.Errorf("register-table with %s: %w", src.MetadataLocation(), err)
		}
		l.count()
		l.log.Info("stream registered", "mirror", strings.Join(id, "."), "metadata", src.MetadataLocation())
		return since, nil
	case errors.Is(err, catalog.ErrNoSuchNamespace):
		delete(l.nsOK, strings.Join(ns, "."))
		return since, fmt.Errorf("load mirror: %w", err)
	case err != nil:
		return since, fmt.Errorf("load mirror: %w", err)
	}
	reqs, updates, since, err := Diff(cur.Metadata(), src.Metadata())
	if err != nil || len(updates) == 0 {
		return since, err
	}
	if _, _, err := l.cat.CommitTable(ctx, id, reqs, updates); err != nil {
		return since, fmt.Errorf("commit to the mirror: %w", err)
	}
	l.count()
	return time.Time{}, nil
}

func (l *loop) count() {
	l.mu.Lock()
	l.syncs++
	l.mu.Unlock()
}

// registerer is the RegisterTable of cat (every REST catalog has it; the
// catalog.Catalog interface does not list it).
func registerer(cat catalog.Catalog) interface {
	RegisterTable(ctx context.Context, id table.Identifier, metadataLoc string) (*table.Table, error)
} {
	if r, ok := cat.(interface {
		RegisterTable(ctx context.Context, id table.Identifier, metadataLoc string) (*table.Table, error)
	}); ok {
		return r
	}
	return noRegister{}
}

type noRegister struct{}

func (noRegister) RegisterTable(context.Context, table.Identifier, string) (*table.Table, error) {
	return nil, errors.New("this catalog cannot register tables")
}

// ErrNotMirror: a table of the mirror's name exists and is another table.
var ErrNotMirror = errors.New("a table of that name exists and is not this stream's mirror (another table UUID): left alone")

// Diff is the commit that brings mirror (registered from src's table) to
// src's state: requirements asserting the mirror's UUID and main
// snapshot, and the updates (nil when it is current). since is the time
// of the oldest commit the mirror lacks.
func Diff(mirror, src table.Metadata) (reqs []table.Requirement, updates []table.Update, since time.Time, err error) {
	if mirror.TableUUID() != src.TableUUID() {
		return nil, nil, since, ErrNotMirror
	}
	note := func(ms int64) {
		if t := time.UnixMilli(ms); since.IsZero() || t.Before(since) {
			since = t
		}
	}
	for _, s := range src.Schemas() {
		if !slices.ContainsFunc(mirror.Schemas(), func(m *iceberg.Schema) bool { return m.ID == s.ID }) {
			updates = append(updates, table.NewAddSchemaUpdate(s))
		}
	}
	if src.CurrentSchema().ID != mirror.CurrentSchema().ID {
		updates = append(updates, table.NewSetCurrentSchemaUpdate(src.CurrentSchema().ID))
	}
	for _, s := range src.PartitionSpecs() {
		if !slices.ContainsFunc(mirror.PartitionSpecs(), func(m iceberg.PartitionSpec) bool { return m.ID() == s.ID() }) {
			updates = append(updates, table.NewAddPartitionSpecUpdate(&s, false))
		}
	}
	if src.DefaultPartitionSpec() != mirror.DefaultPartitionSpec() {
		updates = append(updates, table.NewSetDefaultSpecUpdate(src.DefaultPartitionSpec()))
	}
	have := map[int64]bool{}
	for _, s := range mirror.Snapshots() {
		have[s.SnapshotID] = true
	}
	var add []table.Snapshot
	for _, s := range src.Snapshots() {
		if !have[s.SnapshotID] {
			add = append(add, s)
		}
	}
	sort.Slice(add, func(i, j int) bool { return add[i].SequenceNumber < add[j].SequenceNumber })
	for i := range add {
		note(add[i].TimestampMs)
		updates = append(updates, table.NewAddSnapshotUpdate(&add[i]))
	}
	srcCur, mirCur := src.CurrentSnapshot(), mirror.CurrentSnapshot()
	if srcCur != nil && (mirCur == nil || mirCur.SnapshotID != srcCur.SnapshotID) {
		note(srcCur.TimestampMs)
		updates = append(updates, table.NewSetSnapshotRefUpdate(table.MainBranch, srcCur.SnapshotID, table.BranchRef, -1, -1, -1))
	}
	srcHas := map[int64]bool{}
	for _, s := range src.Snapshots() {
		srcHas[s.SnapshotID] = true
	}
	var gone []int64
	for _, s := range mirror.Snapshots() {
		if !srcHas[s.SnapshotID] && (srcCur == nil || s.SnapshotID != srcCur.SnapshotID) {
			gone = append(gone, s.SnapshotID)
		}
	}
	if len(gone) > 0 {
		updates = append(updates, table.NewRemoveSnapshotsUpdate(gone, false))
	}
	set := iceberg.Properties{}
	for k, v := range src.Properties() {
		if mirror.Properties()[k] != v {
			set[k] = v
		}
	}
	var removed []string
	for k := range mirror.Properties() {
		if _, ok := src.Properties()[k]; !ok {
			removed = append(removed, k)
		}
	}
	sort.Strings(removed)
	if len(set) > 0 {
		updates = append(updates, table.NewSetPropertiesUpdate(set))
	}
	if len(removed) > 0 {
		updates = append(updates, table.NewRemovePropertiesUpdate(removed))
	}
	if len(updates) == 0 {
		return nil, nil, time.Time{}, nil
	}
	if since.IsZero() {
		note(src.LastUpdatedMillis())
	}
	var mirID *int64
	if mirCur != nil {
		id := mirCur.SnapshotID
		mirID = &id
	}
	reqs = []table.Requirement{table.AssertTableUUID(mirror.TableUUID()), table.AssertRefSnapshotID(table.MainBranch, mirID)}
	return reqs, updates, since, nil
}

// lastUpdated is when md's table last changed (def when unknown).
func lastUpdated(md table.Metadata, def time.Time) time.Time {
	if ms := md.LastUpdatedMillis(); ms > 0 {
		return time.UnixMilli(ms)
	}
	return def
}

func (l *loop) status() CatalogStatus {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := CatalogStatus{Name: l.t.Name, URI: tables.Redact(l.t.Catalog.URI), Errors: l.errors, LastError: l.lastError}
	for s, m := range l.streams {
		if m.behindSince.IsZero() && m.synced != "" {
			st.Mirrors++
			continue
		}
		st.Behind++
		lag := time.Duration(0)
		if !m.behindSince.IsZero() {
			lag = max(now.Sub(m.behindSince), 0)
		}
		st.Lag = max(st.Lag, lag)
		st.Streams = append(st.Streams, StreamStatus{Stream: s, Mirror: strings.Join(m.id, "."), Lag: lag, Error: m.err})
	}
	sort.Slice(st.Streams, func(i, j int) bool { return st.Streams[i].Stream < st.Streams[j].Stream })
	return st
}
