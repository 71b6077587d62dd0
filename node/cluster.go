package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/peer"
)

// startCluster joins the gossip cluster (when cluster.gossip_addr is set),
// after the listeners so that the gossiped addresses are the bound ones.
func (n *Node) startCluster() error {
	g := n.cfg.Cluster
	if g.GossipAddr == "" {
		return nil
	}
	// Validate read these already; they are read again here, where they
	// are used (a file may have changed in between: its error stops the
	// start).
	key, secondary, err := n.cfg.gossipKeys()
	if err != nil {
		return err
	}
	secret, err := n.cfg.clusterSecret()
	if err != nil {
		return err
	}
	// Mutual TLS on peer links from the node's listen.TLS (loaded in New,
	// reloaded on SIGHUP), when the peer listener has a client CA.
	var serverTLS, clientTLS *tls.Config
	if _, mtls := n.cfg.peerTLSFiles(); mtls {
		serverTLS, clientTLS = n.tls.Server("peer"), n.tls.Client("peer")
	}
	p, err := peer.Listen(peer.Config{NodeID: n.cfg.NodeID, Addr: g.PeerAddr, ServerTLS: serverTLS, ClientTLS: clientTLS,
		Secret: secret, Logger: n.log})
	if err != nil {
		return err
	}
	n.peer = p
	n.log.Info("listening", "listener", "peer", "addr", p.Addr(), "mutual_tls", serverTLS != nil, "secret", secret != nil)
	if serverTLS == nil && secret == nil && !config.Loopback(p.Addr()) {
		n.log.Warn("peer links are not authenticated (security.allow_anonymous): any process reaching the peer port is trusted as a node; set cluster.secret or mutual TLS", "addr", p.Addr())
	}
	if err := n.startMQTTCluster(); err != nil {
		p.Close(context.Background())
		n.peer = nil
		return err
	}
	if err := n.startReplicas(); err != nil {
		p.Close(context.Background())
		n.peer = nil
		return err
	}
	c, err := cluster.Open(cluster.Config{NodeID: n.cfg.NodeID, BindAddr: g.GossipAddr, AdvertiseAddr: g.AdvertiseAddr,
		Join: g.Join, Profile: g.GossipProfile, Meta: n.clusterMeta, GossipKey: key, SecondaryKeys: secondary, Logger: n.log,
		OnAlive: p.Kick})
	if err != nil {
		p.Close(context.Background())
		n.peer = nil
		return err
	}
	n.cluster.Store(c)
	return nil
}

// clusterMeta is what this node gossips about itself: its listeners (the
// advertised Kafka address when one is configured), the partitions it
// writes and the health of its WAL and uplink.
func (n *Node) clusterMeta() cluster.Meta {
	ws := n.wal.Stats()
	m := cluster.Meta{MQTT: n.MQTTAddr(), Kafka: n.KafkaAddr(), HTTP: n.HTTPAddr(), Peer: n.PeerAddr(), Partitions: n.book.Streams(),
		WALBytes: ws.Bytes, WALBudget: ws.MaxBytes, UplinkOK: len(n.up.Stats().Failing) == 0}
	if n.kafka != nil && n.cfg.Kafka.AdvertisedAddr != "" {
		m.Kafka = n.cfg.Kafka.AdvertisedAddr
	}
	return m
}

// PeerAddr is the advertised data-plane address ("" without a cluster).
func (n *Node) PeerAddr() string {
	if n.peer == nil {
		return ""
	}
	if a := n.cfg.Cluster.PeerAdvertiseAddr; a != "" {
		return a
	}
	return n.peer.Addr()
}

// Peer is the data plane to the other nodes (nil without a cluster).
func (n *Node) Peer() *peer.Peer { return n.peer }

// GossipAddr is the advertised gossip address ("" without a cluster).
func (n *Node) GossipAddr() string {
	if c := n.cluster.Load(); c != nil {
		return c.Addr()
	}
	return ""
}

// ClusterStatus is what GET /cluster reports.
type ClusterStatus struct {
	Node string `json:"node"`
	// Gossip is false for a single node (no cluster.gossip_addr); then
	// Members is this node alone.
	Gossip     bool             `json:"gossip"`
	GossipAddr string           `json:"gossip_addr,omitempty"`
	Members    []cluster.Member `json:"members"`
}

// ClusterStatus lists the members as this node sees them.
func (n *Node) ClusterStatus() ClusterStatus {
	st := ClusterStatus{Node: n.cfg.NodeID}
	c := n.cluster.Load()
	if c == nil {
		m := n.clusterMeta()
		m.PartitionCount = len(m.Partitions)
		st.Members = []cluster.Member{{ID: n.cfg.NodeID, State: cluster.Alive, Since: n.started, Meta: m}}
		return st
	}
	st.Gossip, st.GossipAddr, st.Members = true, c.Addr(), c.Members()
	return st
}

func (n *Node) serveCluster(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, n.ClusterStatus())
}

func (n *Node) registerClusterMetrics(reg *prometheus.Registry) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_peer_handshakes_refused_total",
		Help: "Peer links refused in the TLS handshake or the hello (no or a wrong certificate or cluster secret, an old protocol version), either side."},
		func() float64 {
			if n.peer != nil {
				return float64(n.peer.Stats().HandshakesRefused)
			}
			return 0
		}))
	peerCounter := func(name, help string, f func(peer.Stats) int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if n.peer != nil {
				return float64(f(n.peer.Stats()))
			}
			return 0
		}))
	}
	peerCounter("tributary_peer_link_failures_total", "Outgoing peer link connections that broke (a reset, a failed write, the heartbeat deadline).",
		func(s peer.Stats) int64 { return s.LinkFailures })
	peerCounter("tributary_peer_link_timeouts_total", "Peer link connections, either side, closed because nothing arrived on them within the heartbeat deadline (a silent cut).",
		func(s peer.Stats) int64 { return s.LinkTimeouts })
	for _, s := range cluster.States {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_cluster_members",
			Help: "Cluster members by state, as this node sees them (itself included).", ConstLabels: prometheus.Labels{"state": string(s)}},
			func() float64 {
				if c := n.cluster.Load(); c != nil {
					return float64(c.Counts()[s])
				}
				if s == cluster.Alive {
					return 1 // a single node: itself
				}
				return 0
			}))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_cluster_transitions_total",
			Help: "Member state changes seen by this node, by the state entered.", ConstLabels: prometheus.Labels{"to": string(s)}},
			func() float64 {
				if c := n.cluster.Load(); c != nil {
					return float64(c.Transitions()[s])
				}
				return 0
			}))
	}
}

// closeCluster leaves the cluster gracefully.
func (n *Node) closeCluster(ctx context.Context) error {
	c := n.cluster.Load()
	if c == nil {
		return nil
	}
	if err := c.Close(ctx); err != nil {
		return fmt.Errorf("leave cluster: %w", err)
	}
	return nil
}

// clusterBrokers lists this node and every live (alive or suspect) peer
// that gossips a Kafka address, for Kafka Metadata.
func (n *Node) clusterBrokers() []produce.Broker {
	out := []produce.Broker{{NodeID: n.cfg.NodeID}}
	c := n.cluster.Load()
	if c == nil {
		return out
	}
	for _, m := range c.Members() {
		if m.ID == n.cfg.NodeID || (m.State != cluster.Alive && m.State != cluster.Suspect) || m.Kafka == "" {
			continue
		}
		host, ps, err := net.SplitHostPort(m.Kafka)
		if err != nil {
			continue
		}
		port, err := strconv.ParseInt(ps, 10, 32)
		if err != nil {
			continue
		}
		out = append(out, produce.Broker{NodeID: m.ID, Host: host, Port: int32(port)})
	}
	return out
}
