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
	p := n.peer
	return n.mqtt.StartCluster(mqtt.ClusterConfig{
		Handle: func(typ uint8, h func(string, []byte, func([]byte, error))) { p.Handle(typ, h) },
		Link:   func(id, addr string) mqtt.PeerLink { return p.Link(id, addr) },
		Peers:  n.mqttPeers,
	})
}

// mqttPeers lists the live (alive or suspect) members other than this
// node that gossip a peer address.
func (n *Node) mqttPeers() []mqtt.ClusterPeer {
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
