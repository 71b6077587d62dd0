package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/catalogtest"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
)

// SeaweedFS is an Iceberg REST catalog and S3 store Tributary did not
// write: `make deps` builds its weed binary into
// ~/.cache/tributary/seaweedfs/weed (tools/seaweedfs). Its catalog takes
// OAuth2 client credentials (the S3 access key and secret) at
// /v1/oauth/tokens, and its table bucket is the warehouse s3://BUCKET.
const (
	weedBucket = "lake"
	weedKey    = "tributarykey"
	weedSecret = "tributary-secret-0123456789"
)

type seaweed struct {
	S3, Iceberg string // http://127.0.0.1:PORT
	dir         string
	args        []string
	env         []string
	cmd         *exec.Cmd
}

// weedBin finds the weed binary `make deps` builds.
func weedBin(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("TRIBUTARY_WEED"); b != "" {
		return b
	}
	home, _ := os.UserHomeDir()
	bin := filepath.Join(home, ".cache", "tributary", "seaweedfs", "weed")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("SeaweedFS not built (`make deps` builds it into %s): %v", bin, err)
	}
	return bin
}

// startSeaweedFS runs `weed mini` on loopback ports with the table bucket
// weedBucket and the identity weedKey/weedSecret; tokenExpiry is the
// lifetime of the catalog's OAuth2 tokens in seconds (0: its default).
func startSeaweedFS(t *testing.T, tokenExpiry int) *seaweed {
	t.Helper()
	dir := t.TempDir()
	port := func() string { return portOf(freeLoopbackPort(t)) }
	s3p, icep := port(), port()
	sw := &seaweed{S3: "http://127.0.0.1:" + s3p, Iceberg: "http://127.0.0.1:" + icep, dir: dir}
	sw.args = []string{"mini", "-dir=" + dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
		"-webdav=false", "-admin.ui=false", "-s3.port=" + s3p, "-s3.port.iceberg=" + icep, "-s3.port.lance=0",
		"-s3.port.grpc=" + port(), "-master.port=" + port(), "-master.port.grpc=" + port(),
		"-filer.port=" + port(), "-filer.port.grpc=" + port(), "-volume.port=" + port(), "-volume.port.grpc=" + port(),
		"-admin.port=" + port(), "-admin.port.grpc=" + port(), "-admin.port.legacy=0", "-tableBucket=" + weedBucket}
	sw.env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+weedKey, "AWS_SECRET_ACCESS_KEY="+weedSecret)
	if tokenExpiry > 0 {
		sw.env = append(sw.env, fmt.Sprintf("ICEBERG_OAUTH_TOKEN_EXPIRY=%d", tokenExpiry))
	}
	sw.start(t)
	t.Cleanup(sw.stop)
	return sw
}

// start runs weed and waits until its catalog hands out tokens and lists
// the bucket's namespaces.
func (sw *seaweed) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(weedBin(t), sw.args...)
	cmd.Env = sw.env
	log, err := os.Create(filepath.Join(sw.dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sw.cmd = cmd
	ok := poll(120*time.Second, func() bool {
		tok, err := sw.token(weedKey, weedSecret)
		if err != nil {
			return false
		}
		req, _ := http.NewRequest("GET", sw.Iceberg+"/v1/"+weedBucket+"/namespaces", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if !ok {
		b, _ := os.ReadFile(filepath.Join(sw.dir, "weed.log"))
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Fatalf("SeaweedFS did not serve its catalog within 120s:\n%s", b)
	}
}

func (sw *seaweed) stop() {
	if sw.cmd != nil {
		sw.cmd.Process.Kill()
		sw.cmd.Wait()
		sw.cmd = nil
	}
}

// token gets an OAuth2 token from the catalog (client credentials).
func (sw *seaweed) token(id, secret string) (string, error) {
	resp, err := http.PostForm(sw.Iceberg+"/v1/oauth/tokens", url.Values{"grant_type": {"client_credentials"},
		"client_id": {id}, "client_secret": {secret}, "scope": {"catalog"}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("token: %d %s", resp.StatusCode, b)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		return "", err
	}
	return tr.AccessToken, nil
}

// storage is the storage section of a config writing to SeaweedFS's S3.
func (sw *seaweed) storage() string {
	return fmt.Sprintf("storage:\n  s3:\n    endpoint: %s\n    region: us-east-1\n    path_style: true\n    access_key_id: %s\n    secret_access_key: %s\n",
		sw.S3, weedKey, weedSecret)
}

// catalogSection is the catalog section of an edge or cloud config on
// SeaweedFS's catalog; auth is its credential, token or sigv4 lines.
func (sw *seaweed) catalogSection(auth string) string {
	return fmt.Sprintf("catalog:\n  uri: %s\n  warehouse: s3://%s\n%s", sw.Iceberg, weedBucket, auth)
}

func (sw *seaweed) credential() string {
	return fmt.Sprintf("  credential: %s:%s\n", weedKey, weedSecret)
}

// fileIO are the FileIO properties iceberg-go reads the tables with.
func (sw *seaweed) fileIO() map[string]string {
	return map[string]string{"s3.endpoint": sw.S3, "s3.region": "us-east-1", "s3.access-key-id": weedKey,
		"s3.secret-access-key": weedSecret, "s3.force-virtual-addressing": "false"}
}

// client is iceberg-go's REST client on SeaweedFS's catalog, as an engine
// would open it.
func (sw *seaweed) client(t *testing.T) catalog.Catalog {
	t.Helper()
	c, err := restcat.NewCatalog(context.Background(), "seaweedfs", sw.Iceberg, restcat.WithCredential(weedKey+":"+weedSecret),
		restcat.WithWarehouseLocation("s3://"+weedBucket), restcat.WithAdditionalProps(sw.fileIO()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rows reads a stream's table through SeaweedFS's catalog.
func (sw *seaweed) rows(t *testing.T, stream string) []*tributary.Record {
	t.Helper()
	ns, name, _ := tributary.ParseStream(stream)
	tbl, err := sw.client(t).LoadTable(context.Background(), table.Identifier{ns, name})
	if err != nil {
		return nil
	}
	return scanAll(t, tbl)
}

// TestSeaweedFSEdgesExactlyOnce: SeaweedFS is the site's catalog and
// store. Two edge nodes commit into its catalog with OAuth2 client
// credentials (tokens living 20 s, so they are refreshed during the test)
// and a third signs with SigV4; one edge is restarted mid-way. Every
// message is in the table exactly once, in dense offsets per partition.
// Then `tributary cloud` on SeaweedFS's catalog, with its own SQLite
// state, serves the table to a kgo consumer group, a Pulsar subscription
// and the HTTP read API, and remembers the group's offsets across a
// restart.
func TestSeaweedFSEdgesExactlyOnce(t *testing.T) {
	sw := startSeaweedFS(t, 20)
	ctx := context.Background()
	dirA, dirB := t.TempDir(), t.TempDir()
	cfgA := edgeConfig(t, dirA, "weed-a", sw.catalogSection(sw.credential())+sw.storage())
	cfgB := edgeConfig(t, dirB, "weed-b", sw.catalogSection(sw.credential())+sw.storage())
	a, b := startEdge(t, dirA, cfgA), startEdge(t, dirB, cfgB)
	publish := func(p *proc, client string, start, n int) {
		t.Helper()
		mc, err := mqttClient(ctx, p.MQTT, client)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := publishN(ctx, mc, newLedger(), client, start, n); err != nil {
			t.Fatal(err)
		}
		mc.Disconnect(&paho.Disconnect{})
	}
	publish(a, "weed-a", 0, 200)
	publish(b, "weed-b", 0, 200)
	waitFor(t, 90*time.Second, "400 rows in SeaweedFS's table", func() bool { return len(sw.rows(t, "factory.telemetry")) >= 400 })
	a.stop()
	a = startEdge(t, dirA, cfgA)
	publish(a, "weed-a", 200, 200)
	publish(b, "weed-b", 200, 100)
	// Past the tokens' 20 s life: the credential is exchanged again.
	waitFor(t, 90*time.Second, "700 rows in SeaweedFS's table", func() bool { return len(sw.rows(t, "factory.telemetry")) >= 700 })

	total := 700
	sigv4 := false
	dirC := t.TempDir()
	cfgC := edgeConfig(t, dirC, "weed-sigv4", sw.catalogSection("  sigv4:\n    region: us-east-1\n    service: s3\n")+sw.storage())
	if code, out := runExit(t, 60*time.Second, "config", "check", cfgC); code == 0 {
		sigv4 = true
		c := startEdge(t, dirC, cfgC)
		publish(c, "weed-sigv4", 0, 100)
		total += 100
		waitFor(t, 90*time.Second, "the SigV4 edge's rows in SeaweedFS's table", func() bool { return len(sw.rows(t, "factory.telemetry")) >= total })
		c.stop()
	} else {
		t.Logf("SeaweedFS refuses SigV4-signed catalog requests (config check exit %d): %s", code, out)
	}
	a.stop()
	b.stop()
	rows := sw.rows(t, "factory.telemetry")
	if len(rows) != total {
		t.Fatalf("SeaweedFS's table has %d rows, want %d (sigv4 edge: %v)", len(rows), total, sigv4)
	}
	parts := checkDense(t, rows)
	if len(parts) < 2 {
		t.Fatalf("partitions %v: want one per edge", parts)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[string(r.Value)] {
			t.Fatalf("payload %q twice", r.Value)
		}
		seen[string(r.Value)] = true
	}
	want := map[int32][]*tributary.Record{}
	for _, r := range rows {
		want[r.Partition] = append(want[r.Partition], r)
	}
	for _, rs := range want {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	}

	cloudDir := t.TempDir()
	cloudCfg := filepath.Join(cloudDir, "cloud.yaml")
	if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf(`role: cloud
data_dir: %s
%s  addr: 127.0.0.1:0
%skafka:
  addr: 127.0.0.1:0
pulsar:
  addr: 127.0.0.1:0
http:
  addr: 127.0.0.1:0
maintenance:
  enabled: false
`, cloudDir, sw.catalogSection(sw.credential()), sw.storage())), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := runExit(t, 60*time.Second, "config", "check", cloudCfg); code != 0 || !strings.Contains(out, "state: sqlite://"+cloudDir+"/state.db") {
		t.Fatalf("config check of the cloud on SeaweedFS: exit %d\n%s", code, out)
	}
	cloud := startProc(t, cloudDir, "cloud", "-config", cloudCfg)
	consumeFromCloud(t, cloud, want, total)
	// Engines pointed at the cloud's catalog port are sent to SeaweedFS.
	resp, err := http.Get("http://" + cloud.Catalog + "/v1/config")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), sw.Iceberg) {
		t.Fatalf("cloud /v1/config with an external catalog: %d %s", resp.StatusCode, body)
	}
	if _, err := os.Stat(filepath.Join(cloudDir, "state.db")); err != nil {
		t.Fatalf("the cloud's own state: %v", err)
	}
	cloud.stop()
	// The group's offsets are in the cloud's state.db: a restarted server
	// resumes the group at the end.
	cloud = startProc(t, cloudDir, "cloud", "-config", cloudCfg)
	var offs struct {
		Offsets []struct {
			Partition int32 `json:"partition"`
			Offset    int64 `json:"offset"`
		} `json:"offsets"`
	}
	if c := getJSON(t, fmt.Sprintf("http://%s/v1/groups/g-weed/offsets?stream=factory.telemetry", cloud.CloudHTTP), &offs); c != 200 {
		t.Fatalf("group offsets after restart: %d", c)
	}
	committed := int64(0)
	for _, o := range offs.Offsets {
		committed += o.Offset
	}
	if committed != int64(total) {
		t.Fatalf("group g-weed resumes at %d of %d after a restart (%+v)", committed, total, offs)
	}
}

// consumeFromCloud reads the stream factory.telemetry (want: its rows by
// partition) from a cloud server through a kgo consumer group (g-weed,
// offsets committed), a Pulsar subscription and the HTTP read API, each
// exactly once.
func consumeFromCloud(t *testing.T, cloud *proc, want map[int32][]*tributary.Record, total int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cloud.CloudKafka), kgo.ConsumerGroup("g-weed"), kgo.ConsumeTopics("factory.telemetry"),
		kgo.FetchMaxBytes(64<<10), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	got := pollKgo(t, cl, total, 90*time.Second)
	byPart := map[int32][]delivered{}
	for _, d := range got {
		byPart[d.partition] = append(byPart[d.partition], d)
	}
	for p, ds := range byPart {
		checkExactlyOnce(t, fmt.Sprintf("kgo partition %d", p), map[int32][]*tributary.Record{p: want[p]}, ds)
	}
	if len(got) != total {
		t.Fatalf("kgo read %d of %d", len(got), total)
	}
	if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	pc := pulsarClient(t, cloud.Pulsar)
	cons := pulsarSubscribe(t, pc, pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: "weed"})
	seen := map[[2]int64]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pulsarReceive(ctx, cons, func() bool { return len(seen) >= total }, func(m pulsar.Message) {
		id := m.ID()
		k := [2]int64{int64(id.PartitionIdx()), id.EntryID()}
		rows := want[id.PartitionIdx()]
		if seen[k] || id.EntryID() >= int64(len(rows)) || string(m.Payload()) != string(rows[id.EntryID()].Value) {
			t.Fatalf("pulsar: message %v (payload %q): duplicated, or not the table's row", id, m.Payload())
		}
		seen[k] = true
		cons.Ack(m)
	})
	if len(seen) != total {
		t.Fatalf("pulsar read %d of %d", len(seen), total)
	}

	for p, rows := range want {
		var rd httpRead
		if c := getJSON(t, fmt.Sprintf("http://%s/v1/streams/factory.telemetry/partitions/%d/records?offset=0&max_records=10000", cloud.CloudHTTP, p), &rd); c != 200 {
			t.Fatalf("http read of partition %d: %d", p, c)
		}
		if len(rd.Records) != len(rows) || rd.HighWatermark != int64(len(rows)) {
			t.Fatalf("http read of partition %d: %d records, high watermark %d, want %d", p, len(rd.Records), rd.HighWatermark, len(rows))
		}
		for i, rec := range rd.Records {
			if rec.Offset != int64(i) || string(rec.Value.bytes(t)) != string(rows[i].Value) {
				t.Fatalf("http read of partition %d at %d: %+v, table has %q", p, i, rec, rows[i].Value)
			}
		}
	}
}

// TestSeaweedFSBadInput: what is wrong with an external catalog stops
// `config check` (edge and cloud) and the start, naming the key to fix:
// an unreachable catalog, a wrong credential, an expired token, a
// warehouse (table bucket) the catalog does not have.
func TestSeaweedFSBadInput(t *testing.T) {
	sw := startSeaweedFS(t, 3) // tokens live 3 s: one expires during the test
	tok, err := sw.token(weedKey, weedSecret)
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "http://" + freeLoopbackPort(t)
	cases := []struct {
		name, catalog, want string
	}{
		{"unreachable", fmt.Sprintf("catalog:\n  uri: %s\n  warehouse: s3://%s\n%s", unreachable, weedBucket, sw.credential()),
			"catalog.uri: cannot reach the catalog"},
		{"wrong credential", sw.catalogSection(fmt.Sprintf("  credential: %s:wrong-secret\n", weedKey)), "catalog.credential:"},
		{"expired token", sw.catalogSection("  token: " + tok + "\n"), "catalog.token:"},
		{"no such bucket", fmt.Sprintf("catalog:\n  uri: %s\n  warehouse: s3://nosuchbucket\n%s", sw.Iceberg, sw.credential()), "catalog.warehouse:"},
	}
	// The token is past its life once the catalog refuses it.
	waitFor(t, 30*time.Second, "the 3 s token expires", func() bool {
		req, _ := http.NewRequest("GET", sw.Iceberg+"/v1/"+weedBucket+"/namespaces", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 401
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := edgeConfig(t, dir, "weed-bad", c.catalog+sw.storage())
			if code, out := runExit(t, 60*time.Second, "config", "check", cfg); code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("edge config check: exit %d, want an error with %q:\n%s", code, c.want, out)
			}
			if code, out := runExit(t, 60*time.Second, "edge", "-config", cfg); code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("edge start: exit %d, want an error with %q:\n%s", code, c.want, out)
			}
			cloudCfg := filepath.Join(dir, "cloud.yaml")
			if err := os.WriteFile(cloudCfg, []byte(fmt.Sprintf("role: cloud\ndata_dir: %s\n%s%s", dir, c.catalog, sw.storage())), 0o644); err != nil {
				t.Fatal(err)
			}
			if code, out := runExit(t, 60*time.Second, "config", "check", cloudCfg); code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("cloud config check: exit %d, want an error with %q:\n%s", code, c.want, out)
			}
			if code, out := runExit(t, 60*time.Second, "cloud", "-config", cloudCfg, "-catalog-addr", "127.0.0.1:0", "-kafka-addr", "127.0.0.1:0",
				"-pulsar-addr", "127.0.0.1:0"); code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("cloud start: exit %d, want an error with %q:\n%s", code, c.want, out)
			}
		})
	}
}

// TestSeaweedFSConformance runs iceberg-go's catalog conformance suite
// (catalogtest.RunCatalogTests) against SeaweedFS's catalog, as
// tables/rest's TestCatalogConformance does against Tributary's.
func TestSeaweedFSConformance(t *testing.T) {
	sw := startSeaweedFS(t, 0)
	catalogtest.RunCatalogTests(t, catalogtest.Config{
		NewCatalog:                  func(t *testing.T) catalog.Catalog { return sw.client(t) },
		SupportsNamespaceProperties: true,
	})
}
