package wal

import (
	"errors"

	"github.com/tributary-io/tributary"
)

// ErrPredecessorFailed refuses an append made with AppendAsyncAfter whose
// predecessor failed (or was canceled): nothing of it was written.
var ErrPredecessorFailed = errors.New("wal: an earlier append this one follows failed")

// Ticket names an append queued by AppendAsyncAfter. The zero Ticket names
// none.
type Ticket struct{ o *op }

// AppendAsyncAfter is AppendAsync for an append that must not be stored
// unless the append named by after was (a producer's consecutive batches:
// the second is meaningless without the first). Appends are applied in
// the order they are queued, so when this one is applied after's outcome
// is known: if it failed, was refused or was canceled, this append is
// refused whole with ErrPredecessorFailed — in the same group commit as
// well as in a later one — and nothing of it is written. A zero after
// (or one that succeeded) imposes nothing. The returned Ticket names this
// append for the next one.
//
// done is called exactly once, as for AppendAsync.
//
// Deprecated: use Submit(Op{Kind: OpAppend, Records: recs, After: after, Done: …}).
func (w *WAL) AppendAsyncAfter(after Ticket, recs []*tributary.Record, done func(error)) Ticket {
	return w.Submit(Op{Kind: OpAppend, Records: recs, After: after, Done: func(r Result) { done(r.Err) }})
}

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
