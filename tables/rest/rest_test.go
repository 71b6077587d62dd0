package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/tabletest"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/rest"
)

// env is a warehouse directory with a SQLite catalog and one or more REST
// servers over it (each with its own catalog connection, like separate
// server processes).
type env struct {
	dir       string
	warehouse string
	servers   []*rest.Server
	commits   atomic.Int64 // POSTs to a table's commit route, all servers
	conflicts atomic.Int64 // 409 answers to those
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newEnv(t *testing.T, servers int, opts rest.Options) *env {
	t.Helper()
	e := &env{dir: t.TempDir()}
	e.warehouse = "file://" + filepath.Join(e.dir, "warehouse")
	for range servers {
		backing, err := tables.Open(context.Background(), tables.Config{
			URI: "sqlite://" + filepath.Join(e.dir, "catalog.db"), Warehouse: e.warehouse,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { backing.Close() })
		o := opts
		o.Warehouse = e.warehouse
		if o.NodeToken == "" {
			o.NodeToken = testNodeToken
		}
		if o.Logger == nil {
			o.Logger = quietLogger()
		}
		h := rest.NewHandler(backing.Iceberg(), o)
		counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || !strings.Contains(r.URL.Path, "/tables/") {
				h.ServeHTTP(w, r)
				return
			}
			e.commits.Add(1)
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			h.ServeHTTP(rec, r)
			if rec.status == http.StatusConflict {
				e.conflicts.Add(1)
			}
		})
		srv, err := rest.Listen("127.0.0.1:0", counted, listen.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		})
		e.servers = append(e.servers, srv)
	}
	return e
}

// testNodeToken is the edge nodes' token of every test server (unless the
// test sets another): a tables.Catalog client writes marks and owners.
const testNodeToken = "node-token"

// client opens a tables.Catalog through server i, as an edge node (with
// the node token unless props name a token).
func (e *env) client(t *testing.T, i int, props map[string]string) *tables.Catalog {
	t.Helper()
	if _, ok := props["token"]; !ok {
		props = maps.Clone(props)
		if props == nil {
			props = map[string]string{}
		}
		props["token"] = testNodeToken
	}
	c, err := tables.Open(context.Background(), tables.Config{URI: e.servers[i].URL(), Warehouse: e.warehouse, Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testRecords(part int32, from, n int, ts int64) []*tributary.Record {
	out := make([]*tributary.Record, n)
	for i := range out {
		off := int64(from + i)
		r := &tributary.Record{
			Stream: "factory.telemetry", Partition: part, Offset: off, Timestamp: ts + off,
			Topic: fmt.Sprintf("factory/line1/d%d", i%7), Value: []byte(fmt.Sprintf(`{"seq":%d}`, off)),
			Source: "mqtt", ClientID: "c1", Node: "n1",
		}
		if i%3 == 0 {
			r.Key = []byte{byte(i), 0, 1}
			r.Headers = []tributary.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: nil}}
			r.ProducerTimestamp = 1700000000123
		}
		if i%4 == 1 {
			r.Principal = "user-1"
		}
		out[i] = r
	}
	return out
}

// writeFile writes recs as Parquet below the stream's table location,
// named with suffix, like the uplink does.

func sameRecord(a, b *tributary.Record) error {
	switch {
	case a.Partition != b.Partition || a.Offset != b.Offset:
		return fmt.Errorf("position %d@%d vs %d@%d", a.Offset, a.Partition, b.Offset, b.Partition)
	case a.Timestamp != b.Timestamp || a.ProducerTimestamp != b.ProducerTimestamp:
		return fmt.Errorf("offset %d: timestamps differ", a.Offset)
	case a.Topic != b.Topic || a.Source != b.Source || a.ClientID != b.ClientID || a.Node != b.Node || a.Principal != b.Principal:
		return fmt.Errorf("offset %d: strings differ", a.Offset)
	case !bytes.Equal(a.Value, b.Value) || !bytes.Equal(a.Key, b.Key) || (a.Key == nil) != (b.Key == nil):
		return fmt.Errorf("offset %d: key/value differ", a.Offset)
	case len(a.Headers) != len(b.Headers):
		return fmt.Errorf("offset %d: %d vs %d headers", a.Offset, len(a.Headers), len(b.Headers))
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return fmt.Errorf("offset %d: header %d differs", a.Offset, i)
		}
	}
	return nil
}

// TestIcebergGoClient drives namespaces and tables through iceberg-go's
// REST client, then appends and reads back rows through tables.Catalog
// opened with the http:// URI.
func TestIcebergGoClient(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1, rest.Options{})
	cl, err := restcat.NewCatalog(ctx, "tributary", e.servers[0].URL(), restcat.WithWarehouseLocation(e.warehouse))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Namespaces, nested too.
	if err := cl.CreateNamespace(ctx, table.Identifier{"factory"}, iceberg.Properties{"owner": "ops"}); err != nil {
		t.Fatal(err)
	}
	if err := cl.CreateNamespace(ctx, table.Identifier{"factory", "line1"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cl.CreateNamespace(ctx, table.Identifier{"factory"}, nil); !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	top, err := cl.ListNamespaces(ctx, nil)
	if err != nil || !slices.EqualFunc(top, []table.Identifier{{"factory"}}, slices.Equal) {
		t.Fatalf("top-level namespaces %v %v", top, err)
	}
	kids, err := cl.ListNamespaces(ctx, table.Identifier{"factory"})
	if err != nil || !slices.EqualFunc(kids, []table.Identifier{{"factory", "line1"}}, slices.Equal) {
		t.Fatalf("children of factory %v %v", kids, err)
	}
	if ok, err := cl.CheckNamespaceExists(ctx, table.Identifier{"factory", "line1"}); !ok || err != nil {
		t.Fatalf("nested namespace exists: %v %v", ok, err)
	}
	if ok, err := cl.CheckNamespaceExists(ctx, table.Identifier{"nope"}); ok || err != nil {
		t.Fatalf("missing namespace exists: %v %v", ok, err)
	}
	sum, err := cl.UpdateNamespaceProperties(ctx, table.Identifier{"factory"}, []string{"owner", "absent"}, iceberg.Properties{"site": "lyon"})
	if err != nil || !slices.Equal(sum.Updated, []string{"site"}) || !slices.Equal(sum.Removed, []string{"owner"}) {
		t.Fatalf("update namespace properties: %+v %v", sum, err)
	}
	props, err := cl.LoadNamespaceProperties(ctx, table.Identifier{"factory"})
	if err != nil || props["site"] != "lyon" || props["owner"] != "" {
		t.Fatalf("namespace properties %v %v", props, err)
	}

	// A table in a nested namespace with the envelope schema (as a node
	// creates it, before evolving it: see tables.InitialSchema).
	spec, err := tables.PartitionSpec("day")
	if err != nil {
		t.Fatal(err)
	}
	nested := table.Identifier{"factory", "line1", "raw"}
	tb, err := cl.CreateTable(ctx, nested, tables.InitialSchema(), catalog.WithPartitionSpec(&spec))
	if err != nil {
		t.Fatal(err)
	}
	if !tb.Schema().Equals(tables.InitialSchema()) {
		t.Fatalf("schema changed:\n%s\nvs\n%s", tb.Schema(), tables.InitialSchema())
	}
	if got := tb.Spec(); got.NumFields() != 1 || got.Field(0).Transform.String() != "day" {
		t.Fatalf("partition spec %s", got)
	}
	if _, err := cl.CreateTable(ctx, nested, tables.InitialSchema()); !errors.Is(err, catalog.ErrTableAlreadyExists) {
		t.Fatalf("create existing table: %v", err)
	}
	if ok, err := cl.CheckTableExists(ctx, nested); !ok || err != nil {
		t.Fatalf("table exists: %v %v", ok, err)
	}
	var listed []table.Identifier
	for id, err := range cl.ListTables(ctx, table.Identifier{"factory", "line1"}) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, id)
	}
	if !slices.EqualFunc(listed, []table.Identifier{nested}, slices.Equal) {
		t.Fatalf("list tables %v", listed)
	}
	renamed := table.Identifier{"factory", "line1", "raw2"}
	if _, err := cl.RenameTable(ctx, nested, renamed); err != nil {
		t.Fatal(err)
	}
	if ok, _ := cl.CheckTableExists(ctx, nested); ok {
		t.Fatal("old name still exists after rename")
	}
	if err := cl.DropNamespace(ctx, table.Identifier{"factory", "line1"}); !errors.Is(err, catalog.ErrNamespaceNotEmpty) {
		t.Fatalf("drop non-empty namespace: %v", err)
	}
	if err := cl.DropTable(ctx, renamed); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.LoadTable(ctx, renamed); !errors.Is(err, catalog.ErrNoSuchTable) {
		t.Fatalf("load dropped table: %v", err)
	}
	if err := cl.DropNamespace(ctx, table.Identifier{"factory", "line1"}); err != nil {
		t.Fatal(err)
	}

	// Stage-create (two-phase create: stage, then commit with assert-create).
	staged := table.Identifier{"factory", "staged"}
	st, err := cl.CreateTable(ctx, staged, tables.InitialSchema(), catalog.WithPartitionSpec(&spec),
		func(c *catalog.CreateTableCfg) {
			c.StagedUpdates = append(c.StagedUpdates, table.NewSetPropertiesUpdate(iceberg.Properties{"staged": "yes"}))
		})
	if err != nil {
		t.Fatal(err)
	}
	if st.Properties()["staged"] != "yes" || st.MetadataLocation() == "" {
		t.Fatalf("staged table: props %v location %q", st.Properties(), st.MetadataLocation())
	}

	// The Tributary path: tables.Catalog over http:// appends and reads back.
	c := e.client(t, 0, nil)
	const stream = "factory.telemetry"
	p, err := c.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMicro()
	recs := testRecords(p, 0, 3000, ts)
	a := tables.PartitionAppend{Partition: p, From: 0, To: 2000, Files: []tables.FileMeta{tabletest.WriteFile(t, c, stream, "", recs[:2000])}}
	res, err := c.CommitAppend(ctx, stream, []tables.PartitionAppend{a}, map[string]string{"tributary.node": "n1"})
	if err != nil || len(res.Committed) != 1 {
		t.Fatalf("commit: %v %+v", err, res)
	}
	if res, err := c.CommitAppend(ctx, stream, []tables.PartitionAppend{a}, nil); err != nil || len(res.Already) != 1 {
		t.Fatalf("recommit: %v %+v", err, res)
	}
	b := tables.PartitionAppend{Partition: p, From: 2000, To: 3000, Files: []tables.FileMeta{tabletest.WriteFile(t, c, stream, "", recs[2000:])}}
	if _, err := c.CommitAppend(ctx, stream, []tables.PartitionAppend{b}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.ScanSorted(ctx, stream, tables.ScanOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("scan: %d rows, want %d", len(got), len(recs))
	}
	for i := range got {
		if err := sameRecord(got[i], recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The backing SQLite catalog sees the same table.
	direct, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(e.dir, "catalog.db"), Warehouse: e.warehouse})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	dt, err := direct.LoadTable(ctx, stream)
	if err != nil || tables.HighWater(dt, p) != 3000 {
		t.Fatalf("direct view: %v", err)
	}
}

// TestStaleCommitConflict: two transactions from the same base; the second
// gets 409, which iceberg-go reports as table.ErrCommitFailed after exactly
// one request (no client-side replay).
func TestStaleCommitConflict(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1, rest.Options{})
	c := e.client(t, 0, nil)
	if _, err := c.EnsureTable(ctx, "a.b"); err != nil {
		t.Fatal(err)
	}
	t1, err := c.LoadTable(ctx, "a.b")
	if err != nil {
		t.Fatal(err)
	}
	t2, err := c.LoadTable(ctx, "a.b")
	if err != nil {
		t.Fatal(err)
	}
	commit := func(tb *table.Table, v string) error {
		tx := tb.NewTransaction()
		if err := tx.SetProperties(iceberg.Properties{"who": v}); err != nil {
			return err
		}
		if err := tx.AddFiles(ctx, nil, nil, true); err != nil {
			return err
		}
		_, err := tx.Commit(ctx)
		return err
	}
	if err := commit(t1, "first"); err != nil {
		t.Fatal(err)
	}
	before := e.commits.Load()
	err = commit(t2, "second")
	if !errors.Is(err, table.ErrCommitFailed) {
		t.Fatalf("stale commit: want table.ErrCommitFailed, got %v", err)
	}
	if n := e.commits.Load() - before; n != 1 {
		t.Fatalf("stale commit sent %d requests, want 1 (no replay)", n)
	}
	now, err := c.LoadTable(ctx, "a.b")
	if err != nil || now.Properties()["who"] != "first" {
		t.Fatalf("after conflict: who=%q %v", now.Properties()["who"], err)
	}
}

// TestConcurrentCommittersNeverDuplicate mirrors the tables package's test
// over REST, with committers spread over two servers sharing one database
// (as two cloud server processes would).
func TestConcurrentCommittersNeverDuplicate(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, rest.Options{})
	const stream = "x.y"
	first := e.client(t, 0, nil)
	if _, err := first.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	// Creating the table took commits of its own (its evolution to the
	// current envelope): count the appends' alone.
	commits0, conflicts0 := e.commits.Load(), e.conflicts.Load()
	recs := testRecords(0, 0, 100, time.Now().UnixMicro())
	const n = 6
	results := make([]tables.CommitResult, n)
	clients := make([]*tables.Catalog, n)
	files := make([]tables.FileMeta, n)
	for i := range n {
		clients[i] = e.client(t, i%2, nil)
		files[i] = tabletest.WriteFile(t, clients[i], stream, fmt.Sprintf("-c%d", i), recs)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := clients[i].CommitAppend(ctx, stream,
				[]tables.PartitionAppend{{Partition: 0, From: 0, To: 100, Files: []tables.FileMeta{files[i]}}}, nil)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	committed := 0
	for _, r := range results {
		committed += len(r.Committed)
	}
	if committed != 1 {
		t.Fatalf("%d committers committed the batch, want exactly 1: %+v", committed, results)
	}
	commits, conflicts := e.commits.Load()-commits0, e.conflicts.Load()-conflicts0
	t.Logf("%d commit requests, %d answered 409", commits, conflicts)
	if ok := commits - conflicts; ok != 1 {
		t.Fatalf("%d commit requests succeeded, want 1 (every other one a 409)", ok)
	}
	got, err := first.ScanSorted(ctx, stream, tables.ScanOptions{Partition: -1})
	if err != nil || len(got) != 100 {
		t.Fatalf("scan: %v %d rows", err, len(got))
	}
	for i := range got {
		if err := sameRecord(got[i], recs[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEvolveOverREST: edge nodes on two servers find a table created
// before the principal column and ensure it at once: the column is added
// by exactly one commit (the others get 409, reload and find it), and
// principals committed through REST read back.
func TestEvolveOverREST(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, rest.Options{})
	const stream = "old.s"
	first := e.client(t, 0, nil)
	spec, _ := tables.PartitionSpec("day")
	if err := first.Iceberg().CreateNamespace(ctx, table.Identifier{"old"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Iceberg().CreateTable(ctx, table.Identifier{"old", "s"}, tables.InitialSchema(), catalog.WithPartitionSpec(&spec),
		catalog.WithProperties(iceberg.Properties{table.CommitNumRetriesKey: "0"})); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		c := e.client(t, i%2, nil)
		wg.Go(func() {
			if _, err := c.EnsureTable(ctx, stream); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tb, err := first.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := tb.Schema().FindFieldByName(tables.ColPrincipal); !ok || f.ID != tables.FieldPrincipal || len(tb.Metadata().Schemas()) != 2 {
		t.Fatalf("principal column %+v (present %v), %d schemas", f, ok, len(tb.Metadata().Schemas()))
	}
	recs := testRecords(0, 0, 8, time.Now().UnixMicro())
	f := tabletest.WriteFile(t, first, stream, "", recs)
	if _, err := first.CommitAppend(ctx, stream, []tables.PartitionAppend{{Partition: 0, From: 0, To: 8, Files: []tables.FileMeta{f}}}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := first.ScanSorted(ctx, stream, tables.ScanOptions{Partition: -1})
	if err != nil || len(got) != 8 {
		t.Fatalf("scan: %d rows, %v", len(got), err)
	}
	for i := range got {
		if err := sameRecord(got[i], recs[i]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAllocatePartitionConcurrent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, rest.Options{})
	const n = 6
	parts := make([]int32, n)
	errs := make([]error, n)
	clients := make([]*tables.Catalog, n)
	for i := range n {
		clients[i] = e.client(t, i%2, nil)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { parts[i], errs[i] = clients[i].AllocatePartition(ctx, "a.b", fmt.Sprintf("node-%d", i)) })
	}
	wg.Wait()
	seen := map[int32]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[parts[i]] {
			t.Fatalf("partition %d allocated twice: %v", parts[i], parts)
		}
		seen[parts[i]] = true
	}
	t.Logf("%d commit requests, %d answered 409", e.commits.Load(), e.conflicts.Load())
	if p, err := clients[0].AllocatePartition(ctx, "a.b", "node-3"); err != nil || p != parts[3] {
		t.Fatalf("repeat allocation: %d %v, want %d", p, err, parts[3])
	}
}

// ---- raw protocol: status codes and error bodies ----

type rawResp struct {
	status int
	body   []byte
}

// do sends a request; args are an optional body, then header name/value
// pairs. A body is sent as application/json unless a Content-Type is given.
func do(t *testing.T, method, url string, args ...string) rawResp {
	t.Helper()
	body, hdr := "", []string(nil)
	if len(args) > 0 {
		body, hdr = args[0], args[1:]
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	b, _ := io.ReadAll(rsp.Body)
	return rawResp{rsp.StatusCode, b}
}

// checkError asserts the spec's error body: exactly {"error": {message,
// type, code}} with code equal to the status.
func checkError(t *testing.T, what string, r rawResp, status int, types ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d (%s)", what, r.status, status, r.body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &top); err != nil || len(top) != 1 || top["error"] == nil {
		t.Fatalf("%s: body is not {\"error\": ...}: %s", what, r.body)
	}
	var em struct {
		Message *string `json:"message"`
		Type    *string `json:"type"`
		Code    *int    `json:"code"`
	}
	if err := json.Unmarshal(top["error"], &em); err != nil || em.Message == nil || em.Type == nil || em.Code == nil {
		t.Fatalf("%s: error model incomplete: %s", what, r.body)
	}
	if *em.Code != status || *em.Message == "" || !slices.Contains(types, *em.Type) {
		t.Fatalf("%s: got code %d type %q message %q, want %d %v", what, *em.Code, *em.Type, *em.Message, status, types)
	}
}

func TestErrorResponses(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1, rest.Options{})
	u := e.servers[0].URL() + "/v1"
	c := e.client(t, 0, nil)
	if _, err := c.EnsureTable(ctx, "ns.t"); err != nil {
		t.Fatal(err)
	}
	schema, _ := json.Marshal(tables.EnvelopeSchema())

	checkError(t, "bad JSON namespace", do(t, "POST", u+"/namespaces", `{"namespace": [`), 400, "BadRequestException")
	checkError(t, "bad JSON commit", do(t, "POST", u+"/namespaces/ns/tables/t", `{"updates": 7}`), 400, "BadRequestException")
	checkError(t, "trailing JSON", do(t, "POST", u+"/namespaces", `{"namespace":["q"]} {}`), 400, "BadRequestException")
	checkError(t, "unknown action", do(t, "POST", u+"/namespaces/ns/tables/t",
		`{"requirements":[],"updates":[{"action":"explode"}]}`), 400, "BadRequestException")
	checkError(t, "empty namespace level", do(t, "GET", u+"/namespaces/a%1F%1Fb"), 400, "BadRequestException")
	checkError(t, "unclean path", do(t, "GET", u+"/namespaces//tables"), 400, "BadRequestException")
	checkError(t, "unknown namespace", do(t, "GET", u+"/namespaces/nope"), 404, "NoSuchNamespaceException")
	checkError(t, "unknown nested namespace", do(t, "GET", u+"/namespaces/ns%1Fnope"), 404, "NoSuchNamespaceException")
	checkError(t, "tables of unknown namespace", do(t, "GET", u+"/namespaces/nope/tables"), 404, "NoSuchNamespaceException")
	checkError(t, "unknown table", do(t, "GET", u+"/namespaces/ns/tables/nope"), 404, "NoSuchTableException")
	checkError(t, "table in unknown namespace", do(t, "GET", u+"/namespaces/nope/tables/t"), 404,
		"NoSuchTableException", "NoSuchNamespaceException")
	checkError(t, "commit to unknown table", do(t, "POST", u+"/namespaces/ns/tables/nope", `{"requirements":[],"updates":[]}`),
		404, "NoSuchTableException")
	checkError(t, "drop unknown table", do(t, "DELETE", u+"/namespaces/ns/tables/nope"), 404, "NoSuchTableException")
	if r := do(t, "HEAD", u+"/namespaces/ns/tables/nope", ""); r.status != 404 {
		t.Fatalf("HEAD unknown table: %d", r.status)
	}
	if r := do(t, "HEAD", u+"/namespaces/ns/tables/t", ""); r.status != 204 {
		t.Fatalf("HEAD table: %d", r.status)
	}
	checkError(t, "create existing table", do(t, "POST", u+"/namespaces/ns/tables",
		`{"name":"t","schema":`+string(schema)+`}`), 409, "AlreadyExistsException")
	checkError(t, "create table in unknown namespace", do(t, "POST", u+"/namespaces/nope/tables",
		`{"name":"t","schema":`+string(schema)+`}`), 404, "NoSuchNamespaceException")
	checkError(t, "create table without schema", do(t, "POST", u+"/namespaces/ns/tables", `{"name":"u"}`), 400, "BadRequestException")
	checkError(t, "create existing namespace", do(t, "POST", u+"/namespaces", `{"namespace":["ns"]}`), 409, "AlreadyExistsException")
	checkError(t, "drop non-empty namespace", do(t, "DELETE", u+"/namespaces/ns"), 409, "NamespaceNotEmptyException")
	checkError(t, "remove and update one property", do(t, "POST", u+"/namespaces/ns/properties",
		`{"removals":["k"],"updates":{"k":"v"}}`), 422, "UnprocessableEntityException")
	checkError(t, "rename unknown table", do(t, "POST", u+"/tables/rename",
		`{"source":{"namespace":["ns"],"name":"nope"},"destination":{"namespace":["ns"],"name":"n2"}}`), 404, "NoSuchTableException")
	checkError(t, "unknown route", do(t, "GET", u+"/nothing/here"), 404, "NotFoundException")

	// A failed requirement is a 409 CommitFailedException.
	checkError(t, "stale requirement", do(t, "POST", u+"/namespaces/ns/tables/t",
		`{"requirements":[{"type":"assert-ref-snapshot-id","ref":"main","snapshot-id":12345}],
		  "updates":[{"action":"set-properties","updates":{"x":"y"}}]}`), 409, "CommitFailedException")
	checkError(t, "wrong table uuid", do(t, "POST", u+"/namespaces/ns/tables/t",
		`{"requirements":[{"type":"assert-table-uuid","uuid":"9c12d441-03fe-4693-9a96-a0705ddf69c1"}],"updates":[]}`),
		409, "CommitFailedException")
	// And a good one commits.
	if r := do(t, "POST", u+"/namespaces/ns/tables/t", `{"identifier":{"namespace":["ns"],"name":"t"},"requirements":[],
		"updates":[{"action":"set-properties","updates":{"x":"y"}}]}`); r.status != 200 || !bytes.Contains(r.body, []byte(`"metadata-location"`)) {
		t.Fatalf("commit: %d %s", r.status, r.body)
	}
	checkError(t, "identifier mismatch", do(t, "POST", u+"/namespaces/ns/tables/t",
		`{"identifier":{"namespace":["ns"],"name":"other"},"requirements":[],"updates":[]}`), 400, "BadRequestException")

	// Config and paging.
	r := do(t, "GET", u+"/config?warehouse="+e.warehouse, "")
	var cfg struct {
		Defaults  map[string]string `json:"defaults"`
		Overrides map[string]string `json:"overrides"`
		Endpoints []string          `json:"endpoints"`
	}
	if err := json.Unmarshal(r.body, &cfg); r.status != 200 || err != nil || cfg.Defaults["warehouse"] != e.warehouse ||
		cfg.Overrides == nil || !slices.Contains(cfg.Endpoints, "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}") {
		t.Fatalf("config: %d %s", r.status, r.body)
	}
	for _, n := range []string{"b", "c"} {
		if r := do(t, "POST", u+"/namespaces", `{"namespace":["`+n+`"]}`); r.status != 200 {
			t.Fatalf("create %s: %d %s", n, r.status, r.body)
		}
	}
	r = do(t, "GET", u+"/namespaces?pageSize=2", "")
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"next-page-token":"2"`)) {
		t.Fatalf("page 1: %s", r.body)
	}
	r = do(t, "GET", u+"/namespaces?pageSize=2&pageToken=2", "")
	if r.status != 200 || !bytes.Contains(r.body, []byte(`[["ns"]]`)) || bytes.Contains(r.body, []byte("next-page-token")) {
		t.Fatalf("page 2: %s", r.body)
	}
	checkError(t, "bad page token", do(t, "GET", u+"/namespaces?pageToken=x"), 400, "BadRequestException")
}

func TestBearerToken(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1, rest.Options{Token: "s3cret"})
	u := e.servers[0].URL() + "/v1"
	checkError(t, "no token", do(t, "GET", u+"/namespaces", ""), 401, "NotAuthorizedException")
	checkError(t, "wrong token", do(t, "GET", u+"/namespaces", "", "Authorization", "Bearer nope"), 401, "NotAuthorizedException")
	if r := do(t, "GET", u+"/namespaces", "", "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Fatalf("with token: %d %s", r.status, r.body)
	}
	if _, err := tables.Open(ctx, tables.Config{URI: e.servers[0].URL(), Warehouse: e.warehouse}); err == nil {
		t.Fatal("client without token connected")
	}
	// A client's token reads and writes tables, but not the nodes'
	// properties; the node token does both.
	c := e.client(t, 0, map[string]string{"token": "s3cret"})
	if _, err := c.AllocatePartition(ctx, "a.b", "n1"); err == nil || !strings.Contains(err.Error(), "edge nodes only") {
		t.Fatalf("allocate with a client token: %v", err)
	}
	n := e.client(t, 0, nil)
	if _, err := n.AllocatePartition(ctx, "a.b", "n1"); err != nil {
		t.Fatal(err)
	}
}
