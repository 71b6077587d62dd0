package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/tables"
)

// ownershipCluster is three edge processes sharing one SQLite catalog and
// one file warehouse (as edge nodes share the cloud's catalog), gossiping
// on loopback.
type ownershipCluster struct {
	t    *testing.T
	base string
	cat  *tables.Catalog
}

// start runs node id with its data dir under base; interval is its commit
// interval.
func (c *ownershipCluster) start(id, interval string, join ...string) *proc {
	c.t.Helper()
	dir := filepath.Join(c.base, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	joins := ""
	for _, j := range join {
		joins += fmt.Sprintf("\n    - %s", j)
	}
	cfg := fmt.Sprintf(`node_id: %[1]s
data_dir: %[2]s
catalog:
  uri: sqlite://%[3]s/catalog.db
  warehouse: file://%[3]s/warehouse
mqtt:
  addr: 127.0.0.1:0
  routes:
    - {filter: "own/#", stream: own.kafka}
kafka:
  addr: 127.0.0.1:0
http_addr: 127.0.0.1:0
uplink:
  commit_interval: %[4]s
maintenance:
  enabled: false
cluster:
  gossip_addr: 127.0.0.1:0
  gossip_profile: local
  join:%[5]s
`, id, dir, c.base, interval, joins)
	if joins == "" {
		cfg = strings.Replace(cfg, "  join:\n", "", 1)
	}
	path := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return startEdge(c.t, dir, path)
}

func (c *ownershipCluster) mark(stream string, p int32) int64 {
	c.t.Helper()
	tb, err := c.cat.LoadTable(context.Background(), stream)
	if err != nil {
		c.t.Fatal(err)
	}
	return tables.HighWater(tb, p)
}

// metadataPartition asks p's Kafka listener for topic's Metadata and
// returns partition part's leader broker id and leader epoch.
func metadataPartition(t *testing.T, p *proc, topic string, part int32) (leader, epoch int32) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = true
	for _, mt := range metadataOf(t, p, req).Topics {
		for _, mp := range mt.Partitions {
			if mp.Partition == part {
				return mp.Leader, mp.LeaderEpoch
			}
		}
	}
	return -1, -1
}

// metadataOf sends req to p's Kafka listener only.
func metadataOf(t *testing.T, p *proc, req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*kmsg.MetadataResponse)
}

// produceTo sends values to partition part through cl and returns their
// offsets.
func produceTo(t *testing.T, cl *kgo.Client, topic string, part int32, values ...string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for _, v := range values {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Value: []byte(v)})
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, part, err)
	}
	var offs []int64
	for _, r := range res {
		if r.Record.Partition != part {
			t.Fatalf("record went to partition %d, want %d", r.Record.Partition, part)
		}
		offs = append(offs, r.Record.Offset)
	}
	return offs
}

func valuesN(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// TestClusterOwnershipFollowsTakeOver: three edge nodes share a catalog. A
// kgo producer writes partition p, owned by n1, whose commit interval is
// long so that its last records are still only in its WAL when it is
// killed (-9). Partition p is then taken over by n2 through the catalog
// (what a replica holder does when n1 is declared dead). Then:
//   - the live nodes' Metadata names n2 as p's leader with leader epoch 1, so
//     the same producer follows p to n2, and its records continue at the
//     table's mark densely;
//   - n1 restarts: its uplink's commit of p is fenced (error log, metric
//     tributary_partition_fenced_total), its uncommitted records of p are
//     dropped, never committed; its next records go to a new partition;
//   - the table holds p's offsets exactly once and densely: n1's committed
//     records, then n2's.
func TestClusterOwnershipFollowsTakeOver(t *testing.T) {
	base := t.TempDir()
	cat, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(base, "catalog.db"),
		Warehouse: "file://" + filepath.Join(base, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	c := &ownershipCluster{t: t, base: base, cat: cat}
	n1 := c.start("n1", "1h")
	n2 := c.start("n2", "200ms", gossipAddr(t, n1))
	n3 := c.start("n3", "200ms", gossipAddr(t, n1))
	waitFor(t, 20*time.Second, "every node to see three alive members", func() bool {
		for _, p := range []*proc{n1, n2, n3} {
			ms := members(t, p)
			for _, id := range []string{"n1", "n2", "n3"} {
				if ms[id].State != "alive" {
					return false
				}
			}
		}
		return true
	})
	const topic = "own.kafka"
	// n1 creates the stream and allocates its partition.
	lead, _ := metadataPartition(t, n1, topic, 0)
	if lead != kafka.BrokerID("n1") {
		t.Fatalf("partition 0 led by broker %d, want n1 (%d)", lead, kafka.BrokerID("n1"))
	}
	const p = int32(0)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n1.Kafka, n2.Kafka, n3.Kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// n1's first pass commits what it has at once; later records wait for
	// its (long) interval.
	first := valuesN("a", 20)
	if offs := produceTo(t, cl, topic, p, first...); offs[0] != 0 || offs[19] != 19 {
		t.Fatalf("offsets on n1: %v", offs)
	}
	waitFor(t, 20*time.Second, "n1's first commit", func() bool { return c.mark(topic, p) > 0 })
	m1 := c.mark(topic, p)
	if offs := produceTo(t, cl, topic, p, valuesN("b", 5)...); offs[0] != 20 {
		t.Fatalf("offsets on n1: %v", offs)
	}
	uncommitted := 25 - m1
	t.Logf("n1 committed [0,%d); %d records only in its WAL", m1, uncommitted)
	if uncommitted < 5 {
		t.Fatalf("n1 committed %d records after its first pass (interval 1h)", m1)
	}

	n1.kill()
	epoch, err := cat.TakeOver(context.Background(), topic, p, "n1", "n2")
	if err != nil || epoch != 1 {
		t.Fatalf("take over: %d, %v", epoch, err)
	}
	for _, n := range []*proc{n2, n3} {
		if lead, ep := metadataPartition(t, n, topic, p); lead != kafka.BrokerID("n2") || ep != 1 {
			t.Fatalf("Metadata of %s: partition %d led by %d at epoch %d, want n2 (%d) at 1", n.dataDir, p, lead, ep, kafka.BrokerID("n2"))
		}
	}
	// The producer follows the partition to n2; offsets continue at the mark.
	third := valuesN("c", 10)
	offs := produceTo(t, cl, topic, p, third...)
	for i, o := range offs {
		if o != m1+int64(i) {
			t.Fatalf("offsets after the take-over: %v, want from %d", offs, m1)
		}
	}
	waitFor(t, 20*time.Second, "n2 to commit p", func() bool { return c.mark(topic, p) == m1+10 })

	// n1 returns: fenced, drops its uncommitted records of p, moves on.
	n1 = c.start("n1", "200ms", gossipAddr(t, n2))
	waitFor(t, 20*time.Second, "n1's fence", func() bool {
		v, _ := scrapeMetrics(t, n1)
		return v["tributary_partition_fenced_total"] == 1
	})
	if !strings.Contains(n1.logs(), "partition FENCED") || !strings.Contains(n1.logs(), fmt.Sprintf("dropped_records=%d", uncommitted)) {
		t.Fatalf("no fence log line with dropped_records=%d:\n%s", uncommitted, n1.logs())
	}
	// n1's next record (an MQTT publish routed to the stream) gets a new
	// partition of n1's, which Kafka Metadata then lists with n1 leading.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mc, err := mqttClient(ctx, n1.MQTT, "after-fence")
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Disconnect(&paho.Disconnect{})
	if pr, err := mc.Publish(ctx, &paho.Publish{Topic: "own/x", QoS: 1, Payload: []byte("d-0")}); err != nil || pr.ReasonCode >= 0x80 {
		t.Fatalf("publish to n1 after the fence: %v %+v", err, pr)
	}
	owners, err := cat.Owners(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	q := int32(-1)
	for part, o := range owners {
		if o.Node == "n1" {
			q = part
		}
	}
	if q < 0 || q == p || owners[p] != (tables.Ownership{Node: "n2", Epoch: 1}) {
		t.Fatalf("owners after n1's new allocation: %v", owners)
	}
	// n3 learns n1's new partition from n1's gossiped metadata (re-read
	// every couple of seconds): wait for it.
	waitFor(t, 20*time.Second, fmt.Sprintf("n3's Metadata to list n1's new partition %d led by n1 at epoch 0", q), func() bool {
		lead, ep := metadataPartition(t, n3, topic, q)
		return lead == kafka.BrokerID("n1") && ep == 0
	})
	waitFor(t, 20*time.Second, "n1 to commit its new partition", func() bool { return c.mark(topic, q) == 1 })
	if m := c.mark(topic, p); m != m1+10 {
		t.Fatalf("p's mark moved to %d", m)
	}

	rows, err := cat.ScanSorted(context.Background(), topic, tables.ScanOptions{Partition: p})
	if err != nil {
		t.Fatal(err)
	}
	want := append(first[:m1:m1], third...)
	if len(rows) != len(want) {
		t.Fatalf("partition %d holds %d rows, want %d", p, len(rows), len(want))
	}
	for i, r := range rows {
		node := "n1"
		if int64(i) >= m1 {
			node = "n2"
		}
		if r.Offset != int64(i) || string(r.Value) != want[i] || r.Node != node {
			t.Fatalf("partition %d row %d: offset %d value %q node %s; want %d %q %s", p, i, r.Offset, r.Value, r.Node, i, want[i], node)
		}
	}
}
