package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
)

// deadLetterCatalog makes a data dir whose factory.telemetry_dlq holds n
// dead letters (offsets 0…n-1), each with its reason.
func deadLetterCatalog(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	cat, err := tables.Open(ctx, tables.Config{Name: "tributary", URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var dls []tables.DeadLetter
	for i := range n {
		dls = append(dls, tables.DeadLetter{Record: &tributary.Record{Stream: "factory.telemetry", Offset: int64(i), Timestamp: 1_700_000_000_000_000 + int64(i),
			Topic: "factory/d1", Value: fmt.Appendf(nil, `{"c":%d.5}`, i), Source: "mqtt", ClientID: "c1", Node: "n1"},
			Error: fmt.Sprintf("type conflict: field c is a long column (the table's type, which it keeps) and %d.5 is not a whole number", i)})
	}
	if _, err := cat.CommitDeadLetters(ctx, "factory.telemetry", 0, int64(n), tables.Origin{}, dls); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTablesScanDeadLetters: scanning a dead-letter table shows each
// row's error, in text and in --json.
func TestTablesScanDeadLetters(t *testing.T) {
	dir := deadLetterCatalog(t, 2)
	var out, errs strings.Builder
	if code := run([]string{"tables", "scan", "factory.telemetry_dlq", "--data", dir}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if !strings.Contains(out.String(), "ERROR") || !strings.Contains(out.String(), "and 1.5 is not a whole number") {
		t.Errorf("text scan without the error column:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"tables", "scan", "factory.telemetry_dlq", "--data", dir, "--json"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var row map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &row) != nil || !strings.Contains(fmt.Sprint(row["error"]), "0.5 is not a whole number") {
		t.Errorf("json scan: %q", out.String())
	}
}

// TestTablesScanTail: --tail N shows the latest N rows (in order), and
// -h prints the usage and exits 0.
func TestTablesScanTail(t *testing.T) {
	dir := deadLetterCatalog(t, 30)
	var out, errs strings.Builder
	if code := run([]string{"tables", "scan", "factory.telemetry_dlq", "--data", dir, "--tail", "3", "--json"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	var offs []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(l), &row); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		offs = append(offs, fmt.Sprint(row["offset"]))
	}
	if strings.Join(offs, ",") != "27,28,29" {
		t.Errorf("--tail 3: offsets %v, want 27,28,29", offs)
	}
	out.Reset()
	errs.Reset()
	if code := run([]string{"tables", "scan", "-h"}, &out, &errs); code != 0 || !strings.Contains(out.String(), "--tail N") {
		t.Errorf("scan -h: exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
}

// TestTablesDeltaDescribeAndScan: describe shows the Delta log's version
// and its txn per appId beside the Iceberg mark; scan --format delta
// reads through the Delta log and prints what the Iceberg scan prints.
func TestTablesDeltaDescribeAndScan(t *testing.T) {
	dir := deadLetterCatalog(t, 3)
	ctx := context.Background()
	cat, err := tables.Open(ctx, tables.Config{Name: "tributary", URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	st := delta.DirStore{Root: filepath.Join(dir, "warehouse")}
	if _, err := cat.SyncDelta(ctx, st, "factory.telemetry_dlq", nil, tables.DeltaOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.EnsureTable(ctx, "factory.telemetry"); err != nil {
		t.Fatal(err)
	}
	cat.Close()
	var out, errs strings.Builder
	if code := run([]string{"tables", "describe", "factory.telemetry_dlq", "--data", dir}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if !strings.Contains(out.String(), "delta log: version 0 (checkpoint -1), 1 files") || !strings.Contains(out.String(), "factory.telemetry_dlq/0: 3  iceberg 3\n") {
		t.Errorf("describe:\n%s", out.String())
	}
	scan := func(args ...string) string {
		var out, errs strings.Builder
		if code := run(append([]string{"tables", "scan", "factory.telemetry_dlq", "--data", dir, "--json"}, args...), &out, &errs); code != 0 {
			t.Fatalf("exit %d: %s", code, errs.String())
		}
		return out.String()
	}
	ice, dl := scan(), scan("--format", "delta")
	if ice != dl || strings.Count(dl, "\n") != 3 {
		t.Errorf("Iceberg scan:\n%s\nDelta scan:\n%s", ice, dl)
	}
	if code := run([]string{"tables", "scan", "factory.telemetry_dlq", "--data", dir, "--format", "hudi"}, &out, &errs); code != 2 {
		t.Errorf("--format hudi: exit %d", code)
	}
	out.Reset()
	if code := run([]string{"tables", "describe", "factory.telemetry", "--data", dir}, &out, &errs); code != 0 || !strings.Contains(out.String(), "delta log: none") {
		t.Errorf("describe of a table without a Delta log: exit %d\n%s", code, out.String())
	}
}
