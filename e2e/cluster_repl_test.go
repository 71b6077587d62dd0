package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
)

// replCluster is three `tributary edge` processes on loopback sharing one
// SQLite catalog and file warehouse (as nodes of one site share a
// catalog), each with its own WAL and replica stores, gossiping with the
// fast "local" profile, replication factor 2, a 2s takeover grace and the
// test hooks on (TRIBUTARY_TEST_HOOKS=1, see README "Testing").
type replCluster struct {
	t      *testing.T
	base   string
	shared string
	commit time.Duration
	// grace is the takeover grace ("" = 2s).
	grace string
	// pinGossip restarts a node on the gossip address it had, so that its
	// peers see the same member come back at once (not a new one whose
	// address conflicts with the old one until that is declared dead).
	pinGossip bool
	// extra, when set, is YAML appended to node id's config: first keys
	// of the cluster section (indented two spaces), then other sections.
	extra func(id string) string

	mu    sync.Mutex
	nodes map[string]*proc
	down  map[string]bool // killed: load clients avoid it
}

func newReplCluster(t *testing.T) *replCluster { return newReplClusterCommit(t, 200*time.Millisecond) }

// newReplClusterCommit is newReplCluster with the uplink's commit interval.
func newReplClusterCommit(t *testing.T, commit time.Duration) *replCluster {
	return newReplClusterExtra(t, commit, nil)
}

// newReplClusterExtra is newReplClusterCommit with extra configuration
// (replCluster.extra).
func newReplClusterExtra(t *testing.T, commit time.Duration, extra func(id string) string) *replCluster {
	t.Setenv("TRIBUTARY_TEST_HOOKS", "1")
	base := t.TempDir()
	c := &replCluster{t: t, base: base, shared: filepath.Join(base, "shared"), commit: commit, extra: extra,
		nodes: map[string]*proc{}, down: map[string]bool{}}
	c.start("n1")
	c.start("n2", gossipAddr(t, c.node("n1")))
	c.start("n3", gossipAddr(t, c.node("n1")))
	c.waitAlive("n1", "n2", "n3")
	return c
}

// start starts (or restarts, on its old data directory) node id.
func (c *replCluster) start(id string, join ...string) *proc {
	t := c.t
	dir := filepath.Join(c.base, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	js := ""
	for _, j := range join {
		js += fmt.Sprintf("    - %q\n", j)
	}
	if js == "" {
		js = "    []\n"
	}
	gossip := "127.0.0.1:0"
	c.mu.Lock()
	if old := c.nodes[id]; c.pinGossip && old != nil {
		gossip = old.Gossip
	}
	c.mu.Unlock()
	cfg := fmt.Sprintf(`node_id: %s
data_dir: %s
catalog:
  uri: sqlite://%s/catalog.db
  warehouse: file://%s/warehouse
mqtt:
  addr: 127.0.0.1:0
  routes:
    - {filter: "factory/#", stream: factory.telemetry}
uplink:
  commit_interval: %s
maintenance:
  enabled: false
http_addr: 127.0.0.1:0
cluster:
  gossip_addr: %s
  gossip_profile: local
  replication_factor: 2
  replication_timeout: 2s
  takeover_grace: %s
  owner_lease: 2s
  join:
%s`, id, dir, c.shared, c.shared, c.commit, gossip, cmp.Or(c.grace, "2s"), js)
	if c.extra != nil {
		cfg += c.extra(id)
	}
	path := filepath.Join(c.base, id+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEdge(t, dir, path)
	c.mu.Lock()
	c.nodes[id] = p
	delete(c.down, id)
	c.mu.Unlock()
	return p
}

func (c *replCluster) node(id string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// kill sends SIGKILL to node id; load clients move to the others.
func (c *replCluster) kill(id string) {
	c.mu.Lock()
	c.down[id] = true
	p := c.nodes[id]
	c.mu.Unlock()
	p.kill()
}

// waitAlive waits until every running node sees ids alive with a peer
// address.
func (c *replCluster) waitAlive(ids ...string) {
	c.t.Helper()
	waitFor(c.t, 30*time.Second, fmt.Sprintf("%v alive with peer addresses on every node", ids), func() bool {
		for _, p := range c.running() {
			st := clusterPeers(c.t, p)
			for _, id := range ids {
				if st[id].State != "alive" || st[id].Peer == "" {
					return false
				}
			}
		}
		return true
	})
}

func (c *replCluster) running() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*proc
	for id, p := range c.nodes {
		if !c.down[id] {
			out = append(out, p)
		}
	}
	return out
}

type peerMember struct {
	State string `json:"state"`
	Peer  string `json:"peer"`
}

// clusterPeers is GET /cluster of p with each member's state and peer.
func clusterPeers(t *testing.T, p *proc) map[string]peerMember {
	t.Helper()
	var st struct {
		Members []struct {
			ID string `json:"id"`
			peerMember
		} `json:"members"`
	}
	resp, err := http.Get("http://" + p.HTTP + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	out := map[string]peerMember{}
	for _, m := range st.Members {
		out[m.ID] = m.peerMember
	}
	return out
}

// pubLoad runs QoS 1 publishers, perNode per node, each publishing in
// order until stop; a publisher whose node fails reconnects to the next
// running node and goes on with the next id.
type pubLoad struct {
	l    *ledger
	stop chan struct{}
	wg   sync.WaitGroup
}

func (c *replCluster) startLoad(perNode int) *pubLoad {
	ld := &pubLoad{l: newLedger(), stop: make(chan struct{})}
	ids := []string{"n1", "n2", "n3"}
	for i, home := range ids {
		for k := 0; k < perNode; k++ {
			client := fmt.Sprintf("pub-%s-%d", home, k)
			ld.wg.Go(func() { c.publishLoop(ld, client, i) })
		}
	}
	return ld
}

func (c *replCluster) publishLoop(ld *pubLoad, client string, home int) {
	ctx := context.Background()
	ids := []string{"n1", "n2", "n3"}
	seq := 0
	for n := home; ; n = (n + 1) % len(ids) {
		c.mu.Lock()
		p, down := c.nodes[ids[n]], c.down[ids[n]]
		c.mu.Unlock()
		if down {
			continue
		}
		cl, err := mqttClient(ctx, p.MQTT, client)
		if err != nil {
			select {
			case <-ld.stop:
				return
			case <-time.After(50 * time.Millisecond): // back off before the next node
			}
			continue
		}
		for {
			select {
			case <-ld.stop:
				cl.Disconnect(&paho.Disconnect{})
				return
			default:
			}
			done, err := publishN(ctx, cl, ld.l, client, seq, 1)
			seq++ // a failed publish keeps its id, unacknowledged
			if err != nil || done != 1 {
				break
			}
		}
		cl.Disconnect(&paho.Disconnect{})
	}
}

// finish stops the publishers and returns the ledger.
func (ld *pubLoad) finish() *ledger {
	close(ld.stop)
	ld.wg.Wait()
	return ld.l
}

// ackedIDs lists the ids whose PUBACK arrived.
func (l *ledger) ackedIDs() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for id, m := range l.msgs {
		if m.Acked {
			out[id] = true
		}
	}
	return out
}

// rowID is the ledger id in a row's payload ({"id":"...",...}).
func rowID(r *tributary.Record) string {
	v := string(r.Value)
	i := strings.Index(v, `"id":"`)
	if i < 0 {
		return ""
	}
	v = v[i+6:]
	if j := strings.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return ""
}

// checkExactlyOnce waits until every acked id is in the table, then checks
// that no id (acked or not) is there twice and offsets are dense. It
// returns the rows.
func (c *replCluster) checkExactlyOnce(acked map[string]bool) []*tributary.Record {
	t := c.t
	t.Helper()
	var rows []*tributary.Record
	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		rows = readTable(t, c.shared, "factory.telemetry")
		seen := map[string]int{}
		for _, r := range rows {
			seen[rowID(r)]++
		}
		missing = missing[:0]
		for id := range acked {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			for id, n := range seen {
				if n > 1 {
					t.Fatalf("message %s is in the table %d times", id, n)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			t.Fatalf("%d acknowledged messages not in the table after 60s, e.g. %v\n%s", len(missing), missing[:min(5, len(missing))], c.logs())
		}
		time.Sleep(300 * time.Millisecond)
	}
	checkDense(t, rows)
	return rows
}

func (c *replCluster) logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for id, p := range c.nodes {
		fmt.Fprintf(&b, "---- %s ----\n%s\n", id, lastLines(p.logs(), 60))
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// metric is the value of one metric family on p (summed over labels).
func metric(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	v, _ := scrapeMetrics(t, p)
	return v[name]
}

// TestClusterReplicationKill: (a) under QoS 1 load spread over three nodes,
// kill -9 one; its replica holder takes its partition over, clients move
// to the survivors, and every acknowledged message is in the table exactly
// once with dense offsets; (b) the killed node restarts, finds its
// partition owned by the taker, uploads nothing twice and serves again on
// a fresh partition.
func TestClusterReplicationKill(t *testing.T) {
	c := newReplCluster(t)
	ld := c.startLoad(2)
	waitFor(t, 30*time.Second, "load on every node", func() bool {
		for _, p := range c.running() {
			if metric(t, p, "tributary_replicated_records_total") < 50 {
				return false
			}
		}
		return true
	})
	// n3's ring successor is n1: n1 holds n3's replicas.
	c.kill("n3")
	killed := time.Now()
	n1 := c.node("n1")
	waitFor(t, 40*time.Second, "n1 to take n3's partition over", func() bool {
		return metric(t, n1, "tributary_partition_takeovers_total") >= 1
	})
	t.Logf("n1 took over n3's partition %s after kill -9", time.Since(killed).Round(100*time.Millisecond))
	before := ld.l.acked()
	waitFor(t, 20*time.Second, "publishers to go on on the survivors", func() bool { return ld.l.acked() > before+200 })
	acked := ld.finish().ackedIDs()
	rows := c.checkExactlyOnce(acked)
	if !strings.Contains(n1.logs(), "partition taken over from a dead member") {
		t.Fatalf("no takeover log line on n1:\n%s", lastLines(n1.logs(), 40))
	}
	// n3's partition: the one its rows were written to before the kill.
	p3 := int32(-1)
	for _, r := range rows {
		if r.Node == "n3" {
			p3 = r.Partition
			break
		}
	}
	if p3 < 0 {
		t.Fatal("no rows accepted by n3")
	}
	t.Logf("(a) %d acked messages, %d rows; n3 wrote partition %d", len(acked), len(rows), p3)

	// (b) n3 comes back on its old data directory.
	n3 := c.start("n3", gossipAddr(t, n1))
	c.waitAlive("n1", "n2", "n3")
	ctx := context.Background()
	cl, err := mqttClient(ctx, n3.MQTT, "after-restart")
	if err != nil {
		t.Fatal(err)
	}
	after := newLedger()
	if _, err := publishN(ctx, cl, after, "after-restart", 0, 50); err != nil {
		t.Fatalf("publish to the restarted n3: %v\n%s", err, lastLines(n3.logs(), 40))
	}
	cl.Disconnect(&paho.Disconnect{})
	all := after.ackedIDs()
	for id := range acked {
		all[id] = true
	}
	rows = c.checkExactlyOnce(all)
	offsets := map[[2]int64]bool{}
	for _, r := range rows {
		offsets[[2]int64{int64(r.Partition), r.Offset}] = true
		if strings.HasPrefix(rowID(r), "after-restart-") && r.Partition == p3 {
			t.Fatalf("the restarted n3 wrote partition %d, which n1 took over", p3)
		}
	}
	if len(offsets) != len(rows) {
		t.Fatalf("%d rows but %d distinct (partition, offset)", len(rows), len(offsets))
	}
	// The returning path ran: n3's uplink found its old partition owned by
	// n1 and dropped what its WAL still held of it instead of uploading.
	waitFor(t, 20*time.Second, "n3 to be fenced out of its old partition", func() bool {
		return metric(t, n3, "tributary_partition_fenced_total") >= 1
	})
	t.Logf("(b) %d rows after n3's restart", len(rows))
}

// TestClusterReplicationGossipLoss: under load, n2's gossip is dropped
// (test hook) until the others declare it dead, for several takeover
// graces, then restored. n2 still answers on its peer links, so nobody
// takes its partition over: no two nodes ever assign offsets of one
// partition, and nothing acknowledged is lost.
func TestClusterReplicationGossipLoss(t *testing.T) {
	c := newReplCluster(t)
	ld := c.startLoad(1)
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	waitFor(t, 30*time.Second, "load on every node", func() bool {
		return metric(t, n2, "tributary_replicated_records_total") > 50 && metric(t, n1, "tributary_replicated_records_total") > 50
	})
	isolate := func(on string) {
		resp, err := http.Post("http://"+n2.HTTP+"/debug/gossip?isolate="+on, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("isolate=%s: %s", on, resp.Status)
		}
	}
	isolate("1")
	waitFor(t, 30*time.Second, "n1 and n3 to declare n2 dead", func() bool {
		return clusterPeers(t, n1)["n2"].State == "dead" && clusterPeers(t, n3)["n2"].State == "dead"
	})
	// Hold the partition for three takeover graces under load: a takeover
	// would be a failure, so poll for one until the hold ends.
	hold := time.Now().Add(6 * time.Second)
	for time.Now().Before(hold) {
		for _, p := range []*proc{n1, n2, n3} {
			if v := metric(t, p, "tributary_partition_takeovers_total"); v != 0 {
				t.Fatalf("a takeover happened on gossip loss alone:\n%s", c.logs())
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// n3 holds n2's replicas (the ring's next after n2) and checked n2's
	// data link.
	if !strings.Contains(n3.logs(), "still answers on its data link") {
		t.Fatalf("n3 did not check n2's data link:\n%s", lastLines(n3.logs(), 40))
	}
	isolate("0")
	c.waitAlive("n1", "n2", "n3")
	before := ld.l.acked()
	waitFor(t, 20*time.Second, "load after healing", func() bool { return ld.l.acked() > before+100 })
	acked := ld.finish().ackedIDs()
	rows := c.checkExactlyOnce(acked)
	byPart := map[int32]map[string]bool{}
	for _, r := range rows {
		if byPart[r.Partition] == nil {
			byPart[r.Partition] = map[string]bool{}
		}
		byPart[r.Partition][r.Node] = true
	}
	for p, nodes := range byPart {
		if len(nodes) != 1 {
			t.Fatalf("partition %d has rows accepted by %v: two nodes assigned its offsets", p, nodes)
		}
	}
	for _, p := range []*proc{n1, n2, n3} {
		for _, m := range []string{"tributary_partition_takeovers_total", "tributary_replication_fenced_total", "tributary_partition_fenced_total"} {
			if v := metric(t, p, m); v != 0 {
				t.Fatalf("%s = %v on %s", m, v, p.HTTP)
			}
		}
	}
	t.Logf("%d acked messages, %d rows in %d partitions", len(acked), len(rows), len(byPart))
}
