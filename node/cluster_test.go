package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary/cluster"
)

// testNodeConfig is a cluster node on loopback ports with fast gossip.
func testNodeConfig(t *testing.T, id string, join ...string) Config {
	var cfg Config
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.MQTT.Addr = "127.0.0.1:0"
	cfg.Kafka.Addr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	off := false
	cfg.Maintenance.Enabled = &off
	cfg.Cluster.GossipAddr = "127.0.0.1:0"
	cfg.Cluster.GossipProfile = "local"
	cfg.Cluster.Join = join
	return cfg
}

func startTestNode(t *testing.T, id string, join ...string) (*Node, func()) {
	t.Helper()
	cfg := testNodeConfig(t, id, join...)
	ctx := context.Background()
	n, err := New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		n.Close(ctx)
		t.Fatal(err)
	}
	var once sync.Once
	closeNode := func() { once.Do(func() { n.Close(context.Background()) }) }
	t.Cleanup(closeNode)
	return n, closeNode
}

func getCluster(t *testing.T, n *Node) ClusterStatus {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st ClusterStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestClusterTwoNodes: two nodes gossip; /cluster, the metrics and the Kafka
// brokers list both, with the peer's gossiped listeners and partitions.
func TestClusterTwoNodes(t *testing.T) {
	a, _ := startTestNode(t, "edge-a")
	b, closeB := startTestNode(t, "edge-b", a.GossipAddr())
	if _, _, err := b.book.Own(context.Background(), "plant.line"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := getCluster(t, a)
		var peer *cluster.Member
		for i, m := range st.Members {
			if m.ID == "edge-b" {
				peer = &st.Members[i]
			}
		}
		if st.Gossip && len(st.Members) == 2 && peer != nil && peer.State == cluster.Alive &&
			peer.Kafka == b.KafkaAddr() && peer.HTTP == b.HTTPAddr() && peer.MQTT == b.MQTTAddr() && peer.Peer == b.PeerAddr() && peer.Peer != "" && len(peer.Partitions) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's /cluster: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	brokers := a.kb.Brokers()
	if len(brokers) != 2 || brokers[1].NodeID != "edge-b" || brokers[1].Host != "127.0.0.1" || brokers[1].Port == 0 {
		t.Fatalf("brokers: %+v", brokers)
	}
	resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `tributary_cluster_members{state="alive"} 2`) ||
		!strings.Contains(string(body), `tributary_cluster_transitions_total{to="alive"} 2`) {
		t.Fatalf("metrics lack the cluster gauges:\n%s", grepLines(string(body), "tributary_cluster"))
	}
	// b shuts down: a sees it leave, and it is no broker any more.
	closeB()
	deadline = time.Now().Add(10 * time.Second)
	for len(a.kb.Brokers()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after b left: %+v", getCluster(t, a))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range getCluster(t, a).Members {
		if m.ID == "edge-b" && m.State != cluster.Left {
			t.Fatalf("b is %s, want left", m.State)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
