package rest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/internal/tabletest"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/rest"
)

// TestClientsCannotTouchInvariants: a client of the REST catalog (with the
// clients' token, through iceberg-go's own REST client) can neither write
// the nodes' reserved properties nor place a table anywhere but its own
// folder of the warehouse; every attempt is refused and changes nothing.
func TestClientsCannotTouchInvariants(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1, rest.Options{Token: "client"})
	node := e.client(t, 0, nil)
	const stream = "f.s"
	seedStream(t, node, stream)
	before, err := node.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}

	cl, err := restcat.NewCatalog(ctx, "tributary", e.servers[0].URL(), restcat.WithOAuthToken("client"),
		restcat.WithWarehouseLocation(e.warehouse))
	if err != nil {
		t.Fatal(err)
	}
	id := table.Identifier{"f", "s"}
	forbidden := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "Forbidden") && !strings.Contains(err.Error(), "403") &&
			!strings.Contains(err.Error(), "edge nodes only") && !strings.Contains(err.Error(), "fixed by the warehouse") {
			t.Fatalf("%s: got %v, want 403", what, err)
		}
	}
	commit := func(f func(tx *table.Transaction) error) error {
		tb, err := cl.LoadTable(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		tx := tb.NewTransaction()
		if err := f(tx); err != nil {
			return err
		}
		_, err = tx.Commit(ctx)
		return err
	}
	forbidden("raise the mark", commit(func(tx *table.Transaction) error {
		return tx.SetProperties(iceberg.Properties{tables.PropHighWater + "0": "1000000"})
	}))
	forbidden("take the partition", commit(func(tx *table.Transaction) error {
		return tx.SetProperties(iceberg.Properties{tables.PropOwner + "0": "evil", tables.PropEpoch + "0": "99"})
	}))
	forbidden("drop the owner", commit(func(tx *table.Transaction) error {
		return tx.RemoveProperties([]string{tables.PropOwner + "0"})
	}))
	forbidden("shorten orphan grace", commit(func(tx *table.Transaction) error {
		return tx.SetProperties(iceberg.Properties{tables.PropOrphanGraceMs: "1"})
	}))
	// iceberg-go has no set-location in its transaction API: the raw request.
	checkError(t, "move the table", do(t, "POST", e.servers[0].URL()+"/v1/namespaces/f/tables/s",
		`{"requirements":[],"updates":[{"action":"set-location","location":"`+e.dir+`"}]}`,
		"Authorization", "Bearer client", "Content-Type", "application/json"), 403, "ForbiddenException")
	// An ordinary property is the client's to set.
	if err := commit(func(tx *table.Transaction) error {
		return tx.SetProperties(iceberg.Properties{"comment": "line 1"})
	}); err != nil {
		t.Fatalf("ordinary property: %v", err)
	}

	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "x", Type: iceberg.PrimitiveTypes.Int64})
	_, err = cl.CreateTable(ctx, table.Identifier{"f", "evil"}, sc, catalog.WithLocation(e.dir))
	forbidden("create over the data directory", err)
	_, err = cl.CreateTable(ctx, table.Identifier{"f", "evil"}, sc, catalog.WithLocation(filepath.Join(e.dir, "warehouse", "f", "s")))
	forbidden("create over another table", err)
	_, err = cl.CreateTable(ctx, table.Identifier{"f", "evil"}, sc, catalog.WithProperties(iceberg.Properties{tables.PropOrphanGraceMs: "1"}))
	forbidden("create with a reserved property", err)
	err = cl.CreateNamespace(ctx, table.Identifier{"g"}, iceberg.Properties{"location": e.dir})
	forbidden("namespace with a location", err)
	if err := cl.CreateNamespace(ctx, table.Identifier{".."}, nil); err == nil {
		t.Fatal("namespace '..' created")
	}
	if _, err := cl.CreateTable(ctx, table.Identifier{"f", "a.b"}, sc); err == nil {
		t.Fatal("table name with a dot created")
	}
	// Without a location a client's table lands in its own folder.
	tb, err := cl.CreateTable(ctx, table.Identifier{"f", "mine"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.warehouse + "/f/mine"; tb.Location() != want {
		t.Fatalf("location %s, want %s", tb.Location(), want)
	}

	after, err := node.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range before.Properties() {
		if strings.HasPrefix(k, rest.ReservedPrefix) && after.Properties()[k] != v {
			t.Fatalf("property %s changed from %q to %q", k, v, after.Properties()[k])
		}
	}
	if after.Location() != before.Location() {
		t.Fatalf("location moved to %s", after.Location())
	}
}

// TestRateLimit: a client over its rate gets 429 with Retry-After; the
// node token is not limited.
func TestRateLimit(t *testing.T) {
	e := newEnv(t, 1, rest.Options{RatePerIP: 5, BurstPerIP: 5})
	u := e.servers[0].URL() + "/v1/config"
	limited := 0
	for range 20 {
		if r := do(t, "GET", u); r.status == 429 {
			limited++
		}
	}
	if limited < 10 {
		t.Fatalf("%d of 20 rapid requests limited, want most", limited)
	}
	for range 20 {
		if r := do(t, "GET", u, "", "Authorization", "Bearer "+testNodeToken); r.status != 200 {
			t.Fatalf("node request limited: %d", r.status)
		}
	}
}

// seedStream has edge node c allocate a partition of stream and commit
// three records to it.
func seedStream(t *testing.T, c *tables.Catalog, stream string) {
	t.Helper()
	ctx := context.Background()
	p, err := c.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CommitAppend(ctx, stream, []tables.PartitionAppend{{Partition: p, From: 0, To: 3,
		Files: []tables.FileMeta{tabletest.WriteFile(t, c, stream, "", testRecords(p, 0, 3, 1))}}}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestCommitsNameOnlyTheTablesFiles: a client with the clients' token
// cannot make a table's metadata name a file outside the table's folder
// (statistics, partition statistics, a snapshot's manifest list:
// maintenance deletes what expired snapshots point at); a statistics file
// inside the folder is the client's to register.
func TestCommitsNameOnlyTheTablesFiles(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1, rest.Options{Token: "client"})
	node := e.client(t, 0, nil)
	const stream = "f.s"
	seedStream(t, node, stream)
	tb, err := node.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	snap := tb.CurrentSnapshot().SnapshotID
	victim := "file://" + filepath.Join(e.dir, "victim")
	url := e.servers[0].URL() + "/v1/namespaces/f/tables/s"
	post := func(update string) rawResp {
		return do(t, "POST", url, `{"requirements":[],"updates":[`+update+`]}`,
			"Authorization", "Bearer client", "Content-Type", "application/json")
	}
	stats := func(path string) string {
		return fmt.Sprintf(`{"action":"set-statistics","snapshot-id":%d,"statistics":{"snapshot-id":%d,"statistics-path":%q,"file-size-in-bytes":1,"file-footer-size-in-bytes":1,"blob-metadata":[]}}`, snap, snap, path)
	}
	for what, u := range map[string]string{
		"statistics outside":               stats(victim),
		"statistics in another table":      stats(e.warehouse + "/f/other/metadata/x.stats"),
		"statistics climbing out":          stats(tb.Location() + "/../../../victim"),
		"partition statistics outside":     fmt.Sprintf(`{"action":"set-partition-statistics","partition-statistics":{"snapshot-id":%d,"statistics-path":%q,"file-size-in-bytes":1}}`, snap, victim),
		"a snapshot whose list is outside": fmt.Sprintf(`{"action":"add-snapshot","snapshot":{"snapshot-id":4242,"parent-snapshot-id":%d,"sequence-number":99,"timestamp-ms":%d,"manifest-list":%q,"summary":{"operation":"append"},"schema-id":0}}`, snap, time.Now().UnixMilli(), victim),
	} {
		checkError(t, what, post(u), 403, "ForbiddenException")
	}
	after, err := node.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for sf := range after.Metadata().Statistics() {
		t.Fatalf("statistics registered: %+v", sf)
	}
	if r := post(stats(tb.Location() + "/metadata/s.stats")); r.status != 200 {
		t.Fatalf("statistics inside the table: %d %s", r.status, r.body)
	}
}

// TestOpenCatalogTakesJSONOnly (issue 35, finding 14): a catalog anyone
// may use refuses a body that is not application/json (a browser page's
// cross-site text/plain or form POST needs no preflight); a catalog with
// a token is not reachable that way and is unchanged.
func TestOpenCatalogTakesJSONOnly(t *testing.T) {
	e := newEnv(t, 1, rest.Options{})
	u := e.servers[0].URL() + "/v1/namespaces"
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		checkError(t, ct, do(t, "POST", u, `{"namespace":["x"]}`, "Content-Type", ct), 415, "BadRequestException")
	}
	if r := do(t, "POST", u, `{"namespace":["x"]}`, "Content-Type", "application/json; charset=utf-8"); r.status != 200 {
		t.Fatalf("JSON: %d %s", r.status, r.body)
	}
	if r := do(t, "DELETE", u+"/x", ""); r.status != 204 {
		t.Fatalf("DELETE without a body: %d %s", r.status, r.body)
	}
	tok := newEnv(t, 1, rest.Options{Token: "client"})
	if r := do(t, "POST", tok.servers[0].URL()+"/v1/namespaces", `{"namespace":["x"]}`, "Content-Type", "text/plain",
		"Authorization", "Bearer client"); r.status != 200 {
		t.Fatalf("text/plain with the token: %d %s", r.status, r.body)
	}
}
