package wal

import (
	"errors"
)

// ErrPredecessorFailed refuses an OpAppend whose After failed (or was
// canceled): nothing of it was written.
var ErrPredecessorFailed = errors.New("wal: an earlier append this one follows failed")

// Ticket names an op queued by Submit, for a later OpAppend's After. The
// zero Ticket names none.
type Ticket struct{ o *op }

// predecessorFailed tells (in the committer, when o is applied) whether
// o's predecessor failed; it forgets the predecessor, so that a chain of
// tickets does not keep every earlier op alive.
func predecessorFailed(o *op) bool {
	p := o.after
	if p == nil {
		return false
	}
	o.after = nil
	return p.failed.Load() || p.state.Load() == opCanceled
}
