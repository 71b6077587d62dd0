package tables

// Partition ownership and fencing.
//
// Invariants:
//
//  1. One writer per partition and epoch. A partition has exactly one
//     owner at a time, recorded in the table as tributary.owner.<p> with its
//     ownership epoch tributary.epoch.<p>. Epochs only grow, and every change
//     of owner (TakeOver) raises the epoch by one. A partition allocated by
//     AllocatePartition starts at epoch 0 with its allocating node as owner.
//  2. Changes are compare-and-swap commits. AllocatePartition and TakeOver
//     commit an empty append together with the properties, so the commit
//     asserts the branch head it read: of two concurrent changes, one loses,
//     reloads and decides again against the winner's result.
//  3. Stale owners never commit. Every PartitionAppend carries the epoch
//     its records were accepted at; CommitAppend, in the same reload-check-
//     commit loop as the high-water mark, refuses (FencedError) an append
//     whose epoch is below the table's epoch for that partition, before
//     any other check. A data commit asserts the head too, so a TakeOver
//     landing between the check and the commit makes the commit reload and
//     meet the new epoch.
//  4. The new owner's history has a known start. TakeOverAt records, in
//     the same compare-and-swap commit as the new owner and epoch,
//     tributary.epoch_start.<p>: the first offset the new owner may
//     assign (the end of the replica it copies from, or the table's mark
//     if that is higher). Below it the partition's history is the old
//     owner's records; at and above it the old owner's records reached no
//     one else, and the fenced node re-admits them (package uplink). A
//     take-over without a start (TakeOver, or one by an older version)
//     leaves the property empty: the fenced node quarantines instead.
//
// Tables written before ownership existed have no owner properties: there,
// the owner of partition p is the node whose tributary.partition.node.<id>
// names p, at epoch 0 (Owners falls back to it), so old tables and old
// nodes keep working unchanged.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

const (
	// PropOwner + "<partition>" is the node id that owns the partition now.
	PropOwner = "tributary.owner."
	// PropEpoch + "<partition>" is the owner's ownership epoch.
	PropEpoch = "tributary.epoch."
	// PropEpochStart + "<partition>" is the first offset of the current
	// epoch's owner ("" or absent: unknown), written with PropEpoch.
	PropEpochStart = "tributary.epoch_start."
)

// ErrNotOwner is wrapped by *NotOwnerError.
var ErrNotOwner = errors.New("partition has another owner")

// Ownership is a partition's owner and ownership epoch.
type Ownership struct {
	Node  string
	Epoch int64
}

// FencedError refuses a commit to a partition that the committing node no
// longer owns at the append's epoch: another node has taken it over (the
// table's Epoch is higher). Nothing of the commit was written. errors.Is
// ErrFenced.
type FencedError struct {
	Stream    string
	Partition int32
	Owner     string // the table's owner of the partition
	Epoch     int64  // the table's epoch
	Have      int64  // the append's epoch
	HighWater int64  // the partition's committed mark: every offset below it is in the table
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("commit %s partition %d: fenced: owned by %q at epoch %d, append is of epoch %d (mark %d)",
		e.Stream, e.Partition, e.Owner, e.Epoch, e.Have, e.HighWater)
}

func (e *FencedError) Unwrap() error { return ErrFenced }

// NotOwnerError refuses a TakeOver whose expected owner (From) is no longer
// the partition's owner (Owner, at Epoch): another node took it first, or
// it does not exist (Owner ""). errors.Is ErrNotOwner.
type NotOwnerError struct {
	Stream    string
	Partition int32
	From      string
	Owner     string
	Epoch     int64
}

func (e *NotOwnerError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("take over %s partition %d from %q: the partition has no owner (not allocated)", e.Stream, e.Partition, e.From)
	}
	return fmt.Sprintf("take over %s partition %d from %q: owned by %q at epoch %d", e.Stream, e.Partition, e.From, e.Owner, e.Epoch)
}

func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// Owners returns the owner and epoch of every partition of t: the owner
// properties where present, else the node mapping at epoch 0 (tables
// written before ownership existed).
func Owners(t *table.Table) map[int32]Ownership {
	return ownersOf(t.Properties())
}

// Owner returns the ownership of one partition; ok is false if no node
// owns or maps it.
func Owner(t *table.Table, partition int32) (o Ownership, ok bool) {
	o, ok = ownersOf(t.Properties())[partition]
	return o, ok
}

func ownersOf(props iceberg.Properties) map[int32]Ownership {
	out := map[int32]Ownership{}
	epochs := map[int32]int64{}
	for k, v := range props {
		switch {
		case strings.HasPrefix(k, PropNodePartition):
			p, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				continue
			}
			if _, ok := out[int32(p)]; !ok {
				out[int32(p)] = Ownership{Node: k[len(PropNodePartition):]}
			}
		case strings.HasPrefix(k, PropEpoch):
			p, err1 := strconv.ParseInt(k[len(PropEpoch):], 10, 32)
			e, err2 := strconv.ParseInt(v, 10, 64)
			if err1 == nil && err2 == nil {
				epochs[int32(p)] = e
			}
		}
	}
	// Explicit owners win over the node mapping, whatever the map order.
	for k, v := range props {
		if ps, ok := strings.CutPrefix(k, PropOwner); ok && v != "" {
			if p, err := strconv.ParseInt(ps, 10, 32); err == nil {
				out[int32(p)] = Ownership{Node: v}
			}
		}
	}
	for p, e := range epochs {
		if o, ok := out[p]; ok {
			o.Epoch = e
			out[p] = o
		}
	}
	return out
}

// Owners reloads a stream's table and returns its partitions' ownership.
func (c *Catalog) Owners(ctx context.Context, stream string) (map[int32]Ownership, error) {
	t, err := c.LoadTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	return Owners(t), nil
}

// Marks reloads a stream's table, creating it on first use, and returns
// its partitions' committed marks and ownership from one load.
func (c *Catalog) Marks(ctx context.Context, stream string) (map[int32]int64, map[int32]Ownership, error) {
	t, err := c.EnsureTable(ctx, stream)
	if err != nil {
		return nil, nil, err
	}
	return HighWaters(t), Owners(t), nil
}

// ownerProps are the properties that make node the owner of p at epoch.
func ownerProps(p int32, node string, epoch int64) iceberg.Properties {
	ps := strconv.Itoa(int(p))
	return iceberg.Properties{PropOwner + ps: node, PropEpoch + ps: strconv.FormatInt(epoch, 10)}
}

// EpochStart returns the epoch of partition p of t and the first offset
// of its owner's history (invariant 4); ok is false when the table does
// not record it (a take-over without a start, or none yet).
func EpochStart(t *table.Table, p int32) (epoch, start int64, ok bool) {
	props := t.Properties()
	ps := strconv.Itoa(int(p))
	epoch, _ = strconv.ParseInt(props[PropEpoch+ps], 10, 64)
	start, err := strconv.ParseInt(props[PropEpochStart+ps], 10, 64)
	if err != nil || start < 0 {
		return epoch, 0, false
	}
	return epoch, start, true
}

// EpochStart reloads a stream's table and returns partition p's owner
// and the first offset of its epoch (see EpochStart).
func (c *Catalog) EpochStart(ctx context.Context, stream string, p int32) (o Ownership, start int64, ok bool, err error) {
	t, err := c.LoadTable(ctx, stream)
	if err != nil {
		return Ownership{}, 0, false, err
	}
	o, _ = Owner(t, p)
	_, start, ok = EpochStart(t, p)
	return o, start, ok, nil
}

// TakeOver makes node to the owner of partition p of stream at the next
// epoch, if node from owns it now: a compare-and-swap through the catalog
// (an empty append with the new properties, so a concurrent change makes
// one of the two reload and decide again). It returns the new epoch.
//
// If to already owns p (say, a retry after an unknown outcome), TakeOver
// returns its current epoch and changes nothing. If another node owns it,
// or nobody, it returns a *NotOwnerError (errors.Is ErrNotOwner). The node
// mapping of from (tributary.partition.node.<from>) is left alone: from's
// next AllocatePartition notices that its partition has another owner and
// gives it a new one; to keeps its own partition and owns p besides.
func (c *Catalog) TakeOver(ctx context.Context, stream string, p int32, from, to string) (int64, error) {
	return c.TakeOverAt(ctx, stream, p, from, to, -1)
}

// TakeOverAt is TakeOver recording where the new owner's history starts
// (invariant 4): tributary.epoch_start.<p> = max(start, the table's mark
// of p), in the same commit. The caller passes the end of the copy it
// takes over from, read after the copy was frozen; a negative start
// records none (the fenced node then quarantines).
func (c *Catalog) TakeOverAt(ctx context.Context, stream string, p int32, from, to string, start int64) (int64, error) {
	if from == to || to == "" {
		return 0, fmt.Errorf("take over %s partition %d: from %q to %q: %w", stream, p, from, to, ErrInvalidTakeOver)
	}
	for attempt := 0; ; attempt++ {
		t, err := c.LoadTable(ctx, stream)
		if err != nil {
			return 0, err
		}
		cur, ok := Owner(t, p)
		switch {
		case ok && cur.Node == to:
			return cur.Epoch, nil
		case !ok || cur.Node != from:
			return 0, &NotOwnerError{Stream: stream, Partition: p, From: from, Owner: cur.Node, Epoch: cur.Epoch}
		}
		epoch := cur.Epoch + 1
		props := ownerProps(p, to, epoch)
		props[PropEpochStart+strconv.Itoa(int(p))] = ""
		if start >= 0 {
			props[PropEpochStart+strconv.Itoa(int(p))] = strconv.FormatInt(max(start, HighWater(t, p)), 10)
		}
		err = c.commitProps(ctx, t, props, iceberg.Properties{
			"tributary.operation": "take-over", "tributary.node": to, "tributary.from": from,
			"tributary.partition": strconv.Itoa(int(p)), "tributary.epoch": strconv.FormatInt(epoch, 10)})
		if err == nil {
			return epoch, nil
		}
		if attempt < 20 && isConflict(err) {
			continue
		}
		return 0, fmt.Errorf("take over %s partition %d: %w", stream, p, err)
	}
}

// ErrInvalidTakeOver refuses a TakeOver from a node to itself or to "".
var ErrInvalidTakeOver = errors.New("invalid take-over")

// commitProps commits properties with an empty append. A property-only
// commit asserts nothing about the properties it read, so two writers
// could both apply a decision made on the same state; the empty append
// moves the main branch and asserts its old head, so the catalog's
// compare-and-swap lets exactly one of them win.
func (c *Catalog) commitProps(ctx context.Context, t *table.Table, props, summary iceberg.Properties) error {
	tx := t.NewTransaction()
	if err := tx.SetProperties(props); err != nil {
		return err
	}
	if err := tx.AddFiles(ctx, nil, summary, true); err != nil {
		return err
	}
	_, err := tx.Commit(ctx)
	return err
}

// fenced checks an append's epoch against the table's ownership of its
// partition: a *FencedError if the table's epoch is higher.
func fenced(stream string, owners map[int32]Ownership, a PartitionAppend, mark int64) error {
	o, ok := owners[a.Partition]
	if !ok || o.Epoch <= a.Epoch {
		return nil
	}
	return &FencedError{Stream: stream, Partition: a.Partition, Owner: o.Node, Epoch: o.Epoch, Have: a.Epoch, HighWater: mark}
}
