package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/peer"
)

// TestClusterLocked runs three edge nodes whose peer links use mutual TLS
// (one cluster CA, security.tls.listeners.peer) and whose gossip is
// encrypted (cluster.gossip_key): (1) they forward MQTT and replicate as
// without the locks; (2) rogue processes at n2's peer port — plain TCP
// with an old-style hello and a request, a peer without TLS, a peer with
// a certificate of another CA, a TLS client without a certificate — are
// refused and counted, and deliver nothing: the subscriber gets nothing
// more, no record is forwarded in or stored as a replica; (3) a node with
// the cluster's certificate but the wrong gossip key does not join.
func TestClusterLocked(t *testing.T) {
	certs := t.TempDir()
	ca := testkit.NewCA(t)
	gossipKey := func() string {
		b := make([]byte, 32)
		rand.Read(b)
		return base64.StdEncoding.EncodeToString(b)
	}
	key, wrongKey := gossipKey(), gossipKey()
	locks := func(id string) string {
		cert, k, caFile := ca.WriteFiles(t, certs, id)
		g := key
		if id == "n4" {
			g = wrongKey
		}
		return fmt.Sprintf("  gossip_key: %s\nsecurity:\n  tls:\n    listeners:\n      peer: {cert_file: %s, key_file: %s, client_ca_file: %s}\n",
			g, cert, k, caFile)
	}
	c := newReplClusterExtra(t, 200*time.Millisecond, locks)
	n1, n2 := c.node("n1"), c.node("n2")
	for _, p := range c.running() {
		if !p.logged("mutual_tls=true", 5*time.Second) || !p.logged("encrypted=true", 5*time.Second) {
			t.Fatalf("a node without mutual TLS or gossip encryption:\n%s", lastLines(p.logs(), 40))
		}
	}

	// (1) Forwarding and replication over the locked links.
	sub := subscriber(t, n2.MQTT, "sub-n2", "factory/#")
	waitFor(t, 10*time.Second, "n1 to learn n2's subscription", func() bool { return labelledMetric(t, n1, remote) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pc, err := mqttClient(ctx, n1.MQTT, "pub-n1")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Disconnect(&paho.Disconnect{})
	const n = 50
	if _, err := publishN(ctx, pc, newLedger(), "pub-n1", 0, n); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "n2's subscriber to get every publish", func() bool { return len(sub.byTopicPrefix("factory/")) == n })
	waitFor(t, 20*time.Second, "n1's records durable on its replica", func() bool {
		return metric(t, n1, "tributary_replicated_records_total") >= n
	})

	// (2) Rogues at n2's peer port.
	stored := func() (sum float64) {
		for _, p := range c.running() {
			sum += metric(t, p, "tributary_replica_stored_records_total")
		}
		return sum
	}
	storedBefore, inBefore := stored(), labelledMetric(t, n2, fwdIn)
	refusedBefore := metric(t, n2, "tributary_peer_handshakes_refused_total")

	// A peer frame: length, kind (1 hello, 2 request), type, request id 1.
	frame := func(kind, typ byte, payload []byte) []byte {
		var h [14]byte
		binary.BigEndian.PutUint32(h[:], uint32(10+len(payload)))
		h[4], h[5], h[13] = kind, typ, 1
		return append(h[:], payload...)
	}
	request := func(typ byte) []byte { return frame(2, typ, []byte("factory/x")) }
	raw, err := net.Dial("tcp", n2.Peer)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write(append(frame(1, 0, []byte("\x01n1")), request(32)...)) // version 1 hello from "n1"
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, _ := io.ReadAll(raw); bytes.Contains(b, []byte("n2")) {
		t.Fatal("n2 answered a plain hello")
	}
	raw.Close()

	rogueCA := testkit.NewCA(t)
	rogueCert := rogueCA.Issue(t, "n1")
	for name, cfg := range map[string]peer.Config{
		"no TLS": {},
		"another CA": {ServerTLS: &tls.Config{Certificates: []tls.Certificate{rogueCert}, ClientCAs: rogueCA.Pool},
			ClientTLS: &tls.Config{Certificates: []tls.Certificate{rogueCert}, RootCAs: ca.Pool}},
	} {
		cfg.NodeID, cfg.Addr = "n1", "127.0.0.1:0"
		rogue, err := peer.Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range []uint8{32, 33, 64, 65} { // MQTT forwarding, replication
			if _, err := rogue.Link("n2", n2.Peer).Call(ctx, typ, []byte("factory/x")); err == nil {
				t.Fatalf("rogue peer (%s) got an answer to message type %d", name, typ)
			}
		}
		rogue.Close(ctx)
	}

	tc, err := tls.Dial("tcp", n2.Peer, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
	if err == nil { // TLS 1.3: the missing certificate is refused on the first read
		tc.Write(request(32))
		tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := tc.Read(make([]byte, 1)); err == nil {
			t.Fatal("n2 answered a TLS client without a certificate")
		}
		tc.Close()
	}
	waitFor(t, 10*time.Second, "n2 to count the rogues' handshakes refused", func() bool {
		return metric(t, n2, "tributary_peer_handshakes_refused_total") >= refusedBefore+4
	})
	time.Sleep(time.Second) // anything delivered would have arrived by now
	if got := len(sub.byTopicPrefix("factory/")); got != n {
		t.Fatalf("n2's subscriber got %d publishes, want %d", got, n)
	}
	if in, s := labelledMetric(t, n2, fwdIn), stored(); in != inBefore || s != storedBefore {
		t.Fatalf("after the rogues: forwarded in %v (was %v), replica records %v (were %v)", in, inBefore, s, storedBefore)
	}
	if !strings.Contains(n2.logs(), "peer link refused") {
		t.Fatalf("no log line on n2 for the refused links:\n%s", lastLines(n2.logs(), 30))
	}

	// (3) n4: the cluster's certificate, another gossip key.
	n4 := c.start("n4", gossipAddr(t, n1))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if st := clusterPeers(t, n1); st["n4"].State != "" {
			t.Fatalf("n1 lists n4 (%s), whose gossip key differs", st["n4"].State)
		}
		if st := clusterPeers(t, n4); len(st) != 1 {
			t.Fatalf("n4 sees %v, want itself alone", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(n4.logs(), "no installed keys could decrypt") {
		t.Fatalf("n4 does not say why it cannot join:\n%s", lastLines(n4.logs(), 20))
	}
}
