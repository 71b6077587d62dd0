package owner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// A take-over of partition p by this node, as package replica runs it:
//
//	release := book.Claim(stream, p)   // writes to p refused (ErrAdopting)
//	... freeze the copy taken over from; its end is start ...
//	epoch, won, err := book.TakeOver(ctx, stream, p, from, start)
//	... copy the records above the table's mark into the WAL at epoch ...
//	book.Adopt(stream, p, epoch, next) // p is written here from now on
//	release()
//
// Release also when the take-over fails; the claim may be held across
// retries.

// Claim reserves partition p of stream for a take-over by this node in
// progress: until release is called, writes to p are refused (ErrAdopting,
// retriable) instead of adopting p lazily from the table, so that new
// records cannot take offsets that the previous owner's copied records
// need.
//
// Records of p still in this node's WAL from an earlier ownership of its
// own are moved to the quarantine here (a node takes over only from
// another owner, so they are older than the current epoch: committed
// already, or fenced), so that the copy starts on a clean partition and
// the copy never mistakes them for the previous owner's records at the
// same offsets. If they cannot be quarantined they stay, and TakeOver
// tries again and fails until they are gone.
func (b *Book) Claim(stream string, p int32) (release func()) {
	k := partKey{stream, p}
	b.mu.Lock()
	b.claimed[k] = true
	_, mine := b.streams[stream].epochOf(p)
	b.mu.Unlock()
	if !mine && b.dropStale(stream, p, -1) != nil {
		b.mu.Lock()
		b.unclean[k] = true
		b.mu.Unlock()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.claimed, k)
			delete(b.unclean, k)
			b.mu.Unlock()
		})
	}
}

// TakeOver makes this node the owner of partition p of stream in the
// catalog, if node from owns it now (a compare-and-swap there), and
// records in the same commit where its history of p starts: start, the
// end of the copy it takes over from (read once that copy refuses from's
// appends), or the table's mark if higher (tables.Catalog.TakeOverAt). A
// negative start records none, and the fenced node quarantines instead of
// re-admitting. won is false, with no error, when another node than from
// owns it (somebody else took it over first, or from came back). It
// fails, taking nothing over, while stale records that Claim could not
// quarantine are still in the WAL (it tries to quarantine them again
// first).
func (b *Book) TakeOver(ctx context.Context, stream string, p int32, from string, start int64) (epoch int64, won bool, err error) {
	k := partKey{stream, p}
	b.mu.RLock()
	unclean := b.unclean[k]
	b.mu.RUnlock()
	if unclean {
		if err := b.dropStale(stream, p, -1); err != nil {
			return 0, false, fmt.Errorf("take over %s/%d: %w", stream, p, err)
		}
		b.mu.Lock()
		delete(b.unclean, k)
		b.mu.Unlock()
	}
	epoch, err = b.cat.TakeOverAt(ctx, stream, p, from, b.node, start)
	if errors.Is(err, tables.ErrNotOwner) {
		return 0, false, nil
	}
	return epoch, err == nil, err
}

// Owner reloads the table and returns the owner of partition p of stream
// and its epoch ("" when nobody owns it).
func (b *Book) Owner(ctx context.Context, stream string, p int32) (string, int64, error) {
	_, owners, err := b.cat.Marks(ctx, stream)
	if err != nil {
		return "", 0, err
	}
	return owners[p].Node, owners[p].Epoch, nil
}

// HighWaters reloads the table and returns its partitions' committed marks.
func (b *Book) HighWaters(ctx context.Context, stream string) (map[int32]int64, error) {
	marks, _, err := b.cat.Marks(ctx, stream)
	return marks, err
}

// Adopt makes this node the writer of partition p of stream, which it owns
// at epoch (the epoch TakeOver returned). Call it after the taken-over
// records are in this node's WAL, stamped with epoch: it moves the WAL
// partition to at least next (the table's mark, which matters when there
// was nothing to copy), and from then on Writable(stream, p) returns epoch,
// so Kafka produce to p is accepted here at offsets continuing the WAL's.
// This node's own clients keep writing its own partition. A later Adopt
// with a higher epoch (taken again) replaces the epoch. Observers hear of
// it last.
func (b *Book) Adopt(stream string, p int32, epoch, next int64) error {
	if err := b.dropStale(stream, p, epoch); err != nil {
		return fmt.Errorf("adopt %s/%d: %w", stream, p, err)
	}
	if err := b.log.Apply(context.Background(), wal.Op{Kind: wal.OpEnsure, Stream: stream, Partition: p, Offset: next}).Err; err != nil {
		return fmt.Errorf("adopt %s/%d: %w", stream, p, err)
	}
	for {
		if _, err := b.resolve(context.Background(), stream); err != nil {
			return fmt.Errorf("adopt %s/%d: %w", stream, p, err)
		}
		b.mu.Lock()
		o := b.streams[stream]
		if o != nil {
			if cur, ok := o.epochs[p]; !ok || epoch > cur {
				o.epochs[p] = epoch
			}
		}
		obs := b.observers
		b.mu.Unlock()
		if o != nil {
			for _, ob := range obs {
				ob.Adopted(stream, p)
			}
			break
		}
		// Fenced out of its own partition in between: resolve again.
	}
	b.lg.Info("partition adopted", "stream", stream, "partition", p, "epoch", epoch, "next", next)
	return nil
}

// dropStale drops partition p of stream from the WAL if it holds records
// written at an epoch below epoch (any records, for epoch -1): they are
// from an earlier ownership of this node's and may not precede records of
// the new one. They are kept in the quarantine first; if they cannot be,
// nothing is dropped and the error is returned (and logged).
func (b *Book) dropStale(stream string, p int32, epoch int64) error {
	st, ok := b.log.Partition(stream, p)
	if !ok || st.Next == st.Released || epoch >= 0 && st.Epoch >= epoch {
		return nil
	}
	reason := fmt.Sprintf("stale: this node took partition %d over again; these records are from its earlier ownership (epoch %d)", p, st.Epoch)
	if epoch >= 0 {
		reason = fmt.Sprintf("stale: this node adopted partition %d at epoch %d; these records are of epoch %d", p, epoch, st.Epoch)
	}
	kept, err := b.quarantine(stream, p, st, reason)
	if err != nil {
		b.lg.Error("stale records of a partition being taken over cannot be quarantined; they stay in the WAL",
			"stream", stream, "partition", p, "records", st.Next-st.Released, "their_epoch", st.Epoch, "new_epoch", epoch, "err", err)
		return fmt.Errorf("quarantine stale records (nothing dropped): %w", err)
	}
	r := b.log.Apply(context.Background(), wal.Op{Kind: wal.OpDrop, Stream: stream, Partition: p, Epoch: math.MaxInt64})
	n, err := r.Dropped, r.Err
	if err != nil {
		b.lg.Error("drop stale records of a partition being taken over (they are in the quarantine too)", "stream", stream, "partition", p, "err", err)
		return fmt.Errorf("drop stale records: %w", err)
	}
	b.lg.Error("stale records of a partition this node takes over moved to the quarantine; inspect with `tributary quarantine list`, replay with `tributary quarantine replay`",
		"stream", stream, "partition", p, "records", n, "quarantined", kept, "their_epoch", st.Epoch, "new_epoch", epoch)
	return nil
}

// quarantineChunk bounds the records of one Quarantine.Keep.
const quarantineChunk = 8 << 20

// quarantine hands the unreleased records of partition p (state st) to
// the quarantine, in chunks, and returns how many it kept.
func (b *Book) quarantine(stream string, p int32, st wal.PartitionState, reason string) (int64, error) {
	b.mu.RLock()
	q := b.quar
	b.mu.RUnlock()
	if q == nil {
		return 0, errors.New("no quarantine configured")
	}
	var kept int64
	for off := st.Released; off < st.Next; {
		recs, err := b.log.Read(stream, p, off, 0, quarantineChunk)
		if err != nil {
			return kept, err
		}
		if len(recs) == 0 {
			break
		}
		if err := q.Keep(stream, p, recs, reason); err != nil {
			return kept, err
		}
		kept += int64(len(recs))
		off = recs[len(recs)-1].Offset + 1
	}
	return kept, nil
}

// Fenced forgets partition p of stream: another node owns it now (the
// uplink's commit or a replica said so). If it was this node's own
// partition, the stream is resolved again on its next record, and the
// catalog gives this node a new partition.
func (b *Book) Fenced(stream string, p int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.fallback, stream)
	o := b.streams[stream]
	if o == nil {
		return
	}
	delete(o.epochs, p)
	if o.own == p {
		delete(b.streams, stream)
	}
	b.lg.Warn("partition fenced: no longer written here", "stream", stream, "partition", p, "own", o.own == p)
}
