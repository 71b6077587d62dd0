// Package tabletest puts rows into a stream's table the way an edge
// node's uplink would, for tests of the readers (the cloud Kafka, Pulsar
// and MQTT servers, the REST catalog) that need committed rows without
// running an edge. It is test infrastructure; production code never
// imports it. It lives apart from internal/testkit because it imports
// package tables, whose own tests use testkit.
package tabletest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// WriteFile writes recs (consecutive offsets of one partition) as one
// Parquet data file into c's local warehouse, named
// <table>/data/p<partition>-<first offset><suffix>.parquet, and returns
// its metadata for a commit.
func WriteFile(tb testing.TB, c *tables.Catalog, stream, suffix string, recs []*tributary.Record) tables.FileMeta {
	tb.Helper()
	var buf bytes.Buffer
	st, err := tables.WriteParquet(&buf, recs)
	if err != nil {
		tb.Fatal(err)
	}
	url := fmt.Sprintf("%s/data/p%d-%d%s.parquet", c.TableLocation(stream), st.Partition, st.FirstOffset, suffix)
	key, err := c.KeyOf(url)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(strings.TrimPrefix(c.Warehouse(), "file://"), key)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return tables.FileMeta{URL: url, Size: int64(buf.Len()), Stats: st}
}

// Commit writes recs as one file (WriteFile) and commits it to stream's
// table as the append of their partition and offsets.
func Commit(tb testing.TB, c *tables.Catalog, stream string, recs []*tributary.Record) {
	tb.Helper()
	f := WriteFile(tb, c, stream, "", recs)
	if _, err := c.CommitAppend(context.Background(), stream, []tables.PartitionAppend{{Partition: f.Stats.Partition,
		From: f.Stats.FirstOffset, To: f.Stats.LastOffset + 1, Files: []tables.FileMeta{f}}}, nil); err != nil {
		tb.Fatal(err)
	}
}
