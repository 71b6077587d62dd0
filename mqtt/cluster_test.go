package mqtt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary/internal/testkit"
)

func retainedClear(topic string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}, TopicName: topic}
}

// mesh is an in-memory stand-in for package peer: Call runs the remote
// handler and waits for its reply; calls on one link are serialised, as
// on a peer link; a link can be cut (its calls fail, as with ErrLinkDown,
// after the remote handled them when cutAfter is set, to test re-sends).
type mesh struct {
	mu       sync.Mutex
	handlers map[string]map[uint8]func(string, []byte, func([]byte, error))
	cut      map[[2]string]bool
	cutAfter map[[2]string]bool
	calls    map[uint8]int
}

var errMeshDown = errors.New("mesh: link down")

func newMesh() *mesh {
	return &mesh{handlers: map[string]map[uint8]func(string, []byte, func([]byte, error)){},
		cut: map[[2]string]bool{}, cutAfter: map[[2]string]bool{}, calls: map[uint8]int{}}
}

type meshLink struct {
	m        *mesh
	from, to string
	mu       sync.Mutex
}

func (l *meshLink) Call(ctx context.Context, typ uint8, payload []byte) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.m
	m.mu.Lock()
	key := [2]string{l.from, l.to}
	cut, after := m.cut[key], m.cutAfter[key]
	h := m.handlers[l.to][typ]
	m.calls[typ]++
	m.mu.Unlock()
	if cut && !after {
		return nil, errMeshDown
	}
	if h == nil {
		return nil, fmt.Errorf("no handler for %d on %s", typ, l.to)
	}
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	h(l.from, payload, func(b []byte, err error) { ch <- res{b, err} })
	select {
	case r := <-ch:
		if cut {
			return nil, errMeshDown // handled, but the reply was lost
		}
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *mesh) setCut(from, to string, cut, after bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cut[[2]string{from, to}] = cut
	m.cutAfter[[2]string{from, to}] = after
}

// cluster starts n servers named n1..nn, each seeing the others as peers
// (live reports whether a node is listed), joined through the mesh.
// meshTransport is one node's ClusterTransport over the in-memory mesh.
type meshTransport struct {
	tc   *testCluster
	self string
}

func (m *meshTransport) Handle(typ uint8, h func(string, []byte, func([]byte, error))) {
	mesh := m.tc.mesh
	mesh.mu.Lock()
	defer mesh.mu.Unlock()
	if mesh.handlers[m.self] == nil {
		mesh.handlers[m.self] = map[uint8]func(string, []byte, func([]byte, error)){}
	}
	mesh.handlers[m.self][typ] = h
}

func (m *meshTransport) Link(id, addr string) PeerLink {
	if m.tc == nil {
		return nil
	}
	return &meshLink{m: m.tc.mesh, from: m.self, to: id}
}

func (m *meshTransport) Peers() []ClusterPeer {
	tc := m.tc
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var out []ClusterPeer
	for _, o := range tc.nodes {
		if id := o.cfg.NodeID; id != m.self && !tc.dead[id] {
			out = append(out, ClusterPeer{ID: id, Addr: "mesh:" + id})
		}
	}
	return out
}

type testCluster struct {
	mesh  *mesh
	nodes []*testServer
	mu    sync.Mutex
	dead  map[string]bool
}

func startCluster(t *testing.T, n int, mutate ...func(*ClusterConfig)) *testCluster {
	t.Helper()
	return startClusterWith(t, n, nil, mutate...)
}

// startClusterWith is startCluster with server (non-nil) changing each
// node's Config.
func startClusterWith(t *testing.T, n int, server func(*Config), mutate ...func(*ClusterConfig)) *testCluster {
	t.Helper()
	tc := &testCluster{mesh: newMesh(), dead: map[string]bool{}}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		tc.nodes = append(tc.nodes, startServer(t, func(c *Config) {
			c.NodeID = id
			c.WSAddr = ""
			if server != nil {
				server(c)
			}
		}))
	}
	for _, ts := range tc.nodes {
		self := ts.cfg.NodeID
		cfg := ClusterConfig{
			PeersInterval: 10 * time.Millisecond,
			AntiEntropy:   200 * time.Millisecond,
		}
		for _, m := range mutate {
			m(&cfg)
		}
		if err := ts.StartCluster(&meshTransport{tc: tc, self: self}, cfg); err != nil {
			t.Fatal(err)
		}
	}
	return tc
}

// payloads lists what r received, in order, as "[p0 p1 ...]".
func payloads(r *received) string {
	var out []string
	for _, p := range r.all() {
		out = append(out, string(p.Payload))
	}
	return fmt.Sprint(out)
}

// waitRemote waits until node i counts want remote subscriptions.
func (tc *testCluster) waitRemote(t *testing.T, i, want int) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf(
		"node %d remote subscriptions %d, want %d", i, tc.nodes[i].ClusterStats().RemoteSubscriptions, want), func() bool { return tc.nodes[i].ClusterStats().RemoteSubscriptions == want })

}

func TestClusterForwardsToSubscribersOnly(t *testing.T) {
	tc := startCluster(t, 3)
	n1, n2, n3 := tc.nodes[0], tc.nodes[1], tc.nodes[2]
	var got received
	sub := dialPaho(t, n2.tcp, "sub", &got)
	subscribe(t, sub, "plant/+/temp", 1)
	tc.waitRemote(t, 0, 1)
	tc.waitRemote(t, 2, 1)

	pub1 := dialPaho(t, n1.tcp, "pub1", nil)
	pub3 := dialPaho(t, n3.tcp, "pub3", nil)
	const n = 50
	for i := range n {
		resp, err := publish(t, pub1, &paho.Publish{Topic: "plant/a/temp", QoS: 1, Payload: []byte(fmt.Sprintf("a%d", i)),
			Properties: &paho.PublishProperties{ContentType: "text/plain", User: paho.UserProperties{{Key: "k", Value: "v"}}}})
		if err != nil || resp.ReasonCode != 0 {
			t.Fatalf("publish: %v %+v", err, resp)
		}
		mustPublish(t, pub3, "plant/c/temp", 1, fmt.Sprintf("c%d", i))
		mustPublish(t, pub1, "other/topic", 1, "nobody listens") // no subscriber anywhere
	}
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("subscriber got %d of %d", len(got.all()), 2*n), func() bool { return len(got.all()) == 2*n })
	next := map[string]int{}
	for _, p := range got.all() {
		src := p.Payload[0:1]
		var i int
		fmt.Sscanf(string(p.Payload[1:]), "%d", &i)
		if i != next[string(src)] {
			t.Fatalf("from %s: got #%d, want #%d (order)", src, i, next[string(src)])
		}
		next[string(src)]++
		if string(src) == "a" && (p.Properties.ContentType != "text/plain" || p.Properties.User.Get("k") != "v") {
			t.Fatalf("properties lost: %+v", p.Properties)
		}
		if p.QoS != 1 {
			t.Fatalf("delivered with qos %d", p.QoS)
		}
	}
	if s := n1.ClusterStats(); s.ForwardedOut != n {
		t.Fatalf("n1 forwarded %d, want %d (only plant/a/temp, only to n2)", s.ForwardedOut, n)
	}
	if s := n2.ClusterStats(); s.ForwardedIn != 2*n || s.ForwardedOut != 0 {
		t.Fatalf("n2 stats %+v", s)
	}
	// Nothing forwarded was logged again on the receiving node.
	if len(n2.sink.records()) != 0 {
		t.Fatalf("n2 logged %d forwarded records", len(n2.sink.records()))
	}

	// Unsubscribe: the interest goes away on the peers.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := sub.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"plant/+/temp"}}); err != nil {
		t.Fatal(err)
	}
	tc.waitRemote(t, 0, 0)
	mustPublish(t, pub1, "plant/a/temp", 1, "late")
	if s := n1.ClusterStats(); s.ForwardedOut != n {
		t.Fatalf("forwarded after unsubscribe: %+v", s)
	}
}

func TestClusterSharedSubscriptionOncePerGroup(t *testing.T) {
	tc := startCluster(t, 3)
	var a, b, c received
	ca := dialPaho(t, tc.nodes[1].tcp, "sa", &a)
	cb := dialPaho(t, tc.nodes[2].tcp, "sb", &b)
	subscribe(t, ca, "$share/g/jobs/#", 1)
	subscribe(t, cb, "$share/g/jobs/#", 1)
	subscribe(t, dialPaho(t, tc.nodes[2].tcp, "sc", &c), "$share/other/jobs/+", 1)
	// A barrier: once a subscriber has the barrier from every origin, it
	// has everything those origins sent it before (FIFO per link).
	subscribe(t, ca, "barrier", 1)
	subscribe(t, cb, "barrier", 1)
	tc.waitRemote(t, 0, 5)
	tc.waitRemote(t, 1, 3)
	tc.waitRemote(t, 2, 2)
	var pubs []*paho.Client
	for _, ts := range tc.nodes {
		pubs = append(pubs, dialPaho(t, ts.tcp, "pub-"+ts.cfg.NodeID, nil))
	}
	const n = 60
	for i := range n {
		mustPublish(t, pubs[i%3], "jobs/x", 1, fmt.Sprint(i)) // each origin balances on its own
	}
	for _, p := range pubs {
		mustPublish(t, p, "barrier", 1, "")
	}
	count := func(r *received, topic string) int {
		k := 0
		for _, p := range r.all() {
			if p.Topic == topic {
				k++
			}
		}
		return k
	}
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf(
		"barriers: %d %d", count(&a, "barrier"), count(&b, "barrier")), func() bool { return count(&a, "barrier") == 3 && count(&b, "barrier") == 3 })

	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("group other got %d of %d", len(c.all()), n), func() bool { return len(c.all()) == n })
	seen := map[string]int{}
	for _, p := range append(a.all(), b.all()...) {
		if p.Topic == "jobs/x" {
			seen[string(p.Payload)]++
		}
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != 1 {
			t.Fatalf("message %d delivered %d times to group g", i, seen[fmt.Sprint(i)])
		}
	}
	if len(seen) != n {
		t.Fatalf("group g got %d distinct messages, want %d", len(seen), n)
	}
	if ka, kb := count(&a, "jobs/x"), count(&b, "jobs/x"); ka == 0 || kb == 0 {
		t.Fatalf("unbalanced: %d / %d", ka, kb)
	}
}

func TestClusterRetainedEverywhereAndCatchUp(t *testing.T) {
	tc := startCluster(t, 2)
	n1, n2 := tc.nodes[0], tc.nodes[1]
	pub := dialPaho(t, n1.tcp, "pub", nil)
	resp, err := publish(t, pub, &paho.Publish{Topic: "cfg/line1", QoS: 1, Retain: true, Payload: []byte("v1")})
	if err != nil || resp.ReasonCode != 0 {
		t.Fatal(err, resp)
	}
	mustRetained := func(ts *testServer, topic, want string) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf(

			"%s: retained %s != %q", ts.cfg.NodeID, topic, want), func() bool {
			pk, ok := ts.broker.Topics.Retained.Get(topic)
			return (want == "" && !ok) || (ok && string(pk.Payload) == want)
		})

	}
	mustRetained(n2, "cfg/line1", "v1")
	// A new subscriber on n2 gets it as a retained message.
	var got received
	subscribe(t, dialPaho(t, n2.tcp, "late-sub", &got), "cfg/#", 1)
	testkit.Eventually(t, 5*time.Second, "retained not delivered on n2", func() bool { return len(got.all()) == 1 })
	if p := got.all()[0]; string(p.Payload) != "v1" || !p.Retain {
		t.Fatalf("got %+v", p)
	}
	// Clearing it clears it everywhere.
	if _, err := publish(t, pub, &paho.Publish{Topic: "cfg/line1", QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}
	mustRetained(n2, "cfg/line1", "")

	// A third node joining later catches up on n1's retained set.
	mustPublish(t, pub, "cfg/line2", 1, "x") // not retained: not caught up
	if _, err := publish(t, pub, &paho.Publish{Topic: "cfg/line3", QoS: 0, Retain: true, Payload: []byte("v3")}); err != nil {
		t.Fatal(err)
	}
	mustRetained(n2, "cfg/line3", "v3")
	tc.mu.Lock()
	tc.dead["n2"] = true
	tc.mu.Unlock()
	testkit.Eventually(t, 5*time.Second, "n2 still linked", func() bool { return n1.ClusterStats().Peers == 0 })
	// n2 "restarts": its retained store is gone; a new run rejoins.
	n2.broker.Topics.RetainMessage(retainedClear("cfg/line3"))
	tc.mu.Lock()
	tc.dead["n2"] = false
	tc.mu.Unlock()
	mustRetained(n2, "cfg/line3", "v3")
	mustRetained(n2, "cfg/line2", "")
}

func TestClusterResendAfterBrokenLinkDeliversOnce(t *testing.T) {
	tc := startCluster(t, 2)
	n1, n2 := tc.nodes[0], tc.nodes[1]
	var got received
	subscribe(t, dialPaho(t, n2.tcp, "sub", &got), "t", 1)
	tc.waitRemote(t, 0, 1)
	pub := dialPaho(t, n1.tcp, "pub", nil)
	// Replies lost: n2 delivers, n1 sees a failure and re-sends.
	tc.mesh.setCut("n1", "n2", true, true)
	mustPublish(t, pub, "t", 1, "0")
	testkit.Eventually(t, 5*time.Second, "first delivery", func() bool { return len(got.all()) == 1 })
	// Link fully down: queued.
	tc.mesh.setCut("n1", "n2", true, false)
	mustPublish(t, pub, "t", 1, "1")
	mustPublish(t, pub, "t", 1, "2")
	tc.mesh.setCut("n1", "n2", false, false)
	mustPublish(t, pub, "t", 1, "3") // after a duplicate of 0-2, if there were one (FIFO)
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf(

		"delivery after heal: %d", len(got.all())), func() bool {
		all := got.all()
		return len(all) > 0 && string(all[len(all)-1].Payload) == "3"
	})

	if order := payloads(&got); order != "[0 1 2 3]" {
		t.Fatalf("delivered %v, want [0 1 2 3] once each", order)
	}
}

// TestClusterInterestFollowsSessions checks the mochi hook behaviour the
// interest table relies on: a persistent session's subscriptions stay
// interest while it is disconnected and across a takeover by a
// non-clean reconnect; a clean reconnect or a clean session's disconnect
// removes them.
func TestClusterInterestFollowsSessions(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.WSAddr = "" })
	interest := func() map[string]uint32 { _, es := ts.interest.full(); return entries(es) }
	dial := func(clean bool) *paho.Client {
		conn, err := net.Dial("tcp", ts.tcp)
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{ClientID: "dev", Conn: conn})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		expiry := uint32(3600)
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: "dev", CleanStart: clean, KeepAlive: 30,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := dial(true)
	subscribe(t, c, "a/#", 1)
	subscribe(t, c, "$share/g/b", 1)
	want := map[string]uint32{"a/#": 1, "$share/g/b": 1}
	if got := interest(); !maps.Equal(got, want) {
		t.Fatalf("after subscribe: %v", got)
	}
	c.Disconnect(&paho.Disconnect{})
	testkit.Eventually(t, 5*time.Second, "client still connected", func() bool { return ts.Stats().Clients == 0 })
	if got := interest(); !maps.Equal(got, want) {
		t.Fatalf("persistent session disconnected: interest %v, want %v", got, want)
	}
	c = dial(false) // takes the session over: no hook, same subscriptions
	if got := interest(); !maps.Equal(got, want) {
		t.Fatalf("after resuming the session: %v", got)
	}
	c.Disconnect(&paho.Disconnect{})
	testkit.Eventually(t, 5*time.Second, "client still connected", func() bool { return ts.Stats().Clients == 0 })
	c = dial(true) // clean start discards the session
	if got := interest(); len(got) != 0 {
		t.Fatalf("after a clean start: %v", got)
	}
	subscribe(t, c, "x", 0)
	if got := interest(); !maps.Equal(got, map[string]uint32{"x": 1}) {
		t.Fatalf("new subscription: %v", got)
	}
}

func TestClusterWillReachesOtherNodes(t *testing.T) {
	tc := startCluster(t, 2)
	var got received
	watcher := dialPaho(t, tc.nodes[1].tcp, "watcher", &got)
	subscribe(t, watcher, "status/#", 1)
	// mochi makes a subscription live (and the cluster tells n1) before it
	// looks up the retained messages to send it; a will retained on n2 in
	// between was delivered twice, live and as retained. A client's packets
	// are handled in order, so a second SUBACK says the lookup is over.
	subscribe(t, watcher, "barrier", 0)
	tc.waitRemote(t, 0, 2)
	conn, err := net.Dial("tcp", tc.nodes[0].tcp)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{ClientID: "dev-7", Conn: conn, OnClientError: func(error) {}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "dev-7", CleanStart: true, KeepAlive: 30,
		WillMessage: &paho.WillMessage{Topic: "status/dev-7", QoS: 1, Retain: true, Payload: []byte("offline")}}); err != nil {
		t.Fatal(err)
	}
	conn.Close() // an abrupt end: mochi sends the will
	defer func() {
		if t.Failed() {
			t.Logf("delivered on n2: %+v; n1 %+v; n2 %+v", got.all(), tc.nodes[0].ClusterStats(), tc.nodes[1].ClusterStats())
		}
	}()
	testkit.Eventually(t, 5*time.Second, "will not delivered on n2", func() bool { return len(got.all()) >= 1 })
	if n := len(got.all()); n != 1 {
		t.Fatalf("will delivered %d times on n2", n)
	}
	if p := got.all()[0]; p.Topic != "status/dev-7" || string(p.Payload) != "offline" {
		t.Fatalf("got %+v", p)
	}
	testkit.Eventually(t, 5*time.Second, "retained will not on n2", func() bool {
		pk, ok := tc.nodes[1].broker.Topics.Retained.Get("status/dev-7")
		return ok && string(pk.Payload) == "offline"
	})

}

func TestClusterQueueBoundDropsAndCounts(t *testing.T) {
	tc := startCluster(t, 2, func(c *ClusterConfig) { c.QueueLimit = 3 })
	n1, n2 := tc.nodes[0], tc.nodes[1]
	var got received
	subscribe(t, dialPaho(t, n2.tcp, "sub", &got), "t", 1)
	tc.waitRemote(t, 0, 1)
	pub := dialPaho(t, n1.tcp, "pub", nil)
	tc.mesh.setCut("n1", "n2", true, false)
	for i := range 6 {
		mustPublish(t, pub, "t", 1, fmt.Sprint(i)) // acked: durable here whatever the peer
	}
	// The queue (the batch being retried included) holds 3; 3 are dropped.
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf(
		"dropped %d, want 3", n1.ClusterStats().ForwardDropped), func() bool { return n1.ClusterStats().ForwardDropped == 3 })

	tc.mesh.setCut("n1", "n2", false, false)
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf(
		"forwarded %d, want 3", n1.ClusterStats().ForwardedOut), func() bool { return n1.ClusterStats().ForwardedOut == 3 })

	mustPublish(t, pub, "t", 1, "6") // after the queue: a late duplicate would come before it
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("delivered %d", len(got.all())), func() bool { return len(got.all()) == 4 })
	if order := payloads(&got); order != "[0 1 2 6]" {
		t.Fatalf("delivered %v, want [0 1 2 6]", order)
	}
}

func TestClusterLinkQueueBytes(t *testing.T) {
	c := &clusterNode{tr: &meshTransport{}, cfg: ClusterConfig{QueueLimit: 100, QueueBytes: 1000}, ctx: context.Background()}
	l := newClusterLink(c, "n2", "x")
	big := fwdMsg{Topic: "t", Payload: make([]byte, 600)}
	if !l.enqueue(big) {
		t.Fatal("first publish refused: one always fits an empty queue")
	}
	if l.enqueue(big) {
		t.Fatal("second 600-byte publish queued beyond 1000 bytes")
	}
	if !l.enqueue(fwdMsg{Topic: "t", Payload: make([]byte, 100)}) {
		t.Fatal("small publish refused")
	}
	l.pop(1)
	if l.qbytes != (&fwdMsg{Topic: "t", Payload: make([]byte, 100)}).size() {
		t.Fatalf("qbytes %d after pop", l.qbytes)
	}
	if !l.enqueue(big) {
		t.Fatal("publish refused after the queue drained")
	}
}
