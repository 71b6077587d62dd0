package node

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/lease"
	"github.com/tributary-io/tributary/replica"
)

// startReplicas opens WAL replication over the peer links, after the peer
// listener and before the cluster is joined (so that the handlers are in
// place when peers learn the address).
func (n *Node) startReplicas() error {
	g := n.cfg.Cluster
	if g.ReplicationFactor <= 1 || n.peer == nil {
		return nil
	}
	k, err := lease.Open(context.Background(), lease.Config{Node: n.cfg.NodeID, Duration: g.OwnerLease,
		Store: lease.CatalogStore{Catalog: n.cat.Iceberg()}, Members: leaseMembers{n},
		StateFile: filepath.Join(n.cfg.DataDir, "site.json"), Logger: n.log})
	if err != nil {
		return err
	}
	r, err := replica.Open(replica.Config{NodeID: n.cfg.NodeID, Dir: filepath.Join(n.cfg.DataDir, "replicas"),
		MaxBytes: int64(n.cfg.WAL.MaxBytes), Factor: g.ReplicationFactor, Policy: replica.Policy(g.ReplicationPolicy),
		Timeout: g.ReplicationTimeout, Grace: g.TakeoverGrace, Quorum: k, Transport: replica.PeerTransport(n.peer),
		Members: replicaMembers{n}, Log: n.wal, Owner: n.book, Logger: n.log})
	if err != nil {
		k.Close(context.Background())
		return err
	}
	n.ingest.Replicate(k, r)
	n.log.Info("wal replication on", "factor", g.ReplicationFactor, "policy", g.ReplicationPolicy,
		"takeover_grace", g.TakeoverGrace, "dir", filepath.Join(n.cfg.DataDir, "replicas"))
	return nil
}

func (n *Node) closeReplicas(ctx context.Context) error {
	k, r := n.ingest.StopReplicating()
	if k != nil {
		k.Close(ctx)
	}
	if r == nil {
		return nil
	}
	return r.Close(ctx)
}

// leaseMembers is the gossip membership as the lease sees it.
type leaseMembers struct{ n *Node }

func (lm leaseMembers) Members() []lease.Member {
	c := lm.n.cluster.Load()
	if c == nil {
		return []lease.Member{{ID: lm.n.cfg.NodeID, Alive: true}}
	}
	ms := c.Members()
	out := make([]lease.Member, len(ms))
	for i, m := range ms {
		out[i] = lease.Member{ID: m.ID, Alive: m.State == cluster.Alive, Left: m.State == cluster.Left}
	}
	return out
}

// replicaMembers is the gossip membership as the replicas see it.
type replicaMembers struct{ n *Node }

func (rm replicaMembers) Members() []replica.Member {
	n := rm.n
	c := n.cluster.Load()
	if c == nil {
		return []replica.Member{{ID: n.cfg.NodeID, Peer: n.PeerAddr(), State: cluster.Alive}}
	}
	ms := c.Members()
	out := make([]replica.Member, len(ms))
	for i, m := range ms {
		out[i] = replica.Member{ID: m.ID, Peer: m.Peer, State: m.State}
	}
	return out
}

func (n *Node) replicaStats() replica.Stats {
	if r := n.ingest.Replicas(); r != nil {
		return r.Stats()
	}
	return replica.Stats{}
}

// TestTapDelayEnv, tests only, is a duration (e.g. "20ms") the WAL waits
// between handing a group to the replicas and fsyncing it, so that
// end-to-end tests can kill a node in that window (wal.Options.TestTapDelay).
// Never set it in production.
const TestTapDelayEnv = "TRIBUTARY_TEST_TAP_DELAY"

func testTapDelay(log *slog.Logger) time.Duration {
	v := os.Getenv(TestTapDelayEnv)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Second {
		log.Error("ignoring a bad test tap delay", "env", TestTapDelayEnv, "value", v)
		return 0
	}
	log.Warn("test hook: the WAL waits between replicating a group and fsyncing it", "env", TestTapDelayEnv, "delay", d)
	return d
}

// TestHooksEnv, set to 1 in a node's environment, adds POST
// /debug/gossip?isolate=1 (or 0) on the HTTP address: drop (or restore)
// all of the node's gossip traffic, so that end-to-end tests can make a
// child process look dead to gossip while its data links keep working.
// Never set it in production.
const TestHooksEnv = "TRIBUTARY_TEST_HOOKS"

func (n *Node) registerTestHooks(mux *http.ServeMux) {
	if os.Getenv(TestHooksEnv) != "1" {
		return
	}
	n.log.Warn("test hooks enabled: POST /debug/gossip?isolate=1|0 drops this node's gossip", "env", TestHooksEnv)
	mux.HandleFunc("POST /debug/gossip", func(w http.ResponseWriter, r *http.Request) {
		c := n.cluster.Load()
		if c == nil {
			http.Error(w, "no cluster", http.StatusConflict)
			return
		}
		on := r.URL.Query().Get("isolate") == "1"
		c.Transport().Isolate(on)
		n.log.Warn("test hook: gossip isolation", "isolated", on)
		w.Write([]byte("ok\n"))
	})
}
