package wal

import (
	"errors"
	"fmt"

	"github.com/tributary-io/tributary"
)

// The WAL stores tributary.Record values (see package tributary); the
// caller of Append fills every field but Offset (and Timestamp, when it
// leaves it zero); Append assigns Offset densely per (Stream, Partition).
// OpAppendAt stores records whose Offset is already assigned.

var (
	// ErrBudgetExceeded is returned (wrapped) by Append when the records
	// would take the WAL over its disk budget. Nothing of the refused append
	// was written. It is tributary.ErrBudget, so every layer above reads the
	// same reason (tributary.ReasonOf).
	ErrBudgetExceeded = tributary.ErrBudget
	// ErrClosed is returned by operations on a closed WAL.
	ErrClosed = errors.New("wal: closed")
	// ErrGap is wrapped by *GapError.
	ErrGap = errors.New("wal: offset gap")
)

// GapError refuses an OpAppendAt whose record for (Stream, Partition) is at
// Offset while the partition's next offset is Next (< Offset): the sender
// must resend from Next.
type GapError struct {
	Stream    string
	Partition int32
	Offset    int64 // the first record that does not follow
	Next      int64 // the partition's next offset: resend from here
}

func (e *GapError) Error() string {
	return fmt.Sprintf("wal: append at %s/%d: record at offset %d but next offset is %d", e.Stream, e.Partition, e.Offset, e.Next)
}

func (e *GapError) Unwrap() error { return ErrGap }
