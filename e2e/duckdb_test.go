package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
)

// duckdbDir holds a tiny Node.js program that reads Parquet files with
// DuckDB (npm @duckdb/node-api, which ships its native library).
const duckdbDir = "testdata/duckdb"

func ensureDuckDB(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(duckdbDir, "node_modules", "@duckdb", "node-api")); err == nil {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm not found: the DuckDB engine test needs Node.js and npm: %v", err)
	}
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund")
	cmd.Dir = duckdbDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install in %s: %v\n%s", duckdbDir, err, out)
	}
}

// TestDuckDBReadsSnapshot: an engine outside Go (DuckDB) reads the data
// files of the table's current snapshot (planned by iceberg-go) and gets
// exactly the rows iceberg-go reads: same partitions, offsets, topics,
// payload bytes and principals (null: the dev node's clients are anonymous).
func TestDuckDBReadsSnapshot(t *testing.T) {
	ensureDuckDB(t)
	dir := t.TempDir()
	p := startDev(t, dir)
	ctx := context.Background()
	cl, err := mqttClient(ctx, p.MQTT, "duck")
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	if _, err := publishN(ctx, cl, l, "duck", 0, 300); err != nil {
		t.Fatal(err)
	}
	p.stop()

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cat, err := sqlcat.NewCatalog("tributary", db, sqlcat.SQLite, nil)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, table.Identifier{"factory", "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, task := range tasks {
		files = append(files, strings.TrimPrefix(task.File.FilePath(), "file://"))
	}
	want := scanAll(t, tbl)
	checkRows(t, l, want)

	cmd := exec.Command("node", append([]string{"read.mjs"}, files...)...)
	cmd.Dir = duckdbDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, stderr.String())
	}
	type row struct {
		Partition int32   `json:"partition"`
		Offset    string  `json:"offset"`
		Topic     string  `json:"topic"`
		Value     string  `json:"value"`
		Source    string  `json:"source"`
		Principal *string `json:"principal"`
	}
	got := map[string]row{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("duckdb output %q: %v", sc.Text(), err)
		}
		got[strconv.Itoa(int(r.Partition))+"/"+r.Offset] = r
	}
	if len(got) != len(want) || len(want) != 300 {
		t.Fatalf("duckdb read %d rows, iceberg-go %d, published 300", len(got), len(want))
	}
	for _, w := range want {
		g, ok := got[strconv.Itoa(int(w.Partition))+"/"+strconv.FormatInt(w.Offset, 10)]
		if !ok {
			t.Fatalf("duckdb lacks offset %d", w.Offset)
		}
		v, _ := base64.StdEncoding.DecodeString(g.Value)
		if g.Topic != w.Topic || !bytes.Equal(v, w.Value) || g.Source != w.Source {
			t.Fatalf("offset %d differs: duckdb %+v", w.Offset, g)
		}
		if (g.Principal == nil) != (w.Principal == "") || g.Principal != nil && *g.Principal != w.Principal {
			t.Fatalf("offset %d: duckdb principal %v, iceberg-go %q", w.Offset, g.Principal, w.Principal)
		}
	}
	t.Logf("DuckDB read %d rows from %d data files, identical to iceberg-go", len(got), len(files))
}
