package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite"
	"github.com/tributary-io/tributary/internal/testkit"
)

// TestCloudProduceCrash: two cloud servers share the state database (the
// SQLite catalog file) and the warehouse; an idempotent kgo producer
// (lz4, several batches in flight) writes through server a, which is
// killed with SIGKILL mid-flush at each instant of its flush pipeline
// (cloudwrite.TestPauseEnv blocks every flush there): before the WAL
// object's put, after the put and before its sequencing, after the
// sequencing and before the producer is answered. The producer's seed
// then leads to server b, where its retries land once: every record is
// acknowledged once, the table holds each exactly once at its
// acknowledged offset, offsets dense; an object put and never sequenced
// is deleted by b's orphan sweep.
func TestCloudProduceCrash(t *testing.T) { cloudProduceCrash(t, "") }

// TestCloudProduceCrashPostgres is TestCloudProduceCrash with the
// catalog and the state database on PostgreSQL.
func TestCloudProduceCrashPostgres(t *testing.T) { cloudProduceCrash(t, startPostgres(t)) }

// cpOrphanGrace is the crash tests' cloud_produce.orphan_grace (b
// sweeps every quarter of it) and lease (b takes the table's commit job
// over from the killed a).
const cpOrphanGrace = "  orphan_grace: 2s\n  lease: 1s\n"

func cloudProduceCrash(t *testing.T, dsn string) {
	dir := t.TempDir()
	b := startProc(t, dir, "cloud", "-config", cloudProduceConfig(t, dir, dsn, "b", "", cpOrphanGrace))
	for i, point := range []string{cloudwrite.PauseBeforePut, cloudwrite.PauseAfterPut, cloudwrite.PauseAfterSequence} {
		t.Run(strings.TrimPrefix(point, "cloudwrite."), func(t *testing.T) {
			stream := fmt.Sprintf("factory.cloudcrash%d", i)
			// The first flush goes through: its answer lets the producer
			// have five batches in flight, which the paused one holds.
			a := startProcWrapped(t, []string{"env", cloudwrite.TestPauseEnv + "=" + point + ":1"}, dir,
				"cloud", "-config", cloudProduceConfig(t, dir, dsn, "a", "", cpOrphanGrace))
			seed := testkit.NewProxy(t, a.CloudKafka)
			cl, err := kgo.NewClient(kgo.SeedBrokers(seed.Addr()), kgo.ProducerBatchCompression(kgo.Lz4Compression()),
				kgo.AllowAutoTopicCreation(), kgo.ProducerBatchMaxBytes(2<<10), kgo.RecordRetries(1000), kgo.RetryTimeout(time.Minute),
				kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			const n = 400
			acks := &cpAcks{m: map[string]int64{}}
			warm := &kgo.Record{Topic: stream, Value: []byte(point + "-first")}
			if err := cl.ProduceSync(context.Background(), warm).FirstErr(); err != nil {
				t.Fatalf("first record: %v", err)
			}
			acks.add(t, string(warm.Value), warm.Offset)
			var wg sync.WaitGroup
			for j := range n {
				v := fmt.Sprintf("%s-%04d-%s", point, j, strings.Repeat("x", 40))
				wg.Add(1)
				cl.Produce(context.Background(), &kgo.Record{Topic: stream, Value: []byte(v)}, func(r *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						t.Errorf("produce %s: %v", v, err)
						return
					}
					acks.add(t, v, r.Offset)
				})
			}
			if !a.logged("test pause", 30*time.Second) {
				t.Fatalf("server a never paused at %s:\n%s", point, a.logs())
			}
			seed.Retarget(b.CloudKafka)
			a.kill()
			t.Logf("paused: %s", a.tail(1))
			orphans := walObjects(t, dir, "a-")
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			if len(acks.m) != n+1 {
				t.Fatalf("%d records acknowledged, want %d", len(acks.m), n+1)
			}
			read := func() []*tributary.Record {
				if dsn != "" {
					return readTablePostgres(t, dsn, stream)
				}
				return readTable(t, dir, stream)
			}
			checkCloudTable(t, b.CloudKafka, stream, n+1, acks.byOffset(t), read)
			if point == cloudwrite.PauseAfterPut {
				if len(orphans) == 0 {
					t.Fatal("no WAL object of server a left after its kill between put and sequencing")
				}
				waitFor(t, 30*time.Second, "the orphan sweep deletes a's unsequenced objects", func() bool {
					left := walObjects(t, dir, "a-")
					for _, o := range orphans {
						for _, l := range left {
							if l == o {
								return false
							}
						}
					}
					return true
				})
			}
			t.Logf("%s: %d WAL objects of a left at its kill", point, len(orphans))
		})
	}
	b.stop()
}

// walObjects lists the WAL objects in dir's warehouse whose server name
// starts with prefix.
func walObjects(t *testing.T, dir, prefix string) []string {
	t.Helper()
	var out []string
	root := filepath.Join(dir, "warehouse", cloudwrite.Prefix)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return fs.SkipDir
			}
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".trbw") && strings.HasPrefix(d.Name(), prefix) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
