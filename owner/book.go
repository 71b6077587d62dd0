// Package owner is an edge node's book of partition ownership: which
// partitions of each stream this node writes, at which ownership epoch,
// which ones it is taking over, and what happens when it learns that
// another node owns one of them.
//
// Ownership itself lives in the catalog (table properties
// tributary.owner.<p> and tributary.epoch.<p>, see tables.Ownership), and
// every change of it is a compare-and-swap commit there; the Book is this
// node's belief, kept correct by the fence: the uplink's commit (and a
// replica's answer) refuses a record of an older epoch, and Fenced makes
// the Book forget the partition.
//
// # Invariants
//
//   - A record is stamped only with a partition this node believes it owns
//     and the epoch it owns it at. The belief comes from the catalog (on a
//     stream's first use, and on a lazy adoption in Writable), from Adopt (a
//     take-over by this node), or — only while the catalog is unreachable at
//     the first use after a restart — from the WAL (its partitions and the
//     highest epoch each was written at). A wrong belief is corrected by the
//     fence: Fenced forgets the partition, and the stream is resolved again
//     through the catalog, which allocates a new partition.
//   - A partition's WAL offsets continue the table's committed high-water
//     mark (OpEnsure on every resolution), so a node whose WAL was
//     lost never reuses an offset.
//   - A partition being taken over (Claim) is never adopted lazily, so new
//     records never take offsets that the copied records of the previous
//     owner need.
//   - No silent drop. Records of an earlier ownership that a take-over or
//     an adoption drops from the WAL (Claim, Adopt) are first kept in the
//     quarantine (UseQuarantine), logged at error level; if they cannot
//     be kept they stay in the WAL, and a take-over waits for them
//     (TakeOver fails until they are kept).
//   - Refusals wrap ErrNotOwned (which is tributary.ErrFenced: the protocol
//     answers "not the leader") or ErrAdopting (retriable here).
//
// # Outline
//
// New reads the WAL's partitions as the fallback belief. Own resolves the
// partition for this node's own clients (MQTT, and Kafka producers that let
// the node choose); Writable the epoch of a partition a Kafka producer
// chose. Claim, Adopt and Release bracket a take-over (package replica);
// TakeOver, Owner and HighWaters are the catalog side of its decisions.
// Observers registered with Watch hear of every adoption (the Kafka
// produce side loads idempotent producers' state from the copied records);
// UseQuarantine sets where the stale records a take-over drops are kept.
package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

var (
	// ErrNotOwned refuses a write to a partition this node does not own.
	// It is tributary.ErrFenced wrapped with the package's context.
	ErrNotOwned = fmt.Errorf("owner: %w", tributary.ErrFenced)
	// ErrAdopting refuses a write to a partition while this node is taking
	// it over (retriable: nothing was written).
	ErrAdopting = errors.New("owner: partition is being taken over by this node; retry")
)

// Log is the part of the write-ahead log the Book keeps in step with
// ownership (wal.WAL).
type Log interface {
	Partitions() []wal.PartitionState
	Partition(stream string, partition int32) (wal.PartitionState, bool)
	// Apply writes an Op: the Book ensures partitions (wal.OpEnsure) and
	// drops stale ones (wal.OpDrop).
	Apply(ctx context.Context, o wal.Op) wal.Result
	Read(stream string, partition int32, from int64, maxRecords int, maxBytes int64) ([]*tributary.Record, error)
}

// Quarantine keeps records that the Book would otherwise drop from the
// WAL without their reaching the table (quarantine.Folder, the folder the
// uplink's fence writes to). Keep returns once the records are durable
// there; if it fails, the Book drops nothing.
type Quarantine interface {
	Keep(stream string, partition int32, recs []*tributary.Record, reason string) error
}

// Catalog is the ownership side of the catalog (tables.Catalog).
type Catalog interface {
	// AllocatePartition returns node's own partition of stream, creating
	// the table and allocating one on first use.
	AllocatePartition(ctx context.Context, stream, node string) (int32, error)
	// Marks reloads the table: committed marks and owners per partition.
	Marks(ctx context.Context, stream string) (map[int32]int64, map[int32]tables.Ownership, error)
	// TakeOverAt moves partition p from one owner to another at the next
	// epoch (a compare-and-swap), recording start as where the new
	// owner's history begins (tables.EpochStart; < 0: not recorded);
	// errors.Is tables.ErrNotOwner when from does not own it.
	TakeOverAt(ctx context.Context, stream string, p int32, from, to string, start int64) (int64, error)
	TableLocation(stream string) string
}

// Observer hears of every partition this node adopted (Adopt, or a lazy
// adoption in Writable), after its records are in the WAL.
type Observer interface {
	Adopted(stream string, partition int32)
}

// Book is one node's ownership of partitions. Safe for concurrent use.
type Book struct {
	node string
	log  Log
	cat  Catalog
	lg   *slog.Logger

	mu        sync.RWMutex
	streams   map[string]*owned // resolved streams
	fallback  map[string]*owned // from the WAL, for streams the catalog cannot resolve now
	claimed   map[partKey]bool  // take-overs in progress (Claim)
	unclean   map[partKey]bool  // claimed, stale records not quarantined yet (Claim, TakeOver)
	observers []Observer
	quar      Quarantine // UseQuarantine; nil: stale records are never dropped
	sf        singleflight.Group
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

// New opens node's book over its WAL and the catalog. Streams this node has
// written before are known without the catalog, so a restart while the
// cloud is unreachable keeps accepting them.
func New(node string, log Log, cat Catalog, logger *slog.Logger) *Book {
	if logger == nil {
		logger = slog.Default()
	}
	b := &Book{node: node, log: log, cat: cat, lg: logger, streams: map[string]*owned{},
		fallback: map[string]*owned{}, claimed: map[partKey]bool{}, unclean: map[partKey]bool{}}
	// Its own partition was allocated at epoch 0 (taken-over ones have
	// higher epochs): prefer the highest such.
	for _, p := range log.Partitions() {
		o := b.fallback[p.Stream]
		if o == nil {
			o = &owned{own: p.Partition, epochs: map[int32]int64{}}
			b.fallback[p.Stream] = o
		}
		o.epochs[p.Partition] = p.Epoch
		if better := (p.Epoch == 0) != (o.epochs[o.own] == 0); better && p.Epoch == 0 || !better && p.Partition > o.own {
			o.own = p.Partition
		}
	}
	return b
}

// Node is the id of the node whose book this is.
func (b *Book) Node() string { return b.node }

// UseQuarantine makes q keep the stale records the Book drops (Claim,
// Adopt). Call it before traffic starts; without it they are never
// dropped.
func (b *Book) UseQuarantine(q Quarantine) {
	b.mu.Lock()
	b.quar = q
	b.mu.Unlock()
}

// Watch registers o for adoptions. Call it before traffic starts.
func (b *Book) Watch(o Observer) {
	b.mu.Lock()
	b.observers = append(b.observers, o)
	b.mu.Unlock()
}

// Own returns this node's own partition of stream and its epoch,
// allocating the partition through the catalog on first use.
func (b *Book) Own(ctx context.Context, stream string) (partition int32, epoch int64, err error) {
	o, err := b.resolve(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	return o.own, o.epochs[o.own], nil
}

// resolve returns what this node writes of stream: from the catalog on
// first use (allocating its own partition, and every partition the table
// says it owns), else from the WAL while the catalog is unreachable.
func (b *Book) resolve(ctx context.Context, stream string) (*owned, error) {
	b.mu.RLock()
	o := b.streams[stream]
	b.mu.RUnlock()
	if o != nil {
		return o, nil
	}
	v, err, _ := b.sf.Do(stream, func() (any, error) {
		if _, _, err := tributary.ParseStream(stream); err != nil {
			return nil, err
		}
		o, err := b.fromCatalog(ctx, stream)
		if err != nil {
			b.mu.Lock()
			fb := b.fallback[stream]
			if fb != nil {
				b.streams[stream] = fb
			}
			b.mu.Unlock()
			if fb == nil {
				return nil, fmt.Errorf("stream %s: %w", stream, err)
			}
			b.lg.Warn("catalog unreachable: writing the partition this node wrote before (a take-over meanwhile would fence it)",
				"stream", stream, "partition", fb.own, "epoch", fb.epochs[fb.own], "err", err)
			return fb, nil
		}
		b.mu.Lock()
		b.streams[stream] = o
		delete(b.fallback, stream)
		b.mu.Unlock()
		b.lg.Info("stream ready", "stream", stream, "partition", o.own, "epoch", o.epochs[o.own], "owned", len(o.epochs), "table", b.cat.TableLocation(stream))
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
func (b *Book) fromCatalog(ctx context.Context, stream string) (*owned, error) {
	p, err := b.cat.AllocatePartition(ctx, stream, b.node)
	if err != nil {
		return nil, err
	}
	marks, owners, err := b.cat.Marks(ctx, stream)
	if err != nil {
		return nil, err
	}
	o := &owned{own: p, epochs: map[int32]int64{}}
	for q, ow := range owners {
		if ow.Node != b.node || (q != p && b.isClaimed(stream, q)) {
			continue
		}
		if err := b.log.Apply(context.Background(), wal.Op{Kind: wal.OpEnsure, Stream: stream, Partition: q, Offset: marks[q]}).Err; err != nil {
			return nil, err
		}
		o.epochs[q] = ow.Epoch
	}
	if _, ok := o.epochs[p]; !ok {
		return nil, fmt.Errorf("allocated partition %d is not owned by %s", p, b.node)
	}
	return o, nil
}

func (b *Book) isClaimed(stream string, p int32) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.claimed[partKey{stream, p}]
}

// Writable returns the epoch at which this node owns partition p of
// stream, adopting it lazily when the table says this node owns it (a
// take-over made elsewhere, or before a restart). The error wraps
// ErrNotOwned if the table names another owner, ErrAdopting while a
// take-over of p is in progress here.
func (b *Book) Writable(ctx context.Context, stream string, p int32) (int64, error) {
	o, err := b.resolve(ctx, stream)
	if err != nil {
		return 0, err
	}
	b.mu.RLock()
	e, ok := o.epochs[p]
	claimed := b.claimed[partKey{stream, p}]
	b.mu.RUnlock()
	switch {
	case ok:
		return e, nil
	case claimed:
		return 0, fmt.Errorf("%s/%d: %w", stream, p, ErrAdopting)
	}
	v, err, _ := b.sf.Do(fmt.Sprintf("%s\x00%d", stream, p), func() (any, error) {
		marks, owners, err := b.cat.Marks(ctx, stream)
		if err != nil {
			return nil, err
		}
		ow, ok := owners[p]
		if !ok || ow.Node != b.node {
			return nil, fmt.Errorf("%s/%d: %w (owner %q)", stream, p, ErrNotOwned, ow.Node)
		}
		if err := b.Adopt(stream, p, ow.Epoch, marks[p]); err != nil {
			return nil, err
		}
		return ow.Epoch, nil
	})
	if err != nil {
		return 0, err
	}
	return v.(int64), nil
}

// Epoch is the epoch at which this node writes (stream, p), if it does
// (resolved streams only: what the catalog or an adoption said).
func (b *Book) Epoch(stream string, p int32) (int64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.streams[stream].epochOf(p)
}

// epochOf is o's epoch of p (o may be nil).
func (o *owned) epochOf(p int32) (int64, bool) {
	if o == nil {
		return 0, false
	}
	e, ok := o.epochs[p]
	return e, ok
}

// Streams returns the streams this node writes and its own partition of
// each (partitions taken over are in Owned).
func (b *Book) Streams() map[string]int32 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[string]int32, len(b.streams)+len(b.fallback))
	for k, o := range b.fallback {
		out[k] = o.own
	}
	for k, o := range b.streams {
		out[k] = o.own
	}
	return out
}

// Owned returns every partition this node writes, with its epoch.
func (b *Book) Owned() map[string]map[int32]int64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[string]map[int32]int64, len(b.streams))
	for _, m := range []map[string]*owned{b.fallback, b.streams} {
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
