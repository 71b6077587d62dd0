package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/mqtt"
)

// startMQTTCluster makes the MQTT broker one node of the cluster-wide
// namespace (package mqtt, cluster.go) over the peer links; called once
// the peer listener is up and before gossip announces it, so the handlers
// are registered before any peer can call.
func (n *Node) startMQTTCluster() error {
	return n.mqtt.StartCluster(mqttTransport{n}, mqtt.ClusterConfig{})
}

// mqttTransport is the MQTT namespace's view of the peer links and the
// gossip membership.
type mqttTransport struct{ n *Node }

func (t mqttTransport) Handle(typ uint8, h func(string, []byte, func([]byte, error))) {
	t.n.peer.Handle(typ, h)
}

func (t mqttTransport) Link(id, addr string) mqtt.PeerLink { return t.n.peer.Link(id, addr) }

// Peers lists the live (alive or suspect) members other than this node
// that gossip a peer address.
func (t mqttTransport) Peers() []mqtt.ClusterPeer {
	n := t.n
	c := n.cluster.Load()
	if c == nil {
		return nil
	}
	var out []mqtt.ClusterPeer
	for _, m := range c.Members() {
		if m.ID == n.cfg.NodeID || (m.State != cluster.Alive && m.State != cluster.Suspect) || m.Peer == "" {
			continue
		}
		out = append(out, mqtt.ClusterPeer{ID: m.ID, Addr: m.Peer})
	}
	return out
}

func (n *Node) registerMQTTClusterMetrics(reg *prometheus.Registry) {
	for _, dir := range []string{"in", "out"} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_mqtt_forwarded_total",
			Help:        "MQTT publishes forwarded between cluster nodes: out = acknowledged by a peer (one per peer), in = from peers, delivered here.",
			ConstLabels: prometheus.Labels{"direction": dir}},
			func() float64 {
				st := n.mqtt.ClusterStats()
				if dir == "in" {
					return float64(st.ForwardedIn)
				}
				return float64(st.ForwardedOut)
			}))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_mqtt_forward_dropped_total",
		Help: "MQTT publishes not forwarded to a peer: its queue was full, or it left or died with publishes queued."},
		func() float64 { return float64(n.mqtt.ClusterStats().ForwardDropped) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_mqtt_remote_subscriptions",
		Help: "Subscriptions on other cluster nodes, as they told this node (a shared group counts its subscribers)."},
		func() float64 { return float64(n.mqtt.ClusterStats().RemoteSubscriptions) }))
}
