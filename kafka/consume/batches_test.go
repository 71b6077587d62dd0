package consume

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/tables"
)

// rawFetch fetches partition 0 of the cloud stream from off with a
// partition limit, without waiting.
func rawFetch(t *testing.T, rc *kafkatest.Conn, off int64, partMax int32) kmsg.FetchResponseTopicPartition {
	return rawFetchWait(t, rc, off, 0, 64<<20, partMax)
}

// rawFetchWait is rawFetch waiting up to wait ms for a byte, within maxBytes.
func rawFetchWait(t *testing.T, rc *kafkatest.Conn, off int64, wait, maxBytes, partMax int32) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = wait, 1, maxBytes
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = cloudStream
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes = off, partMax
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return rc.RoundTrip(req).(*kmsg.FetchResponse).Topics[0].Partitions[0]
}

// splitBatches decodes the record batches of a fetch response, checking
// each CRC and that they are consecutive.
func splitBatches(t *testing.T, b []byte) []kmsg.RecordBatch {
	t.Helper()
	var out []kmsg.RecordBatch
	for len(b) > 0 {
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b); err != nil {
			t.Fatal(err)
		}
		n := int(rb.Length) + 12
		if int32(crc32c(b[21:n])) != rb.CRC {
			t.Fatalf("batch at %d: bad CRC", rb.FirstOffset)
		}
		if len(out) > 0 {
			prev := out[len(out)-1]
			if rb.FirstOffset != prev.FirstOffset+int64(prev.NumRecords) {
				t.Fatalf("batch at %d follows one ending at %d", rb.FirstOffset, prev.FirstOffset+int64(prev.NumRecords))
			}
		}
		out = append(out, rb)
		b = b[n:]
	}
	return out
}

// A fetch starting inside a cached batch returns that whole batch first
// (its base offset below the fetch offset), then whole batches up to the
// partition limit; the bytes are the same whether the cache was cold or
// warm, and across row groups and files the batches stay consecutive.
func TestFetchInsideCachedBatch(t *testing.T) {
	e := newCloudEnv(t, "n1")
	e.commit(0, tables.RowGroupRows+500, 100) // two row groups
	e.commit(0, 300, 100)
	cs := e.start(t)
	rc := kafkatest.Dial(t, cs.Addr())

	whole := rawFetch(t, rc, 0, 256<<10)
	bs := splitBatches(t, whole.RecordBatches)
	if len(bs) < 2 || bs[0].FirstOffset != 0 {
		t.Fatalf("fetch 0: %d batches, first at %d", len(bs), bs[0].FirstOffset)
	}
	if len(whole.RecordBatches) > 256<<10 {
		t.Fatalf("fetch 0: %d bytes beyond the 256 KiB partition limit", len(whole.RecordBatches))
	}
	// Inside the second batch.
	mid := bs[1].FirstOffset + int64(bs[1].NumRecords)/2
	p := rawFetch(t, rc, mid, 256<<10)
	got := splitBatches(t, p.RecordBatches)
	if got[0].FirstOffset != bs[1].FirstOffset || got[0].NumRecords != bs[1].NumRecords {
		t.Fatalf("fetch %d: first batch %d+%d, want the stored batch %d+%d", mid, got[0].FirstOffset, got[0].NumRecords, bs[1].FirstOffset, bs[1].NumRecords)
	}
	// Just before the end of the first row group: the response goes on
	// into the next row group (and the next file) with consecutive batches.
	p = rawFetch(t, rc, int64(tables.RowGroupRows)-1, 8<<20)
	got = splitBatches(t, p.RecordBatches)
	last := got[len(got)-1]
	if end := last.FirstOffset + int64(last.NumRecords); end != int64(tables.RowGroupRows+800) {
		t.Fatalf("fetch across row groups and files ends at %d, want %d", end, tables.RowGroupRows+800)
	}
	// Past the mark: nothing; below the earliest: OFFSET_OUT_OF_RANGE is
	// covered by TestCloudListOffsetsAndFetchEdges.
	if p := rawFetch(t, rc, int64(tables.RowGroupRows+800), 1<<20); len(p.RecordBatches) != 0 {
		t.Fatalf("fetch at the mark: %d bytes", len(p.RecordBatches))
	}

	// kgo from an offset inside a batch gets exactly the records from it on.
	for _, start := range []int64{mid, int64(tables.RowGroupRows) - 1, int64(tables.RowGroupRows + 799)} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cs.Addr()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cloudStream: {0: kgo.NewOffset().At(start)}}))
		if err != nil {
			t.Fatal(err)
		}
		recs := consume(t, cl, int(int64(tables.RowGroupRows+800)-start), 30*time.Second)
		cl.Close()
		for i, r := range recs {
			if r.Offset != start+int64(i) {
				t.Fatalf("from %d: record %d has offset %d", start, i, r.Offset)
			}
			checkServed(t, e.rows[0][r.Offset], r)
		}
	}
}

// Under a small cap (1 MiB, while each row group encodes to ~2 MiB) the
// cache keeps at most one row group beyond its cap, every fetch still
// serves the right records, and evicted row groups are encoded again.
func TestBatchCacheEvictionUnderSmallCap(t *testing.T) {
	e := newCloudEnv(t, "n1")
	e.commit(0, 3*tables.RowGroupRows, 120) // three row groups of ~2 MiB
	cs := e.startWith(t, func(c *Config) { c.BatchCacheBytes = 1 << 20 })
	for pass := range 2 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cs.Addr()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cloudStream: {0: kgo.NewOffset().AtStart()}}))
		if err != nil {
			t.Fatal(err)
		}
		recs := consume(t, cl, 3*tables.RowGroupRows, 60*time.Second)
		cl.Close()
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("pass %d: record %d has offset %d", pass, i, r.Offset)
			}
			checkServed(t, e.rows[0][i], r)
		}
		// The cap holds (the newest group is always kept, so it may be
		// exceeded by one group) and groups were evicted.
		if n, size := cs.batches.groups.Len(), cs.batches.groups.Size(); n > 1 || size > 3<<20 {
			t.Fatalf("pass %d: %d groups, %d bytes cached under a 1 MiB cap", pass, n, size)
		}
	}
}

// Concurrent fetchers of one cold partition share the row groups' builds
// and each gets every record, in order (run with -race).
func TestConcurrentFetchersOfOnePartition(t *testing.T) {
	e := newCloudEnv(t, "n1")
	e.commit(0, 2*tables.RowGroupRows+77, 64)
	cs := e.start(t)
	n := 2*tables.RowGroupRows + 77
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for k := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := int64(k * 1000)
			cl, err := kgo.NewClient(kgo.SeedBrokers(cs.Addr()), kgo.FetchMaxPartitionBytes(int32(64<<10*(k+1))),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cloudStream: {0: kgo.NewOffset().At(start)}}))
			if err != nil {
				errs <- err.Error()
				return
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			next := start
			for next < int64(n) && ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachRecord(func(r *kgo.Record) {
					if r.Offset != next || string(r.Value) != string(e.rows[0][r.Offset].Value) {
						errs <- "out of order or wrong value"
					}
					next++
				})
			}
			if next != int64(n) {
				errs <- "timed out"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestBatchCacheBytesValidated(t *testing.T) {
	e := newCloudEnv(t, "n1")
	_, err := NewServer(Config{OffsetsDB: "sqlite://" + e.dir + "/catalog.db", BatchCacheBytes: 1000}, e.cat)
	if err == nil {
		t.Fatal("a 1000-byte batch cache was accepted")
	}
}

// The cache's metrics: bytes cached and row groups built.
func TestBatchCacheMetrics(t *testing.T) {
	e := newCloudEnv(t, "n1")
	e.commit(0, 100, 10)
	cs := e.start(t)
	rc := kafkatest.Dial(t, cs.Addr())
	if b := rawFetch(t, rc, 50, 1<<20); len(b.RecordBatches) == 0 {
		t.Fatal("nothing fetched")
	}
	rawFetch(t, rc, 0, 1<<20) // cached: no second build
	if n := cs.batches.builds.Load(); n != 1 {
		t.Fatalf("%d builds, want 1", n)
	}
	if cs.batches.groups.Size() <= 0 {
		t.Fatal("nothing cached")
	}
}

// A consumer scanning far more than the batch cache (a cold catch-up over
// ~5 MiB through a 2 MiB cache) does not evict the tail row group two
// tailing connections share: they read it again without a rebuild,
// while the scan's own first row groups were evicted.
func TestBatchCacheScanKeepsSharedTail(t *testing.T) {
	e := newCloudEnv(t, "n1")
	for range 16 {
		e.commit(0, 500, 1000) // ~0.5 MiB a file, one row group each
	}
	e.commit(0, 300, 1000) // the tail
	tail := int64(16 * 500)
	cs := e.startWith(t, func(c *Config) { c.BatchCacheBytes = 2 << 20 })
	a, b := kafkatest.Dial(t, cs.Addr()), kafkatest.Dial(t, cs.Addr())
	for _, rc := range []*kafkatest.Conn{a, b} {
		if p := rawFetch(t, rc, tail+10, 1<<20); len(p.RecordBatches) == 0 {
			t.Fatal("tail: nothing fetched")
		}
	}
	scanner := kafkatest.Dial(t, cs.Addr())
	// The scan stops 6 row groups before the tail: its prefetch (4 row
	// groups ahead) does not reach it.
	for off := int64(0); off < 10*500; {
		bs := splitBatches(t, rawFetch(t, scanner, off, 256<<10).RecordBatches)
		last := bs[len(bs)-1]
		off = last.FirstOffset + int64(last.NumRecords)
	}
	if cs.batches.groups.Size() > 3<<20 {
		t.Fatalf("%d bytes cached under a 2 MiB cap", cs.batches.groups.Size())
	}
	// The scan's prefetches finish in the background: wait for them.
	for deadline := time.Now().Add(10 * time.Second); len(cs.batches.workers) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("prefetches still running")
		}
		time.Sleep(5 * time.Millisecond)
	}
	builds := cs.batches.builds.Load()
	for _, rc := range []*kafkatest.Conn{a, b} {
		if p := rawFetch(t, rc, tail, 1<<20); len(p.RecordBatches) == 0 {
			t.Fatal("tail: nothing fetched")
		}
	}
	if n := cs.batches.builds.Load() - builds; n != 0 {
		t.Fatalf("the tail was rebuilt %d times after the scan: the scan flushed it", n)
	}
	rawFetch(t, scanner, 0, 1<<20)
	if cs.batches.builds.Load() == builds {
		t.Fatal("the scan's first row group is still cached: the scan did not exceed the cache")
	}
}
