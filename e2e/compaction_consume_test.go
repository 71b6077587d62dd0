package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary/tables"
)

// TestConsumeDuringCompaction: while small commits land every 200 ms and
// the maintainer compacts them every second (replacing the files a consumer
// is reading), a Kafka consumer tailing the stream from the cloud server
// receives every offset exactly once, in order, byte-exact. The table's
// metadata must show that compaction really happened: snapshots of the
// maintainer's compaction that removed data files, and fewer live data
// files than the appends added.
func TestConsumeDuringCompaction(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir, "--maintenance-interval", "1s")
	ctx := context.Background()
	const batches, per = 25, 80
	// A first record creates the stream so the consumer can subscribe.
	produceKafka(t, p.Kafka, "warm", 1, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumeTopics("factory.telemetry"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(16<<10), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var mu sync.Mutex
	var got []delivered
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			fs.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				got = append(got, fromKgo(r))
				mu.Unlock()
			})
		}
	}()
	// Many small commits, spread over several maintenance passes.
	for b := range batches {
		produceKafka(t, p.Kafka, "c"+string(rune('a'+b%26))+string(rune('a'+b/26)), per, nil)
		time.Sleep(150 * time.Millisecond)
	}
	total := 1 + batches*per
	waitFor(t, 60*time.Second, "the consumer to reach the end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= total
	})
	// Wait for at least one more compaction after the last commit, then
	// check nothing more arrives (no duplicates from replaced files).
	time.Sleep(2500 * time.Millisecond)
	close(stop)
	<-done
	st, _ := scrapeMetrics(t, p)
	p.stop()
	want := tableByPartition(t, dir, "factory.telemetry")
	mu.Lock()
	defer mu.Unlock()
	checkExactlyOnce(t, "consumer during compaction", want, got)
	if st["tributary_maintenance_passes_total"] < 3 {
		t.Fatalf("only %v maintenance passes ran during the test", st["tributary_maintenance_passes_total"])
	}
	cs := compactionsOf(t, dir, "factory.telemetry")
	if cs.compactions == 0 || cs.removedFiles == 0 || cs.liveFiles >= cs.appendedFiles {
		t.Fatalf("no compaction happened: %+v", cs)
	}
	t.Logf("%d records exactly once across %v maintenance passes; table history %+v",
		len(got), st["tributary_maintenance_passes_total"], cs)
}

// compactionHistory is what a table's metadata says about compaction.
type compactionHistory struct {
	compactions   int // snapshots of a maintainer's compaction (iceberg-go v0.7.0 commits them as "overwrite")
	removedFiles  int // data files those snapshots removed
	appendedFiles int // data files added by append snapshots
	liveFiles     int // data files of the current snapshot
}

// compactionsOf reads a stream's table from the node's catalog (the node
// stopped) and summarises its snapshots.
func compactionsOf(t *testing.T, dataDir, stream string) compactionHistory {
	t.Helper()
	ctx := context.Background()
	c, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(dataDir, "catalog.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tbl, err := c.LoadTable(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var h compactionHistory
	for _, s := range tbl.Metadata().Snapshots() {
		if s.Summary == nil {
			continue
		}
		switch {
		case s.Summary.Properties["tributary.operation"] == "compact" &&
			(s.Summary.Operation == table.OpReplace || s.Summary.Operation == table.OpOverwrite):
			h.compactions++
			n, _ := strconv.Atoi(s.Summary.Properties["deleted-data-files"])
			h.removedFiles += n
		case s.Summary.Operation == table.OpAppend:
			n, _ := strconv.Atoi(s.Summary.Properties["added-data-files"])
			h.appendedFiles += n
		}
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.liveFiles = len(tasks)
	return h
}
