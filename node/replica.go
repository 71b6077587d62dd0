package node

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/lease"
	"github.com/tributary-io/tributary/replica"
)

// replication is ingest's handle on the node's replicas: nil (no waiting)
// until the cluster starts, and without a cluster or with
// cluster.replication_factor 1.
type replication struct {
	r atomic.Pointer[replica.Replicas]
	// lease, with replication on, refuses writes while this node holds
	// neither its catalog lease nor a majority of the site (package
	// lease): a peer may be taking its partitions over.
	lease atomic.Pointer[lease.Keeper]
	// refuseUntilStarted: the refuse policy is configured, so nothing is
	// accepted before the replicas are running (New to startReplicas).
	refuseUntilStarted atomic.Bool
}

// check refuses, before anything is appended to (stream, p), what would
// be refused anyway: writes while the lease says a peer may take this
// node's partitions over, and under the refuse policy too few live
// members, a replica of the partition known missing (its link down), or
// replication not started (replica.Replicas.CanReplicate).
func (x *replication) check(stream string, p int32) error {
	if err := x.mayWrite(); err != nil {
		return err
	}
	if r := x.r.Load(); r != nil {
		return r.CanReplicate(stream, p)
	}
	if x.refuseUntilStarted.Load() {
		return replica.ErrNotReplicated
	}
	return nil
}

// checkRecs is check for every partition of recs.
func (x *replication) checkRecs(recs []*tributary.Record) error {
	for i, r := range recs {
		if i > 0 && r.Stream == recs[i-1].Stream && r.Partition == recs[i-1].Partition {
			continue
		}
		if err := x.check(r.Stream, r.Partition); err != nil {
			return err
		}
	}
	return nil
}

// mayWrite refuses while the lease says a peer may take this node's
// partitions over.
func (x *replication) mayWrite() error {
	if k := x.lease.Load(); k != nil {
		return k.MayWrite()
	}
	return nil
}

// wait returns once recs, durable in the WAL, are durable on the replicas
// (see package replica for the policies). Its errors wrap
// tributary.ErrAfterAppend: the records are stored here, and will be
// uploaded, although refused.
func (x *replication) wait(ctx context.Context, recs []*tributary.Record) error {
	if r := x.r.Load(); r != nil {
		if err := r.Replicate(ctx, recs); err != nil {
			return fmt.Errorf("%w: %w", tributary.ErrAfterAppend, err)
		}
	}
	return nil
}

// waitAsync calls done once recs, durable in the WAL, are durable on the
// replicas, without a goroutine of its own; errors as wait's.
func (x *replication) waitAsync(recs []*tributary.Record, done func(error)) {
	if r := x.r.Load(); r != nil {
		r.ReplicateAsync(recs, func(err error) {
			if err != nil {
				err = fmt.Errorf("%w: %w", tributary.ErrAfterAppend, err)
			}
			done(err)
		})
		return
	}
	done(nil)
}

// notify replicates recs without waiting (QoS 0).
func (x *replication) notify(recs []*tributary.Record) {
	if r := x.r.Load(); r != nil {
		r.Notify(recs)
	}
}

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
	n.ingest.repl.lease.Store(k)
	n.ingest.repl.r.Store(r)
	n.log.Info("wal replication on", "factor", g.ReplicationFactor, "policy", g.ReplicationPolicy,
		"takeover_grace", g.TakeoverGrace, "dir", filepath.Join(n.cfg.DataDir, "replicas"))
	return nil
}

func (n *Node) closeReplicas(ctx context.Context) error {
	if k := n.ingest.repl.lease.Swap(nil); k != nil {
		k.Close(ctx)
	}
	r := n.ingest.repl.r.Swap(nil)
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
	if r := n.ingest.repl.r.Load(); r != nil {
		return r.Stats()
	}
	return replica.Stats{}
}

func (n *Node) registerReplicaMetrics(reg *prometheus.Registry) {
	reg.MustRegister(lease.Collectors(&n.ingest.repl.lease)...)
	gauge := func(name, help string, f func(replica.Stats) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(n.replicaStats()) }))
	}
	counter := func(name, help string, f func(replica.Stats) int64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(n.replicaStats())) }))
	}
	gauge("tributary_replication_degraded", "1 while records are acknowledged with fewer replicas than cluster.replication_factor.",
		func(s replica.Stats) float64 {
			if s.Degraded {
				return 1
			}
			return 0
		})
	gauge("tributary_replication_lag_records", "Records in this node's WAL not yet durable on every replica.",
		func(s replica.Stats) float64 { return float64(s.LagRecords) })
	counter("tributary_replicated_records_total", "Records of this node that its replicas confirmed durable.",
		func(s replica.Stats) int64 { return s.ReplicatedRecords })
	counter("tributary_replica_stored_records_total", "Records this node stored as a replica of other nodes.",
		func(s replica.Stats) int64 { return s.StoredRecords })
	counter("tributary_partition_takeovers_total", "Partitions of dead members this node took over.",
		func(s replica.Stats) int64 { return s.Takeovers })
	counter("tributary_replication_fenced_total", "Partitions a replica reported as taken over by another node.",
		func(s replica.Stats) int64 { return s.Fenced })
	counter("tributary_replica_truncated_records_total", "Records this node dropped from its replicas because their owner restarted without having made them durable.",
		func(s replica.Stats) int64 { return s.TruncatedRecords })
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
