package ingest

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/lease"
	"github.com/tributary-io/tributary/replica"
)

// Replicate hands the write path the node's replicas and its lease (WAL
// replication on): from now on Durable writes wait for the replicas and
// every write is refused while the lease says a peer may take this
// node's partitions over.
func (in *Ingest) Replicate(k *lease.Keeper, r *replica.Replicas) {
	in.repl.lease.Store(k)
	in.repl.r.Store(r)
}

// StopReplicating takes the lease and replicas back, for closing (nil
// when Replicate was never called); writes then wait for no replica.
func (in *Ingest) StopReplicating() (*lease.Keeper, *replica.Replicas) {
	return in.repl.lease.Swap(nil), in.repl.r.Swap(nil)
}

// Replicas is what Replicate gave (nil before, or without replication).
func (in *Ingest) Replicas() *replica.Replicas { return in.repl.r.Load() }

// Lease is the lease Replicate gave (nil before, or without replication).
func (in *Ingest) Lease() *lease.Keeper { return in.repl.lease.Load() }

// Collectors are the write path's metrics: messages and payload bytes
// made durable by protocol and stream, and the figures of the lease and
// replicas it waits for.
func (in *Ingest) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{&in.count}
	cs = append(cs, lease.Collectors(&in.repl.lease)...)
	return append(cs, replica.Collectors(&in.repl.r)...)
}

// replication is the write path's handle on the node's replicas: nil (no
// waiting) until Replicate, and without a cluster or with
// cluster.replication_factor 1.
type replication struct {
	r atomic.Pointer[replica.Replicas]
	// lease, with replication on, refuses writes while this node holds
	// neither its catalog lease nor a majority of the site (package
	// lease): a peer may be taking its partitions over.
	lease atomic.Pointer[lease.Keeper]
	// refuseUntilStarted: the refuse policy is configured, so nothing is
	// accepted before the replicas are running.
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

// notify replicates recs without waiting (Queued).
func (x *replication) notify(recs []*tributary.Record) {
	if r := x.r.Load(); r != nil {
		r.Notify(recs)
	}
}
