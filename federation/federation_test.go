package federation

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/tabletest"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
)

const stream = "factory.telemetry"

// source is a real SQLite catalog with stream committed once.
func source(t *testing.T) *tables.Catalog {
	t.Helper()
	dir := t.TempDir()
	c, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "wh")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	commit(t, c, 0, 10)
	return c
}

func commit(t *testing.T, c *tables.Catalog, from, n int) {
	t.Helper()
	p, err := c.AllocatePartition(context.Background(), stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*tributary.Record, n)
	for i := range recs {
		off := int64(from + i)
		recs[i] = &tributary.Record{Stream: stream, Partition: p, Offset: off, Timestamp: time.Now().UnixMicro(), Topic: "factory/x",
			Value: []byte(fmt.Sprintf("v%d", off)), Source: "mqtt", Node: "n1"}
	}
	tabletest.Commit(t, c, stream, recs)
}

func load(t *testing.T, c *tables.Catalog) table.Metadata {
	t.Helper()
	tbl, err := c.LoadTable(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return tbl.Metadata()
}

// apply commits reqs and updates onto base the way a REST catalog does
// (requirements validated, updates applied by iceberg-go's builder, as
// SeaweedFS's commit handler does).
func apply(base table.Metadata, reqs []table.Requirement, updates []table.Update) (table.Metadata, error) {
	for _, r := range reqs {
		if err := r.Validate(base); err != nil {
			return nil, fmt.Errorf("%w: %v", table.ErrCommitFailed, err)
		}
	}
	b, err := table.MetadataBuilderFromBase(base, "")
	if err != nil {
		return nil, err
	}
	for _, u := range updates {
		if err := u.Apply(b); err != nil {
			return nil, err
		}
	}
	return b.Build()
}

// TestDiffFollows: the commit Diff computes brings a mirror registered
// from an older state of the table to its current state (snapshots, main,
// marks); the mirror is then current (no updates); a commit racing it
// (main moved) fails its requirement; another table is never touched.
func TestDiffFollows(t *testing.T) {
	src := source(t)
	old := load(t, src)
	commit(t, src, 10, 5)
	commit(t, src, 15, 5)
	now := load(t, src)
	reqs, updates, since, err := Diff(old, now)
	if err != nil || len(updates) == 0 {
		t.Fatalf("diff: %v %v", updates, err)
	}
	if since.IsZero() || since.After(time.Now()) {
		t.Fatalf("since %v", since)
	}
	got, err := apply(old, reqs, updates)
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentSnapshot().SnapshotID != now.CurrentSnapshot().SnapshotID || got.Properties()[tables.PropHighWater+"0"] != "20" {
		t.Fatalf("mirror after the commit: snapshot %d props %v", got.CurrentSnapshot().SnapshotID, got.Properties())
	}
	if _, u, _, err := Diff(got, now); err != nil || len(u) != 0 {
		t.Fatalf("a current mirror gets updates %v (%v)", u, err)
	}
	// main moved under the commit (another writer): the requirement fails.
	if _, err := apply(now, reqs, updates); !errors.Is(err, table.ErrCommitFailed) {
		t.Fatalf("commit against a moved main: %v", err)
	}
	other, err := table.NewMetadata(iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "x", Type: iceberg.PrimitiveTypes.Int32}),
		iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "file:///elsewhere", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Diff(other, now); !errors.Is(err, ErrNotMirror) {
		t.Fatalf("diff against another table: %v", err)
	}
}

// TestTargetNames: mirror identifiers and stream selection.
func TestTargetNames(t *testing.T) {
	tg := Target{Streams: []string{"factory.*", "plant.one"}}
	for s, want := range map[string]bool{"factory.telemetry": true, "plant.one": true, "plant.two": false} {
		if tg.Selects(s) != want {
			t.Errorf("Selects(%s) = %v", s, !want)
		}
	}
	if id, _ := tg.Mirror(stream); strings.Join(id, ".") != stream {
		t.Errorf("mirror %v", id)
	}
	tg.Namespace = "lake.streams"
	if id, _ := tg.Mirror(stream); len(id) != 3 || id[2] != "factory_telemetry" {
		t.Errorf("mirror in a namespace %v", id)
	}
	if !(Target{}).Selects("any.thing") {
		t.Error("no streams: all")
	}
}

// memCatalog is an external REST catalog in memory (this package's unit
// tests only; TestFederation in e2e runs against SeaweedFS): namespaces,
// register-table and commits applied by iceberg-go's builder. down makes
// every call fail as a catalog that cannot be reached.
type memCatalog struct {
	catalog.Catalog
	mu      sync.Mutex
	ns      map[string]bool
	tables  map[string]table.Metadata
	down    bool
	commits int
}

var errDown = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

func (m *memCatalog) check() error {
	if m.down {
		return errDown
	}
	return nil
}

func (m *memCatalog) CheckNamespaceExists(_ context.Context, ns table.Identifier) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ns[strings.Join(ns, ".")], m.check()
}

func (m *memCatalog) CreateNamespace(_ context.Context, ns table.Identifier, _ iceberg.Properties) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ns[strings.Join(ns, ".")] = true
	return m.check()
}

func (m *memCatalog) LoadTable(_ context.Context, id table.Identifier) (*table.Table, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return nil, err
	}
	md, ok := m.tables[strings.Join(id, ".")]
	if !ok {
		return nil, catalog.ErrNoSuchTable
	}
	return table.New(id, md, "", nil, nil), nil
}

func (m *memCatalog) RegisterTable(ctx context.Context, id table.Identifier, loc string) (*table.Table, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return nil, err
	}
	md, err := table.NewFromLocation(ctx, id, loc, icebergio.LoadFSFunc(nil, loc), nil)
	if err != nil {
		return nil, err
	}
	m.tables[strings.Join(id, ".")] = md.Metadata()
	return md, nil
}

func (m *memCatalog) CommitTable(_ context.Context, id table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return nil, "", err
	}
	md, err := apply(m.tables[strings.Join(id, ".")], reqs, updates)
	if err != nil {
		return nil, "", err
	}
	m.tables[strings.Join(id, ".")] = md
	m.commits++
	return md, "", nil
}

func (m *memCatalog) current(id string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	md, ok := m.tables[id]
	if !ok || md.CurrentSnapshot() == nil {
		return -1
	}
	return md.CurrentSnapshot().SnapshotID
}

func (m *memCatalog) setDown(d bool) {
	m.mu.Lock()
	m.down = d
	m.mu.Unlock()
}

// TestLoopFollowsAndRecovers: the loop registers the stream, follows its
// commits, counts the rounds that fail while the catalog is down (the lag
// growing meanwhile) and catches up when it is back; a catalog refusing
// its credential shows as errors and lag of its own, nothing else waits.
func TestLoopFollowsAndRecovers(t *testing.T) {
	src := source(t)
	mem := &memCatalog{ns: map[string]bool{}, tables: map[string]table.Metadata{}}
	refused := errors.New("federation[1].credential: the catalog's token endpoint refused the client credentials")
	f := New(Config{Source: src, Interval: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Targets: []Target{{Name: "mem"}, {Name: "bad", Namespace: "mirrors"}},
		Open: func(_ context.Context, tg Target) (catalog.Catalog, func(), error) {
			if tg.Name == "bad" {
				return nil, nil, refused
			}
			return mem, func() {}, nil
		}})
	f.Start()
	defer f.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.Collectors()...)
	cur := func() int64 { return load(t, src).CurrentSnapshot().SnapshotID }
	testkit.Eventually(t, 10*time.Second, "the mirror registered", func() bool { return mem.current(stream) == cur() })
	commit(t, src, 10, 5)
	testkit.Eventually(t, 10*time.Second, "the mirror follows a commit", func() bool { return mem.current(stream) == cur() })
	mem.mu.Lock()
	commits := mem.commits
	mem.mu.Unlock()
	if commits == 0 {
		t.Fatal("followed without a commit to the mirror")
	}
	mem.setDown(true)
	commit(t, src, 15, 5) // the stream's own path does not wait for the mirror
	testkit.Eventually(t, 10*time.Second, "failed rounds and lag while the catalog is down", func() bool {
		st := f.Status()[0]
		return st.Errors > 0 && st.Behind == 1 && st.Lag > 0
	})
	mem.setDown(false)
	testkit.Eventually(t, 10*time.Second, "the mirror catches up", func() bool {
		st := f.Status()[0]
		return mem.current(stream) == cur() && st.Behind == 0 && st.Mirrors == 1 && st.Lag == 0 && st.LastError == ""
	})
	bad := f.Status()[1]
	if bad.Errors == 0 || !strings.Contains(bad.LastError, "federation[1].credential") || bad.Behind != 1 {
		t.Fatalf("refused catalog: %+v", bad)
	}
	if n := testutil.CollectAndCount(f.Collectors()[0]); n != 10 {
		t.Fatalf("%d samples, want 5 per catalog", n)
	}
	if v := testutil.ToFloat64(gauge(t, reg, "tributary_federation_errors_total", "bad")); v < 1 {
		t.Fatalf("errors of bad: %v", v)
	}
}

// gauge finds one sample of family name with catalog label c.
func gauge(t *testing.T, reg *prometheus.Registry, name, c string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "catalog" && l.GetValue() == c {
					v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
					g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
					g.Set(v)
					return g
				}
			}
		}
	}
	t.Fatalf("no %s{catalog=%q}", name, c)
	return nil
}

// TestLoopHungCatalog: a catalog that never answers (the worst an
// external catalog can do) costs failed rounds bounded by Timeout, with
// the lag showing; the loop does not hang and Close returns.
func TestLoopHungCatalog(t *testing.T) {
	src := source(t)
	f := New(Config{Source: src, Interval: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Targets: []Target{{Name: "hung"}},
		Open: func(ctx context.Context, _ Target) (catalog.Catalog, func(), error) {
			<-ctx.Done() // never answers
			return nil, nil, ctx.Err()
		}})
	f.Start()
	testkit.Eventually(t, 10*time.Second, "failed rounds of a hung catalog", func() bool {
		st := f.Status()[0]
		return st.Errors >= 3 && st.Behind == 1 && st.Lag > 0 && strings.Contains(st.LastError, "deadline")
	})
	f.Close()
}
