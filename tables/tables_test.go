package tables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
)

func openTestCatalog(t testing.TB) (*Catalog, string) {
	t.Helper()
	dir := t.TempDir()
	c, err := Open(context.Background(), Config{
		URI:       "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, dir
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
			r.Headers = []tributary.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: nil}}
			r.ProducerTimestamp = 1700000000123
		}
		if i%5 == 0 {
			r.Value = []byte{}
		}
		if i%4 == 1 {
			r.Principal = fmt.Sprintf("user-%d", i%3) // the others are anonymous: null
		}
		out[i] = r
	}
	return out
}

// writeFile encodes recs into the table's data folder like the uplink does.
func writeFile(t *testing.T, c *Catalog, stream string, recs []*tributary.Record) FileMeta {
	t.Helper()
	var buf bytes.Buffer
	st, err := WriteParquet(&buf, recs)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/data/p%d-%d.parquet", c.TableLocation(stream), st.Partition, st.FirstOffset)
	key, err := c.KeyOf(url)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.Warehouse()[len("file://"):], key)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return FileMeta{URL: url, Size: int64(buf.Len()), Stats: st}
}

func sameRecord(a, b *tributary.Record) error {
	switch {
	case a.Partition != b.Partition || a.Offset != b.Offset:
		return fmt.Errorf("position %d@%d vs %d@%d", a.Offset, a.Partition, b.Offset, b.Partition)
	case a.Timestamp != b.Timestamp || a.ProducerTimestamp != b.ProducerTimestamp:
		return fmt.Errorf("offset %d: timestamps %d/%d vs %d/%d", a.Offset, a.Timestamp, a.ProducerTimestamp, b.Timestamp, b.ProducerTimestamp)
	case a.Topic != b.Topic || a.Source != b.Source || a.ClientID != b.ClientID || a.Node != b.Node:
		return fmt.Errorf("offset %d: strings differ", a.Offset)
	case a.Principal != b.Principal:
		return fmt.Errorf("offset %d: principal %q vs %q", a.Offset, a.Principal, b.Principal)
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

func TestCommitAndScanRoundTrip(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "factory.telemetry"
	p, err := c.AllocatePartition(ctx, stream, "n1")
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMicro()
	recs := testRecords(p, 0, 40000, ts)
	a := PartitionAppend{Partition: p, From: 0, To: 25000, Files: []FileMeta{writeFile(t, c, stream, recs[:25000])}}
	res, err := c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil)
	if err != nil || len(res.Committed) != 1 {
		t.Fatalf("commit: %v %+v", err, res)
	}
	// The same append again is recognised as done, not duplicated.
	res, err = c.CommitAppend(ctx, stream, []PartitionAppend{a}, nil)
	if err != nil || len(res.Already) != 1 || len(res.Committed) != 0 {
		t.Fatalf("recommit: %v %+v", err, res)
	}
	// A batch that does not start at the mark is stale.
	_, err = c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: p, From: 20000, To: 30000}}, nil)
	var se *StaleError
	if !errors.As(err, &se) || se.HighWater != 25000 {
		t.Fatalf("want StaleError at 25000, got %v", err)
	}
	b := PartitionAppend{Partition: p, From: 25000, To: 40000, Files: []FileMeta{writeFile(t, c, stream, recs[25000:])}}
	if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{b}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.ScanSorted(ctx, stream, ScanOptions{Partition: -1})
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
	part, err := c.ScanSorted(ctx, stream, ScanOptions{Partition: p, FromOffset: 39990})
	if err != nil || len(part) != 10 || part[0].Offset != 39990 {
		t.Fatalf("filtered scan: %v, %d rows", err, len(part))
	}
	tbl, _ := c.LoadTable(ctx, stream)
	if hw := HighWater(tbl, p); hw != 40000 {
		t.Fatalf("high water %d", hw)
	}
}

func TestAllocatePartitionConcurrent(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const n = 6
	parts := make([]int32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[i], errs[i] = c.AllocatePartition(ctx, "a.b", fmt.Sprintf("node-%d", i))
		}()
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
	// Stable on repeat.
	if p, err := c.AllocatePartition(ctx, "a.b", "node-3"); err != nil || p != parts[3] {
		t.Fatalf("repeat allocation: %d %v, want %d", p, err, parts[3])
	}
}

func TestConcurrentCommittersNeverDuplicate(t *testing.T) {
	ctx := context.Background()
	c, _ := openTestCatalog(t)
	const stream = "x.y"
	if _, err := c.EnsureTable(ctx, stream); err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UnixMicro()
	recs := testRecords(0, 0, 100, ts)
	// Two committers race with the same batch; exactly one commits it.
	var wg sync.WaitGroup
	var files sync.Mutex // writeFile names the file by its offsets: one writer at a time, then renamed apart
	results := make([]CommitResult, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			files.Lock()
			f := writeFile(t, c, stream, recs)
			f.URL = f.URL[:len(f.URL)-len(".parquet")] + fmt.Sprint(i) + ".parquet"
			err := os.Rename(filepath.Join(c.Warehouse()[7:], mustKey(c, f.URL[:len(f.URL)-len(fmt.Sprint(i)+".parquet")]+".parquet")),
				filepath.Join(c.Warehouse()[7:], mustKey(c, f.URL)))
			files.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			res, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: 0, From: 0, To: 100, Files: []FileMeta{f}}}, nil)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	committed := 0
	for _, r := range results {
		committed += len(r.Committed)
	}
	if committed != 1 {
		t.Fatalf("%d committers committed the batch, want exactly 1: %+v", committed, results)
	}
	got, err := c.ScanSorted(ctx, stream, ScanOptions{Partition: -1})
	if err != nil || len(got) != 100 {
		t.Fatalf("scan: %v %d rows", err, len(got))
	}
}

func mustKey(c *Catalog, url string) string {
	k, err := c.KeyOf(url)
	if err != nil {
		panic(err)
	}
	return k
}
