package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// ingest is the Sink of the protocol front doors: it resolves each record's
// partition and ownership epoch and appends to the WAL.
//
// Ownership: per stream, this node writes its own partition (the one the
// catalog maps to it, for its MQTT clients and Kafka producers that pick
// it), plus any partition it has taken over from another node (Kafka
// producers that wrote there follow Metadata to this node). Each owned
// partition has an ownership epoch from the table (tributary.epoch.<p>),
// and every record is stamped with it, so the uplink's commit is fenced if
// the table has moved on (tables.FencedError).
//
// Invariants:
//   - A record is appended only to a partition this node believes it owns,
//     stamped with the epoch it owns it at. The belief comes from the
//     catalog (on a stream's first use, and on a lazy adoption), from adopt
//     (a take-over by this node), or — only while the catalog is unreachable
//     at the first use after a restart — from the WAL (its partitions and
//     the highest epoch each was written at). A wrong belief is corrected
//     by the fence: the uplink reports it (fenced) and the stream is
//     resolved again through the catalog, which allocates a new partition.
//   - A partition being taken over (claim) is never adopted lazily, so new
//     records never take offsets that the copied records of the previous
//     owner need.
type ingest struct {
	node string
	wal  *wal.WAL
	cat  *tables.Catalog
	log  *slog.Logger
	// onAdopt, when set (before traffic), is called after a partition was
	// adopted, with its records in the WAL (the Kafka server loads the
	// idempotent producers' state from them).
	onAdopt func(stream string, p int32)

	mu       sync.RWMutex
	streams  map[string]*owned // resolved streams
	fallback map[string]*owned // from the WAL, for streams the catalog cannot resolve now
	claimed  map[partKey]bool  // take-overs in progress (claim)
	sf       singleflight.Group
	async    *semaphore.Weighted // bytes queued by AppendAsync
	count    streamCounters      // durable messages and bytes by protocol and stream
	repl     replication         // WAL replication to peers (cluster only)
}

// owned is what this node writes of one stream.
type owned struct {
	own    int32           // the partition for this node's own clients
	epochs map[int32]int64 // every partition it owns (own included) -> ownership epoch
}

type partKey struct {
	stream    string
	partition int32
}

// errNotOwned refuses a write to a partition this node does not own.
var errNotOwned = errors.New("partition not owned by this node")

// errAdopting refuses a write to a partition while this node is taking it
// over (retriable: nothing was written).
var errAdopting = errors.New("partition is being taken over by this node; retry")

func newIngest(node string, w *wal.WAL, cat *tables.Catalog, log *slog.Logger) *ingest {
	in := &ingest{node: node, wal: w, cat: cat, log: log, streams: map[string]*owned{},
		fallback: map[string]*owned{}, claimed: map[partKey]bool{}, async: semaphore.NewWeighted(maxAsyncBytes)}
	// Streams this node has written before are known without the catalog,
	// so a restart while the cloud is unreachable keeps accepting them. Its
	// own partition was allocated at epoch 0 (taken-over ones have higher
	// epochs): prefer the highest such.
	for _, p := range w.Partitions() {
		o := in.fallback[p.Stream]
		if o == nil {
			o = &owned{own: p.Partition, epochs: map[int32]int64{}}
			in.fallback[p.Stream] = o
		}
		o.epochs[p.Partition] = p.Epoch
		if better := (p.Epoch == 0) != (o.epochs[o.own] == 0); better && p.Epoch == 0 || !better && p.Partition > o.own {
			o.own = p.Partition
		}
	}
	return in
}

// Append resolves partitions and makes the records durable.
func (in *ingest) Append(ctx context.Context, recs ...*tributary.Record) error {
	for _, r := range recs {
		if err := in.stamp(ctx, r); err != nil {
			return err
		}
	}
	if err := in.repl.check(); err != nil {
		return err
	}
	if err := in.wal.Append(ctx, recs...); err != nil {
		return err
	}
	in.count.add(recs)
	return in.repl.wait(ctx, recs)
}

// stamp sets a record's partition (this node's own), epoch and node.
func (in *ingest) stamp(ctx context.Context, r *tributary.Record) error {
	o, err := in.resolve(ctx, r.Stream)
	if err != nil {
		return err
	}
	in.mu.RLock()
	r.Partition, r.Epoch = o.own, o.epochs[o.own]
	in.mu.RUnlock()
	if r.Node == "" {
		r.Node = in.node
	}
	return nil
}

// partition returns this node's own partition of stream, allocating it
// through the catalog on first use and moving the WAL to the table's mark.
func (in *ingest) partition(ctx context.Context, stream string) (int32, error) {
	o, err := in.resolve(ctx, stream)
	if err != nil {
		return 0, err
	}
	in.mu.RLock()
	defer in.mu.RUnlock()
	return o.own, nil
}

// resolve returns what this node writes of stream: from the catalog on
// first use (allocating its own partition, and every partition the table
// says it owns), else from the WAL while the catalog is unreachable.
func (in *ingest) resolve(ctx context.Context, stream string) (*owned, error) {
	in.mu.RLock()
	o := in.streams[stream]
	in.mu.RUnlock()
	if o != nil {
		return o, nil
	}
	v, err, _ := in.sf.Do(stream, func() (any, error) {
		if _, _, err := tributary.ParseStream(stream); err != nil {
			return nil, err
		}
		o, err := in.fromCatalog(ctx, stream)
		if err != nil {
			in.mu.Lock()
			fb := in.fallback[stream]
			if fb != nil {
				in.streams[stream] = fb
			}
			in.mu.Unlock()
			if fb == nil {
				return nil, fmt.Errorf("stream %s: %w", stream, err)
			}
			in.log.Warn("catalog unreachable: writing the partition this node wrote before (a take-over meanwhile would fence it)",
				"stream", stream, "partition", fb.own, "epoch", fb.epochs[fb.own], "err", err)
			return fb, nil
		}
		in.mu.Lock()
		in.streams[stream] = o
		delete(in.fallback, stream)
		in.mu.Unlock()
		in.log.Info("stream ready", "stream", stream, "partition", o.own, "epoch", o.epochs[o.own], "owned", len(o.epochs), "table", in.cat.TableLocation(stream))
		return o, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*owned), nil
}

// fromCatalog allocates this node's partition of stream and reads which
// partitions it owns at which epoch, moving each WAL partition to at least
// the table's mark.
func (in *ingest) fromCatalog(ctx context.Context, stream string) (*owned, error) {
	p, err := in.cat.AllocatePartition(ctx, stream, in.node)
	if err != nil {
		return nil, err
	}
	t, err := in.cat.LoadTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	o := &owned{own: p, epochs: map[int32]int64{}}
	for q, ow := range tables.Owners(t) {
		if ow.Node != in.node || (q != p && in.isClaimed(stream, q)) {
			continue
		}
		if err := in.wal.EnsurePartition(stream, q, tables.HighWater(t, q)); err != nil {
			return nil, err
		}
		o.epochs[q] = ow.Epoch
	}
	if _, ok := o.epochs[p]; !ok {
		return nil, fmt.Errorf("allocated partition %d is not owned by %s", p, in.node)
	}
	return o, nil
}

func (in *ingest) isClaimed(stream string, p int32) bool {
	in.mu.RLock()
	defer in.mu.RUnlock()
	return in.claimed[partKey{stream, p}]
}

// writable returns the epoch at which this node owns partition p of stream,
// adopting it lazily when the table says this node owns it (a take-over
// made elsewhere, or before a restart). errNotOwned if the table names
// another owner; errAdopting while a take-over of p is in progress here.
func (in *ingest) writable(ctx context.Context, stream string, p int32) (int64, error) {
	o, err := in.resolve(ctx, stream)
	if err != nil {
		return 0, err
	}
	in.mu.RLock()
	e, ok := o.epochs[p]
	claimed := in.claimed[partKey{stream, p}]
	in.mu.RUnlock()
	switch {
	case ok:
		return e, nil
	case claimed:
		return 0, fmt.Errorf("%s/%d: %w", stream, p, errAdopting)
	}
	v, err, _ := in.sf.Do(fmt.Sprintf("%s\x00%d", stream, p), func() (any, error) {
		t, err := in.cat.LoadTable(ctx, stream)
		if err != nil {
			return nil, err
		}
		ow, ok := tables.Owner(t, p)
		if !ok || ow.Node != in.node {
			return nil, fmt.Errorf("%s/%d: %w (owner %q)", stream, p, errNotOwned, ow.Node)
		}
		if err := in.adopt(stream, p, ow.Epoch, tables.HighWater(t, p)); err != nil {
			return nil, err
		}
		return ow.Epoch, nil
	})
	if err != nil {
		return 0, err
	}
	return v.(int64), nil
}

// appendOwned appends records whose partition the caller chose (Kafka
// produce), stamping each with this node's epoch of its partition; a
// partition this node does not own is refused (errNotOwned, errAdopting)
// and nothing is appended.
func (in *ingest) appendOwned(ctx context.Context, recs ...*tributary.Record) error {
	var last partKey
	var e int64
	for i, r := range recs {
		if k := (partKey{r.Stream, r.Partition}); i == 0 || k != last {
			var err error
			if e, err = in.writable(ctx, r.Stream, r.Partition); err != nil {
				return err
			}
			last = k
		}
		r.Epoch, r.Node = e, in.node
	}
	if err := in.repl.check(); err != nil {
		return err
	}
	if err := in.wal.Append(ctx, recs...); err != nil {
		return err
	}
	in.count.add(recs)
	return in.repl.wait(ctx, recs)
}

// claim reserves partition p of stream for a take-over by this node in
// progress: until release is called, writes to p are refused (errAdopting,
// retriable) instead of adopting p lazily from the table, so that new
// records cannot take offsets that the previous owner's copied records
// need. Call it before tables.Catalog.TakeOver; after copying the records
// (wal.AppendAt), call adopt, then release. Also release when the
// take-over fails.
//
// Records of p still in this node's WAL from an earlier ownership of its
// own are dropped here (a node takes over only from another owner, so they
// are older than the current epoch: committed already, or fenced), so that
// the copy starts on a clean partition and AppendAt never mistakes them
// for the previous owner's records at the same offsets.
func (in *ingest) claim(stream string, p int32) (release func()) {
	k := partKey{stream, p}
	in.mu.Lock()
	in.claimed[k] = true
	_, mine := in.streams[stream].epochOf(p)
	in.mu.Unlock()
	if !mine {
		in.dropStale(stream, p, -1)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			in.mu.Lock()
			delete(in.claimed, k)
			in.mu.Unlock()
		})
	}
}

// adopt makes this node the writer of partition p of stream, which it owns
// at epoch (the epoch tables.Catalog.TakeOver returned). Call it after the
// taken-over records are in this node's WAL (wal.AppendAt, stamped with
// epoch): it moves the WAL partition to at least next (the table's mark,
// which matters when there was nothing to copy), and from then on Kafka
// produce to p is accepted here, stamped with epoch, at offsets continuing
// the WAL's. This node's MQTT clients keep writing its own partition. A
// later adopt with a higher epoch (taken again) replaces the epoch.
func (in *ingest) adopt(stream string, p int32, epoch, next int64) error {
	in.dropStale(stream, p, epoch)
	if err := in.wal.EnsurePartition(stream, p, next); err != nil {
		return fmt.Errorf("adopt %s/%d: %w", stream, p, err)
	}
	for {
		if _, err := in.resolve(context.Background(), stream); err != nil {
			return fmt.Errorf("adopt %s/%d: %w", stream, p, err)
		}
		in.mu.Lock()
		o := in.streams[stream]
		if o != nil {
			if cur, ok := o.epochs[p]; !ok || epoch > cur {
				o.epochs[p] = epoch
			}
		}
		in.mu.Unlock()
		if o != nil {
			break
		}
		// Fenced out of its own partition in between: resolve again.
	}
	if in.onAdopt != nil {
		in.onAdopt(stream, p)
	}
	in.log.Info("partition adopted", "stream", stream, "partition", p, "epoch", epoch, "next", next)
	return nil
}

// dropStale drops partition p of stream from the WAL if it holds records
// written at an epoch below epoch (any records, for epoch -1): they are
// from an earlier ownership of this node's and may not precede records of
// the new one. Failures are logged: the uplink's fence catches them later.
func (in *ingest) dropStale(stream string, p int32, epoch int64) {
	st, ok := in.wal.Partition(stream, p)
	if !ok || st.Next == st.Released || epoch >= 0 && st.Epoch >= epoch {
		return
	}
	n, err := in.wal.DropPartition(stream, p)
	if err != nil {
		in.log.Error("drop stale records of a partition being taken over", "stream", stream, "partition", p, "err", err)
		return
	}
	in.log.Warn("dropped this node's stale records of a partition it takes over (from an earlier ownership)",
		"stream", stream, "partition", p, "records", n, "their_epoch", st.Epoch, "new_epoch", epoch)
}

// epochOf is o's epoch of p (o may be nil).
func (o *owned) epochOf(p int32) (int64, bool) {
	if o == nil {
		return 0, false
	}
	e, ok := o.epochs[p]
	return e, ok
}

// fenced forgets partition p of stream (uplink OnFenced: another node owns
// it now). If it was this node's own partition, the stream is resolved
// again on its next record, and the catalog gives this node a new
// partition.
func (in *ingest) fenced(stream string, p int32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.fallback, stream)
	o := in.streams[stream]
	if o == nil {
		return
	}
	delete(o.epochs, p)
	if o.own == p {
		delete(in.streams, stream)
	}
	in.log.Warn("partition fenced: no longer written here", "stream", stream, "partition", p, "own", o.own == p)
}

// maxAsyncBytes bounds the payload bytes queued by AppendAsync and not yet
// durable; beyond it AppendAsync waits (back-pressure on the connection).
const maxAsyncBytes = 32 << 20

// AppendAsync resolves the partition and queues the record for the next
// group commit without waiting for it (QoS 0).
func (in *ingest) AppendAsync(ctx context.Context, r *tributary.Record, done func(error)) error {
	if err := in.stamp(ctx, r); err != nil {
		return err
	}
	n := int64(len(r.Value)) + 256
	if err := in.async.Acquire(ctx, n); err != nil {
		return err
	}
	in.wal.AppendAsync([]*tributary.Record{r}, func(err error) {
		in.async.Release(n)
		if err == nil {
			in.count.add([]*tributary.Record{r})
			in.repl.notify([]*tributary.Record{r})
		}
		done(err)
	})
	return nil
}

// Streams returns the streams this node writes and its own partition of
// each (partitions taken over are in Owned).
func (in *ingest) Streams() map[string]int32 {
	in.mu.RLock()
	defer in.mu.RUnlock()
	out := make(map[string]int32, len(in.streams)+len(in.fallback))
	for k, o := range in.fallback {
		out[k] = o.own
	}
	for k, o := range in.streams {
		out[k] = o.own
	}
	return out
}

// Owned returns every partition this node writes, with its epoch.
func (in *ingest) Owned() map[string]map[int32]int64 {
	in.mu.RLock()
	defer in.mu.RUnlock()
	out := make(map[string]map[int32]int64, len(in.streams))
	for _, m := range []map[string]*owned{in.fallback, in.streams} {
		for k, o := range m {
			es := make(map[int32]int64, len(o.epochs))
			for p, e := range o.epochs {
				es[p] = e
			}
			out[k] = es
		}
	}
	return out
}
