package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
)

const gcsBucket = "lake"

// startFakeGCS runs a real GCS emulator, fake-gcs-server (`make deps`
// installs it with go install), on a loopback port with its memory backend,
// and creates the bucket. It returns the JSON API endpoint
// (http://HOST:PORT/storage/v1/).
func startFakeGCS(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("fake-gcs-server")
	if err != nil {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, "go", "bin", "fake-gcs-server")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("fake-gcs-server not installed (`make deps` runs go install github.com/fsouza/fake-gcs-server): %v", err)
		}
	}
	addr := freeLoopbackPort(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "-scheme", "http", "-host", "127.0.0.1", "-port", port, "-backend", "memory",
		"-public-host", addr, "-log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	endpoint := "http://" + addr + "/storage/v1/"
	waitFor(t, 20*time.Second, "fake-gcs-server creates the bucket", func() bool {
		resp, err := http.Post(endpoint+"b?project=test", "application/json",
			bytes.NewReader([]byte(fmt.Sprintf(`{"name":%q}`, gcsBucket))))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 || resp.StatusCode == 409
	})
	return endpoint
}

func gcsStorage(endpoint string) string {
	return fmt.Sprintf("storage:\n  gcs:\n    endpoint: %s\n    anonymous: true\n", endpoint)
}

func gcsProps(endpoint string) map[string]string {
	return map[string]string{"gcs.service.host": endpoint, "gcs.no-auth": "true"}
}

// TestGCSEdgeToCloud: MQTT (paho) and Kafka (kgo) publishes to an edge
// whose warehouse is gs:// on a real GCS emulator land exactly once in the
// table (read back with iceberg-go's gcs FileIO), and `tributary cloud`
// over the same catalog serves them to a kgo consumer group and hands the
// FileIO settings to engines through its REST catalog.
func TestGCSEdgeToCloud(t *testing.T) {
	endpoint := startFakeGCS(t)
	warehouse := "gs://" + gcsBucket + "/warehouse"
	storeEdgeToCloud(t, warehouse, gcsStorage(endpoint), gcsProps(endpoint), nil)
}

// storeEdgeToCloud is TestGCSEdgeToCloud's body for a warehouse on any
// store: storage is the storage section of both configs, props the FileIO
// properties iceberg-go reads the table with, engineProps the ones an
// engine brings to the cloud's REST catalog (secrets it hands out to none).
func storeEdgeToCloud(t *testing.T, warehouse, storage string, props, engineProps map[string]string) {
	dir := t.TempDir()
	cfg := edgeConfig(t, dir, "store-edge", fmt.Sprintf("catalog:\n  uri: sqlite://%s/catalog.db\n  warehouse: %s\n%skafka:\n  addr: 127.0.0.1:0\n",
		dir, warehouse, storage))
	p := startEdge(t, dir, cfg)
	ctx := context.Background()
	l := newLedger()
	mc, err := mqttClient(ctx, p.MQTT, "store-mqtt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publishN(ctx, mc, l, "store-mqtt", 0, 300); err != nil {
		t.Fatal(err)
	}
	mc.Disconnect(&paho.Disconnect{})
	produceKafka(t, p.Kafka, "kgo", 700, nil)
	read := func() []*tributary.Record { return readTableProps(t, dir, "factory.telemetry", props) }
	waitFor(t, 60*time.Second, "1000 rows in the table", func() bool { return len(read()) >= 1000 })
	p.stop()
	rows := read()
	if len(rows) != 1000 {
		t.Fatalf("table has %d rows, want 1000", len(rows))
	}
	checkDense(t, rows)
	want := map[int32][]*tributary.Record{}
	for _, r := range rows {
		want[r.Partition] = append(want[r.Partition], r)
	}
	for _, rs := range want {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	}

	cloudCfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf(`role: cloud
data_dir: %[1]s
catalog:
  uri: sqlite://%[1]s/catalog.db
  warehouse: %[2]s
  addr: 127.0.0.1:0
kafka:
  addr: 127.0.0.1:0
pulsar:
  addr: ""
maintenance:
  enabled: false
%[3]s`, dir, warehouse, storage)), 0o644); err != nil {
		t.Fatal(err)
	}
	cloud := startProc(t, dir, "cloud", "-config", cloudCfg)
	// An engine given only the REST catalog's address reads the files: the
	// store's FileIO settings come with GET /v1/config.
	rc, err := restcat.NewCatalog(ctx, "tributary", "http://"+cloud.Catalog, restcat.WithAdditionalProps(engineProps))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := rc.LoadTable(ctx, table.Identifier{"factory", "telemetry"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(scanAll(t, tbl)); n != 1000 {
		t.Fatalf("iceberg-go through the cloud's REST catalog reads %d rows, want 1000", n)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cloud.CloudKafka), kgo.ConsumerGroup("g-store"), kgo.ConsumeTopics("factory.telemetry"),
		kgo.FetchMaxBytes(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	got := pollKgo(t, cl, 1000, 60*time.Second)
	cl.Close()
	checkExactlyOnce(t, "kgo", want, got)
}

// TestGCSCrash and TestAzureCrash: the spine's kill -9 test (three rounds
// under load) with the warehouse on each emulator: nothing acknowledged is
// lost or duplicated.
func TestGCSCrash(t *testing.T) {
	endpoint := startFakeGCS(t)
	storeCrash(t, "gs://"+gcsBucket+"/warehouse", gcsStorage(endpoint), gcsProps(endpoint))
}

func storeCrash(t *testing.T, warehouse, storage string, props map[string]string) {
	dir := t.TempDir()
	cfg := edgeConfig(t, dir, "store-crash", fmt.Sprintf("catalog:\n  uri: sqlite://%s/catalog.db\n  warehouse: %s\n%s", dir, warehouse, storage))
	crashRounds(t, 3, func() *proc { return startEdge(t, dir, cfg) },
		func() []*tributary.Record { return readTableProps(t, dir, "factory.telemetry", props) })
	if loc := loadSQLiteTable(t, dir+"/catalog.db", "factory.telemetry", props).Location(); strings.HasPrefix(warehouse, "azblob://") &&
		!strings.HasPrefix(loc, "abfss://") {
		t.Fatalf("table location %s, want the abfss:// form", loc)
	}
}
