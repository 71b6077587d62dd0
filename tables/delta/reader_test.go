package delta

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"
)

// The reader against tables real writers made (testdata/delta/NOTES.md
// says where each comes from): Spark, Databricks and delta-rs.

func openTestTable(t *testing.T, name string) (*Table, *Snapshot) {
	t.Helper()
	tb := NewTable(DirStore{Root: "../testdata/delta/" + name}, "")
	s, err := tb.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tb, s
}

func column(t *testing.T, tb *Table, s *Snapshot, col string) []string {
	t.Helper()
	rows, err := tb.Rows(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprint(r[col]))
	}
	sort.Strings(out)
	return out
}

// checkpointEqualsCommits: a checkpoint's content is the replay of the
// JSON commits it replaces (when they are all still there).
func checkpointEqualsCommits(t *testing.T, tb *Table, s *Snapshot) {
	t.Helper()
	j, err := tb.ReplayCommits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if j.Version != s.Version || !slices.Equal(j.Paths(), s.Paths()) || !reflect.DeepEqual(j.Txns, s.Txns) || j.Schema.String() != s.Schema.String() {
		t.Fatalf("checkpoint replay (v%d, %d files, txns %v) differs from the JSON replay (v%d, %d files, txns %v)",
			s.Version, len(s.Files), s.Txns, j.Version, len(j.Files), j.Txns)
	}
}

func TestReadSimpleTableWithRemoves(t *testing.T) {
	tb, s := openTestTable(t, "simple_table")
	if s.Version != 4 || len(s.Files) != 5 {
		t.Fatalf("version %d with %d files, want 4 with 5", s.Version, len(s.Files))
	}
	if len(s.Tombstones) == 0 {
		t.Fatal("no tombstones: the table's later commits remove files")
	}
	if got := column(t, tb, s, "id"); !slices.Equal(got, []string{"5", "7", "9"}) {
		t.Fatalf("ids %v, want [5 7 9]", got)
	}
}

func TestReadPartitioned(t *testing.T) {
	tb, s := openTestTable(t, "delta-0.8.0-partitioned")
	if !slices.Equal(s.Metadata.PartitionColumns, []string{"year", "month", "day"}) {
		t.Fatalf("partition columns %v", s.Metadata.PartitionColumns)
	}
	rows, err := tb.Rows(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%v %v-%v-%v", r["value"], r["year"], r["month"], r["day"]))
	}
	sort.Strings(got)
	want := []string{"1 2020-1-1", "2 2020-2-3", "3 2020-2-5", "4 2021-4-5", "5 2021-12-4", "6 2021-12-20", "7 2021-12-20"}
	if !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
}

func TestReadThroughCheckpoint(t *testing.T) {
	tb, s := openTestTable(t, "simple_table_with_checkpoint")
	if s.Checkpoint != 10 || s.Version != 10 || s.Commits != 0 {
		t.Fatalf("checkpoint %d, version %d, %d commits after it; want the version 10 checkpoint alone", s.Checkpoint, s.Version, s.Commits)
	}
	lc, err := tb.LastCheckpoint(context.Background())
	if err != nil || lc.Version != 10 {
		t.Fatalf("_last_checkpoint %+v, %v", lc, err)
	}
	want := []string{"0", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
	if got := column(t, tb, s, "version"); !slices.Equal(got, want) {
		t.Fatalf("versions %v, want %v", got, want)
	}
	checkpointEqualsCommits(t, tb, s)
}

func TestReadCheckpointWithoutLastCheckpoint(t *testing.T) {
	tb, s := openTestTable(t, "with_checkpoint_no_last_checkpoint")
	if s.Checkpoint != 2 || s.Version != 3 || s.Commits != 1 {
		t.Fatalf("checkpoint %d, version %d, %d commits after it; want the version 2 checkpoint found by listing, then 1 commit", s.Checkpoint, s.Version, s.Commits)
	}
	// The data files are not in the source repository: the log alone.
	if got := s.Paths(); len(got) != 1 || got[0] != "part-00000-70b1dcdf-0236-4f63-a072-124cdbafd8a0-c000.snappy.parquet" {
		t.Fatalf("files %v", got)
	}
	checkpointEqualsCommits(t, tb, s)
}

func TestReadSchemaEvolutionNested(t *testing.T) {
	tb, s := openTestTable(t, "delta-stats-optional")
	if len(s.Schema.Fields) < 10 {
		t.Fatalf("schema %s: the version 1 metaData widened it", s.Schema)
	}
	rows, err := tb.Rows(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i]["integer"].(int64) < rows[j]["integer"].(int64) })
	for i, r := range rows {
		if r["integer"] != int64(i) || r["string"] != "string" || r["decimal"] != "-5.67800" || r["date"] != "2022-10-24" || r["null"] != nil {
			t.Fatalf("row %d: %v", i, r)
		}
		if fmt.Sprint(r["struct"]) != "map[struct_element:struct_value]" || fmt.Sprint(r["map"]) != "map[map_key:map_value]" ||
			fmt.Sprint(r["array"]) != "[array_value]" || fmt.Sprint(r["struct_of_array_of_map"]) != "map[struct_element:[map[map_key:map_value]]]" {
			t.Fatalf("row %d nested values: %v", i, r)
		}
		if ts, ok := r["timestamp"].(time.Time); !ok || ts.Year() != 2022 {
			t.Fatalf("row %d timestamp %v", i, r["timestamp"])
		}
	}
}

func TestReadColumnMappingNone(t *testing.T) {
	// Databricks Delta Live Tables: reader 2 / writer 5 without a column
	// mapping mode, and a first metaData without a schema.
	_, s := openTestTable(t, "delta-live-table")
	if s.Protocol.MinReaderVersion != 2 || len(s.Files) != 0 || len(s.Schema.Fields) == 0 {
		t.Fatalf("protocol %+v, %d files, schema %s", s.Protocol, len(s.Files), s.Schema)
	}
	if err := Writable(s.Protocol, s.Metadata); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Writable: %v, want ErrUnsupported (writer version 5)", err)
	}
}

func TestReadDeletionVectorsRefused(t *testing.T) {
	tb := NewTable(DirStore{Root: "../testdata/delta/table_with_deletion_logs"}, "")
	_, err := tb.Snapshot(context.Background())
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Snapshot: %v, want ErrUnsupported (deletionVectors)", err)
	}
}
