//go:build bench

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/uplink"
)

// storeRun is what one store's run measured.
type storeRun struct {
	name                 string
	acked                int64
	rate                 float64 // msg/s achieved
	freshP50, freshP99   time.Duration
	commitP50, commitP99 time.Duration
	commits              float64
	objects, bytes       int64
	payloadMB            float64
}

// TestBenchLakeStores (issue 29): at 10,000 msg/s (100 devices × 100 msg/s,
// QoS 1, 256 B) into one edge node, per store: freshness (the edge's
// tributary_freshness_seconds, accepted → the table commit that made the
// record queryable), table commit p50/p99 (tributary_uplink_commit_duration_seconds)
// and object writes per committed payload MB (objects in the warehouse
// afterwards: maintenance is off and every object is written once, so the
// count is the number of writes). Stores: file://, versitygw (S3), Azurite,
// fake-gcs-server, SeaweedFS (its S3 and its Iceberg REST catalog), and
// file:// through Tributary's own REST catalog (`tributary cloud`), each
// reported against file:// with the SQLite catalog in the same run.
func TestBenchLakeStores(t *testing.T) {
	d := benchSeconds()
	ctx := context.Background()
	var runs []storeRun
	// run starts the store (setup, inside the subtest, so -run selects
	// stores) and measures an edge node on it.
	run := func(name string, setup func(t *testing.T) (sections, warehouse string, stores tables.StoreOptions)) {
		t.Run(name, func(t *testing.T) {
			sections, warehouse, stores := setup(t)
			runs = append(runs, benchStore(t, ctx, name, sections, warehouse, stores, d))
		})
	}
	run("file", func(t *testing.T) (string, string, tables.StoreOptions) {
		dir := t.TempDir()
		return fmt.Sprintf("catalog:\n  uri: sqlite://%[1]s/catalog.db\n  warehouse: file://%[1]s/warehouse\n", dir),
			"file://" + dir + "/warehouse", tables.StoreOptions{}
	})
	run("s3-versitygw", func(t *testing.T) (string, string, tables.StoreOptions) {
		v := startVersityGW(t)
		return fmt.Sprintf("catalog:\n  uri: sqlite://%s/catalog.db\n  warehouse: s3://%s/warehouse\nstorage:\n  s3:\n    endpoint: %s\n    region: us-east-1\n    path_style: true\n    access_key_id: %s\n    secret_access_key: %s\n",
				t.TempDir(), s3Bucket, v.url, s3Access, s3Secret), "s3://" + s3Bucket + "/warehouse",
			tables.StoreOptions{S3: tables.S3Options{Endpoint: v.url, Region: "us-east-1", PathStyle: true, AccessKeyID: s3Access, SecretAccessKey: s3Secret}}
	})
	run("azurite", func(t *testing.T) (string, string, tables.StoreOptions) {
		az := startAzurite(t)
		warehouse := "abfss://" + azContainer + "@" + azAccount + ".dfs.core.windows.net/warehouse"
		return fmt.Sprintf("catalog:\n  uri: sqlite://%s/catalog.db\n  warehouse: %s\n%s", t.TempDir(), warehouse, azureStorage(az)),
			warehouse, tables.StoreOptions{Azure: tables.AzureOptions{Endpoint: az, Key: azKey}}
	})
	run("fake-gcs", func(t *testing.T) (string, string, tables.StoreOptions) {
		gcs := startFakeGCS(t)
		return fmt.Sprintf("catalog:\n  uri: sqlite://%s/catalog.db\n  warehouse: gs://%s/warehouse\n%s", t.TempDir(), gcsBucket, gcsStorage(gcs)),
			"gs://" + gcsBucket + "/warehouse", tables.StoreOptions{GCS: tables.GCSOptions{Endpoint: gcs, Anonymous: true}}
	})
	run("seaweedfs-rest", func(t *testing.T) (string, string, tables.StoreOptions) {
		sw := startSeaweedFS(t, 3600)
		return sw.catalogSection(sw.credential()) + sw.storage(), "s3://" + weedBucket,
			tables.StoreOptions{S3: tables.S3Options{Endpoint: sw.S3, Region: "us-east-1", PathStyle: true, AccessKeyID: weedKey, SecretAccessKey: weedSecret}}
	})
	// Tributary's own REST catalog: `tributary cloud` over a SQLite catalog
	// and a file:// warehouse, over TLS, the edge committing through it
	// with its client credential (as TestRESTAuth sets it up).
	run("file-tributary-rest", func(t *testing.T) (string, string, tables.StoreOptions) {
		site := newAuthSite(t)
		ca := testkit.NewCA(t)
		cloud := site.startCloud(t, indentYAML(securityYAML(ca.Server(t))))
		return fmt.Sprintf("catalog:\n  uri: https://%s\n  ca_file: %s\n  credential: edge-1:pw-edge-1\n  warehouse: file://%s/warehouse\n", cloud.Catalog, ca.Files(), site.dir),
			"file://" + site.dir + "/warehouse", tables.StoreOptions{}
	})

	if len(runs) == 0 || runs[0].name != "file" {
		t.Fatal("the file:// run did not complete: no baseline")
	}
	base := runs[0]
	var b strings.Builder
	fmt.Fprintf(&b, "\nLake stores at 10,000 msg/s offered (100 devices × 100 msg/s, QoS 1, 256 B), %s each, commit interval 1s\n", d)
	fmt.Fprintf(&b, "%-20s %9s %9s %9s %9s %9s %8s %9s %10s %8s\n", "store", "acked", "msg/s", "fresh p50", "fresh p99", "commit p50", "commit p99", "commits", "objects/MB", "p99/file")
	for _, r := range runs {
		perMB := float64(r.objects) / r.payloadMB
		fmt.Fprintf(&b, "%-20s %9d %9.0f %9s %9s %10s %10s %9.0f %10.1f %7.2fx\n", r.name, r.acked, r.rate,
			r.freshP50.Round(time.Millisecond), r.freshP99.Round(time.Millisecond),
			r.commitP50.Round(time.Millisecond), r.commitP99.Round(time.Millisecond), r.commits, perMB,
			float64(r.freshP99)/float64(base.freshP99))
	}
	fmt.Fprintf(&b, "objects/MB: objects in the warehouse per MB of acknowledged payload (data files + Iceberg metadata, manifests, manifest lists; catalog rows not counted)\n")
	t.Log(b.String())
	fmt.Print(b.String())
}

// benchStore runs one edge node with sections (catalog and storage) under
// the 10,000 msg/s load for d and measures it.
func benchStore(t *testing.T, ctx context.Context, name, sections, warehouse string, stores tables.StoreOptions, d time.Duration) storeRun {
	dir := t.TempDir()
	cfg := edgeConfig(t, dir, "bench-"+name, sections+"maintenance:\n  enabled: false\n")
	// edgeConfig commits every 200 ms; the bench commits every second, as
	// TestBenchFreshness does.
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(raw), "commit_interval: 200ms", "commit_interval: 1s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEdge(t, dir, cfg)
	sum := loadInFlight(t, p.MQTT, 1, 100, 16, 100, d, nil)
	waitFor(t, 2*time.Minute, "the WAL drained into the table", func() bool { return walDrained(t, p) })
	text := scrapeText(t, p)
	p.stop()
	r := storeRun{name: name, acked: sum.Acked, rate: sum.MsgsPerSec(), payloadMB: float64(sum.Acked) * 256 / (1 << 20)}
	r.freshP50, r.freshP99 = histQuantile(text, "tributary_freshness_seconds", 0.5), histQuantile(text, "tributary_freshness_seconds", 0.99)
	r.commitP50, r.commitP99 = histQuantile(text, "tributary_uplink_commit_duration_seconds", 0.5), histQuantile(text, "tributary_uplink_commit_duration_seconds", 0.99)
	r.commits = histCount(text, "tributary_uplink_commit_duration_seconds")

	bkt, err := uplink.OpenBucket(ctx, warehouse, stores)
	if err != nil {
		t.Fatalf("%s: opening the warehouse to count its objects: %v", name, err)
	}
	defer bkt.Close()
	it := bkt.Bucket().List(nil)
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Logf("%s: listing stopped: %v", name, err)
			}
			break
		}
		if !obj.IsDir {
			r.objects++
			r.bytes += obj.Size
		}
	}
	if r.objects == 0 {
		t.Fatalf("%s: no object in the warehouse after %d acknowledged messages", name, sum.Acked)
	}
	return r
}

// scrapeText is the node's /metrics page (scrapeMetrics sums over
// labels, and a histogram's quantile needs its le labels).
func scrapeText(t *testing.T, p *proc) string {
	t.Helper()
	resp, err := p.httpGet("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var bucketLine = regexp.MustCompile(`^([a-z_]+)_bucket\{(?:.*,)?le="([^"]+)"(?:,.*)?\} ([0-9.e+]+)`)

// histBuckets sums a histogram's cumulative buckets over its label sets.
func histBuckets(text, name string) (les []float64, counts []float64) {
	m := map[float64]float64{}
	for _, line := range strings.Split(text, "\n") {
		g := bucketLine.FindStringSubmatch(line)
		if g == nil || g[1] != name {
			continue
		}
		le := math.Inf(1)
		if g[2] != "+Inf" {
			le, _ = strconv.ParseFloat(g[2], 64)
		}
		c, _ := strconv.ParseFloat(g[3], 64)
		m[le] += c
	}
	for le := range m {
		les = append(les, le)
	}
	sort.Float64s(les)
	for _, le := range les {
		counts = append(counts, m[le])
	}
	return les, counts
}

func histCount(text, name string) float64 {
	_, counts := histBuckets(text, name)
	if len(counts) == 0 {
		return 0
	}
	return counts[len(counts)-1]
}

// histQuantile is Prometheus's histogram_quantile over the summed buckets
// (linear within a bucket).
func histQuantile(text, name string, q float64) time.Duration {
	les, counts := histBuckets(text, name)
	if len(counts) == 0 || counts[len(counts)-1] == 0 {
		return 0
	}
	rank := q * counts[len(counts)-1]
	lo, prev := 0.0, 0.0
	for i, le := range les {
		if counts[i] >= rank {
			if math.IsInf(le, 1) {
				return time.Duration(lo * float64(time.Second))
			}
			frac := 1.0
			if counts[i] > prev {
				frac = (rank - prev) / (counts[i] - prev)
			}
			return time.Duration((lo + (le-lo)*frac) * float64(time.Second))
		}
		lo, prev = le, counts[i]
	}
	return time.Duration(lo * float64(time.Second))
}
