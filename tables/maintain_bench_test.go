package tables

import (
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// BenchmarkCommitsWithoutMaintenance, BenchmarkCommitsWithMaintenance and
// BenchmarkCommitsMergeAppend make N one-row commits (env
// TRIBUTARY_BENCH_COMMITS, default 1,000) to a fresh table and report, side
// by side:
//
//	meta-B/commit   mean size of the metadata file each commit wrote
//	commit-ms       mean commit latency over the last 100 commits
//	commit-p99-ms   99th percentile of those
//	plan-ms         PlanFiles of the whole table after the N commits
//	manifests, files, snapshots  at the end
//
// With maintenance, a pass runs every 100 commits with snapshots expired by
// count (the last 100; the benchmark runs in seconds, not hours); its time
// is reported as maint-ms/pass and is not in commit latency. MergeAppend
// sets commit.manifest-merge.enabled instead (iceberg-go merges manifests
// inside every append). Run: go test -run '^$' -bench Commits -benchtime 1x ./tables/
func BenchmarkCommitsWithoutMaintenance(b *testing.B) { benchCommits(b, "off") }

func BenchmarkCommitsWithMaintenance(b *testing.B) { benchCommits(b, "maintain") }

func BenchmarkCommitsMergeAppend(b *testing.B) { benchCommits(b, "merge-append") }

func benchCommits(b *testing.B, mode string) {
	ctx := context.Background()
	n := envInt("TRIBUTARY_BENCH_COMMITS", 1000)
	for range b.N {
		b.StopTimer()
		c, _ := openTestCatalog(b)
		const stream = "bench.s"
		tbl, err := c.EnsureTable(ctx, stream)
		if err != nil {
			b.Fatal(err)
		}
		if mode == "merge-append" {
			tx := tbl.NewTransaction()
			if err := tx.SetProperties(iceberg.Properties{table.ManifestMergeEnabledKey: "true"}); err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
		recs := testRecords(0, 0, n, time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC).UnixMicro())
		b.StartTimer()
		var metaBytes int64
		var lat []time.Duration
		var maint time.Duration
		passes := 0
		for i := range n {
			f := putFile(b, c, stream, recs[i:i+1])
			began := time.Now()
			if _, err := c.CommitAppend(ctx, stream, []PartitionAppend{{Partition: 0, From: int64(i), To: int64(i + 1), Files: []FileMeta{f}}}, nil); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(began))
			c.mu.Lock()
			loc := c.tables[stream].MetadataLocation()
			c.mu.Unlock()
			fi, err := os.Stat(localPath(b, c, loc))
			if err != nil {
				b.Fatal(err)
			}
			metaBytes += fi.Size()
			if mode == "maintain" && (i+1)%100 == 0 {
				began := time.Now()
				if _, err := c.Maintain(ctx, stream, MaintainOptions{Policy: Policy{SnapshotMaxAge: time.Millisecond, RetainSnapshots: 100}}); err != nil {
					b.Fatal(err)
				}
				maint += time.Since(began)
				passes++
			}
		}
		b.StopTimer()
		tbl, err = c.LoadTable(ctx, stream)
		if err != nil {
			b.Fatal(err)
		}
		var plan time.Duration
		for range 5 {
			began := time.Now()
			if _, err := tbl.Scan().PlanFiles(ctx); err != nil {
				b.Fatal(err)
			}
			plan += time.Since(began)
		}
		st, err := c.Stats(ctx, stream)
		if err != nil {
			b.Fatal(err)
		}
		tail := lat[max(0, len(lat)-100):]
		var sum time.Duration
		for _, d := range tail {
			sum += d
		}
		sort.Slice(tail, func(i, j int) bool { return tail[i] < tail[j] })
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		b.ReportMetric(float64(metaBytes)/float64(n), "meta-B/commit")
		b.ReportMetric(ms(sum)/float64(len(tail)), "commit-ms")
		b.ReportMetric(ms(tail[len(tail)*99/100]), "commit-p99-ms")
		b.ReportMetric(ms(plan)/5, "plan-ms")
		b.ReportMetric(float64(st.DataManifests), "manifests")
		b.ReportMetric(float64(st.DataFiles), "files")
		b.ReportMetric(float64(st.Snapshots), "snapshots")
		if passes > 0 {
			b.ReportMetric(ms(maint)/float64(passes), "maint-ms/pass")
		}
		b.StartTimer()
	}
}
