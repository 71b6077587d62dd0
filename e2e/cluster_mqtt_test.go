package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// labelledMetric is the value of one sample of p's /metrics, e.g.
// `tributary_mqtt_forwarded_total{direction="in"}` (0 when absent).
func labelledMetric(t *testing.T, p *proc, sample string) float64 {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const (
	fwdIn  = `tributary_mqtt_forwarded_total{direction="in"}`
	fwdOut = `tributary_mqtt_forwarded_total{direction="out"}`
	remote = `tributary_mqtt_remote_subscriptions`
)

// collector gathers the publishes a paho client receives.
type collector struct {
	mu   sync.Mutex
	msgs []*paho.Publish
}

func (c *collector) add(p paho.PublishReceived) (bool, error) {
	c.mu.Lock()
	c.msgs = append(c.msgs, p.Packet)
	c.mu.Unlock()
	return true, nil
}

func (c *collector) byTopicPrefix(prefix string) []*paho.Publish {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*paho.Publish
	for _, m := range c.msgs {
		if strings.HasPrefix(m.Topic, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// subscriber connects a paho MQTT 5 client that collects what it receives
// and subscribes it to filters at QoS 1.
func subscriber(t *testing.T, addr, id string, filters ...string) *collector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	col := &collector{}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){col.add}})
	if ca, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect %s: %v %+v", id, err, ca)
	}
	t.Cleanup(func() { c.Disconnect(&paho.Disconnect{}) })
	for _, f := range filters {
		sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: f, QoS: 1}}})
		if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] >= 0x80 {
			t.Fatalf("subscribe %s %s: %v %+v", id, f, err, sa)
		}
	}
	return col
}

// clusterLogs is p's log lines about the MQTT namespace and peer links.
func clusterLogs(p *proc) string {
	var out []string
	for _, l := range strings.Split(p.logs(), "\n") {
		if strings.Contains(l, "mqtt cluster") || strings.Contains(l, "component=peer") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// gossipNodes starts one `tributary dev` per id, each joining the first
// (local gossip profile), and waits until every node sees all alive.
func gossipNodes(t *testing.T, ids ...string) []*proc {
	t.Helper()
	return gossipNodesWith(t, nil, ids...)
}

// gossipNodesWith is gossipNodes with more flags for some nodes (by id).
func gossipNodesWith(t *testing.T, extra map[string][]string, ids ...string) []*proc {
	t.Helper()
	base := t.TempDir()
	var nodes []*proc
	for i, id := range ids {
		args := []string{"--node-id", id, "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local"}
		if i > 0 {
			args = append(args, "--join", gossipAddr(t, nodes[0]))
		}
		args = append(args, extra[id]...)
		nodes = append(nodes, startDev(t, filepath.Join(base, id), args...))
	}
	waitFor(t, 20*time.Second, "every node to see all members alive", func() bool {
		for _, p := range nodes {
			ms := members(t, p)
			for _, id := range ids {
				if ms[id].State != "alive" {
					return false
				}
			}
		}
		return true
	})
	return nodes
}

// TestClusterMQTTNamespace runs three `tributary dev` processes gossiping
// on loopback and checks the cluster-wide MQTT namespace with real
// clients: a QoS 1 subscriber on B gets every acknowledged QoS 1 publish
// made on A and C, in per-publisher order, and nothing is forwarded to a
// node without a matching subscriber (forwarded metrics); a retained
// message published on A is delivered as retained to mosquitto_sub on C;
// subscribers of one shared group on A and B together get each message
// once, and both get some.
func TestClusterMQTTNamespace(t *testing.T) {
	nodes := gossipNodes(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]

	// 1. Cross-node QoS 1 in per-publisher order; only B gets forwards.
	subscribed := time.Now()
	subB := subscriber(t, b.MQTT, "sub-b", "factory/#")
	waitFor(t, 10*time.Second, "A and C to learn B's subscription", func() bool {
		return labelledMetric(t, a, remote) == 1 && labelledMetric(t, c, remote) == 1
	})
	t.Logf("interest known on A and C %s after B's SUBSCRIBE was sent (upper bound: includes /metrics polling)",
		time.Since(subscribed).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 200
	l := newLedger()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, p := range []*proc{a, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "pub-" + filepath.Base(p.dataDir)
			pc, err := mqttClient(ctx, p.MQTT, id)
			if err != nil {
				errs <- err
				return
			}
			defer pc.Disconnect(&paho.Disconnect{})
			if _, err := publishN(ctx, pc, l, id, 0, n); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := l.acked(); got != 2*n {
		t.Fatalf("%d of %d publishes acked", got, 2*n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(subB.byTopicPrefix("factory/")) < 2*n {
		if time.Now().After(deadline) {
			t.Fatalf("B's subscriber got %d of %d publishes; forwarded out A %v C %v, in B %v\nA:\n%s\nB:\n%s",
				len(subB.byTopicPrefix("factory/")), 2*n, labelledMetric(t, a, fwdOut), labelledMetric(t, c, fwdOut),
				labelledMetric(t, b, fwdIn), clusterLogs(a), clusterLogs(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := subB.byTopicPrefix("factory/")
	if len(got) != 2*n {
		t.Fatalf("B's subscriber got %d publishes, want %d", len(got), 2*n)
	}
	next := map[string]int{}
	for _, m := range got {
		if m.QoS != 1 {
			t.Fatalf("delivered at QoS %d", m.QoS)
		}
		dev, seq := m.Properties.User.Get("device"), m.Properties.User.Get("seq")
		if seq != strconv.Itoa(next[dev]) {
			t.Fatalf("from %s: got seq %s, want %d (per-publisher order)", dev, seq, next[dev])
		}
		next[dev]++
		i, _ := strconv.Atoi(seq)
		want := l.msgs[fmt.Sprintf("%s-%06d", dev, i)]
		if want == nil || string(want.Payload) != string(m.Payload) || want.Topic != m.Topic {
			t.Fatalf("message %s-%s: payload or topic differ", dev, seq)
		}
	}
	for _, p := range []*proc{a, c} {
		// "out" counts B's acknowledgements, which may arrive a moment
		// after B delivered the last publish.
		deadline := time.Now().Add(10 * time.Second)
		for labelledMetric(t, p, fwdOut) < float64(n) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if v := labelledMetric(t, p, fwdOut); v != n {
			t.Errorf("%s forwarded out %v, want %d (each publish once, to B only)", p.dataDir, v, n)
		}
		if v := labelledMetric(t, p, fwdIn); v != 0 {
			t.Errorf("%s forwarded in %v, want 0: it has no subscriber", p.dataDir, v)
		}
	}
	if v := labelledMetric(t, b, fwdIn); v != 2*n {
		t.Errorf("B forwarded in %v, want %d", v, 2*n)
	}

	// Cross-node delivery latency, one message at a time: PUBLISH on A to
	// receipt on B (QoS 1: includes A's WAL fsync).
	pl, err := mqttClient(ctx, a.MQTT, "latency")
	if err != nil {
		t.Fatal(err)
	}
	var lat []time.Duration
	for i := range 20 {
		t0 := time.Now()
		if _, err := pl.Publish(ctx, &paho.Publish{Topic: "factory/latency", QoS: 1, Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
		for len(subB.byTopicPrefix("factory/latency")) != i+1 { // polled finely: waitFor's 20ms step would swamp it
			if time.Since(t0) > 10*time.Second {
				t.Fatalf("latency probe %d not delivered on B", i)
			}
			time.Sleep(100 * time.Microsecond)
		}
		lat = append(lat, time.Since(t0))
	}
	pl.Disconnect(&paho.Disconnect{})
	slices.Sort(lat)
	t.Logf("publish on A to delivery on B: median %s, max %s (20 sequential QoS 1)", lat[len(lat)/2].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))

	// 2. Retained on A, seen as retained by mosquitto_sub on C.
	pa, err := mqttClient(ctx, a.MQTT, "retainer")
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Disconnect(&paho.Disconnect{})
	if pr, err := pa.Publish(ctx, &paho.Publish{Topic: "config/line1", QoS: 1, Retain: true, Payload: []byte("speed=3")}); err != nil || pr.ReasonCode >= 0x80 {
		t.Fatalf("retained publish: %v %+v", err, pr)
	}
	retainedOn(t, c, "config/line1", "speed=3", 20*time.Second)

	// 3. One shared group across A and B: each message once, both get some.
	// A barrier topic both also subscribe to: once each has the barrier from
	// every publishing node, it has everything published before (FIFO).
	shA := subscriber(t, a.MQTT, "share-a", "$share/g/jobs/#", "barrier")
	shB := subscriber(t, b.MQTT, "share-b", "$share/g/jobs/#", "barrier")
	waitFor(t, 10*time.Second, "C to learn the group on A and B", func() bool {
		return labelledMetric(t, c, remote) == 1+2+2 // sub-b's factory/#, the group, two barriers
	})
	const m = 100
	pubs := map[*proc]*paho.Client{}
	for _, p := range []*proc{a, c} {
		pc, err := mqttClient(ctx, p.MQTT, "jobs-"+filepath.Base(p.dataDir))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Disconnect(&paho.Disconnect{})
		pubs[p] = pc
	}
	for i := range m {
		p := []*proc{a, c}[i%2]
		if pr, err := pubs[p].Publish(ctx, &paho.Publish{Topic: "jobs/" + strconv.Itoa(i), QoS: 1, Payload: []byte(strconv.Itoa(i))}); err != nil || pr.ReasonCode >= 0x80 {
			t.Fatalf("job %d: %v %+v", i, err, pr)
		}
	}
	for _, pc := range pubs {
		if _, err := pc.Publish(ctx, &paho.Publish{Topic: "barrier", QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "both group members to pass the barrier", func() bool {
		return len(shA.byTopicPrefix("barrier")) == 2 && len(shB.byTopicPrefix("barrier")) == 2
	})
	seen := map[string]int{}
	ja, jb := shA.byTopicPrefix("jobs/"), shB.byTopicPrefix("jobs/")
	for _, msg := range append(ja, jb...) {
		seen[string(msg.Payload)]++
	}
	for i := range m {
		if k := seen[strconv.Itoa(i)]; k != 1 {
			t.Fatalf("job %d delivered %d times to the group (A got %d, B got %d)", i, k, len(ja), len(jb))
		}
	}
	if len(ja) == 0 || len(jb) == 0 {
		t.Fatalf("group not balanced across nodes: A got %d, B got %d", len(ja), len(jb))
	}
	t.Logf("shared group: A got %d, B got %d of %d", len(ja), len(jb), m)
}

// retainedOn runs mosquitto_sub on p for topic until it prints the
// retained message want (retain flag set) or the timeout passes.
func retainedOn(t *testing.T, p *proc, topic, want string, timeout time.Duration) {
	t.Helper()
	host, port, _ := strings.Cut(p.MQTT, ":")
	waitFor(t, timeout, "mosquitto_sub on "+p.MQTT+" to get retained "+topic, func() bool {
		out, err := exec.Command("mosquitto_sub", "-h", host, "-p", port, "-t", topic, "-q", "1",
			"-C", "1", "-W", "2", "-F", "%r %t %p").Output()
		if err != nil {
			return false // -W timeout: not there yet
		}
		if s := strings.TrimSpace(string(out)); s != "1 "+topic+" "+want {
			t.Fatalf("mosquitto_sub on %s printed %q", p.MQTT, s)
		}
		return true
	})
}

// TestClusterMQTTRestartCatchUp: B is killed (-9) and restarted on new
// ports with its data directory; it has lost its in-memory retained
// messages and sessions (mochi runs without a storage hook) but catches up
// on the retained messages from A, and a new subscriber on B gets A's
// publishes again.
func TestClusterMQTTRestartCatchUp(t *testing.T) {
	nodes := gossipNodes(t, "a", "b")
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pa, err := mqttClient(ctx, a.MQTT, "pub-a")
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Disconnect(&paho.Disconnect{})
	if pr, err := pa.Publish(ctx, &paho.Publish{Topic: "config/oven", QoS: 1, Retain: true, Payload: []byte("220C")}); err != nil || pr.ReasonCode >= 0x80 {
		t.Fatalf("retained publish: %v %+v", err, pr)
	}
	retainedOn(t, b, "config/oven", "220C", 20*time.Second)

	// B comes back on its gossip address (a new one would keep it out
	// until memberlist lets the name be reclaimed, ~20s with the local
	// profile); its other listeners, the peer one included, get new ports.
	bGossip := gossipAddr(t, b)
	b.kill()
	restarted := time.Now()
	b = startDev(t, b.dataDir, "--node-id", "b", "--gossip-addr", bGossip, "--gossip-profile", "local",
		"--join", gossipAddr(t, a))
	retainedOn(t, b, "config/oven", "220C", 30*time.Second)
	t.Logf("restarted B has A's retained message %s after its restart", time.Since(restarted).Round(100*time.Millisecond))

	sub := subscriber(t, b.MQTT, "sub-b2", "orders/#")
	waitFor(t, 20*time.Second, "A to learn the restarted B's subscription", func() bool {
		return labelledMetric(t, a, remote) == 1
	})
	if pr, err := pa.Publish(ctx, &paho.Publish{Topic: "orders/1", QoS: 1, Payload: []byte("x")}); err != nil || pr.ReasonCode >= 0x80 {
		t.Fatalf("publish: %v %+v", err, pr)
	}
	waitFor(t, 10*time.Second, "the restarted B's subscriber to get A's publish", func() bool {
		return len(sub.byTopicPrefix("orders/")) == 1
	})
}
