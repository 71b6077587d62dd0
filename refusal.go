package tributary

import "errors"

// Reason is why an edge node refused to accept records: back-pressure or a
// denial, never a drop. Nothing of a refused append was written, so the
// client may retry (except for ReasonUnauthorized), unless the error also
// wraps ErrAfterAppend.
type Reason int

const (
	// ReasonNone: the error is not a refusal (or there is no error).
	ReasonNone Reason = iota
	// ReasonBudget: the WAL's disk budget is exhausted (ErrBudget).
	ReasonBudget
	// ReasonReplication: too few replicas could store the records under the
	// refuse policy (ErrNotReplicated).
	ReasonReplication
	// ReasonFenced: the partition is owned by another node now, or is being
	// taken over by this one (ErrFenced).
	ReasonFenced
	// ReasonUnauthorized: the principal may not write there (ErrUnauthorized).
	ReasonUnauthorized
	// ReasonUnavailable: the store the records go to failed (the cloud
	// write path's object store or state database: ErrUnavailable).
	ReasonUnavailable
)

// The sentinel error of each Reason. Packages wrap them with their own
// context (fmt.Errorf("...: %w", ErrBudget)); callers test with errors.Is
// or ReasonOf.
var (
	ErrBudget        = errors.New("wal disk budget exceeded")
	ErrNotReplicated = errors.New("too few replicas")
	ErrFenced        = errors.New("partition not owned by this node")
	ErrUnauthorized  = errors.New("not authorized")
	ErrUnavailable   = errors.New("storage unavailable")
)

// ErrAfterAppend marks an error that came after the records were made
// durable in this node's WAL: the replicas did not confirm them in time
// (or the wait was abandoned), so the append is reported as failed
// although the records are stored and will be uploaded. It is wrapped
// together with the cause (fmt.Errorf("%w: %w", ErrAfterAppend, err)), so
// ReasonOf still names the cause. A protocol that deduplicates retries
// (Kafka's idempotent producers) must record such an append as stored,
// and a client's retry of it must find it, not store it twice.
var ErrAfterAppend = errors.New("stored on this node")

// String names the reason as metrics label values and logs do.
func (r Reason) String() string {
	switch r {
	case ReasonBudget:
		return "budget"
	case ReasonReplication:
		return "replication"
	case ReasonFenced:
		return "fenced"
	case ReasonUnauthorized:
		return "unauthorized"
	case ReasonUnavailable:
		return "unavailable"
	}
	return "none"
}

// ReasonOf returns the reason err refuses for, or ReasonNone when err is nil
// or no refusal (an I/O error, a closed log, a cancelled context...).
func ReasonOf(err error) Reason {
	switch {
	case err == nil:
		return ReasonNone
	case errors.Is(err, ErrBudget):
		return ReasonBudget
	case errors.Is(err, ErrNotReplicated):
		return ReasonReplication
	case errors.Is(err, ErrFenced):
		return ReasonFenced
	case errors.Is(err, ErrUnauthorized):
		return ReasonUnauthorized
	case errors.Is(err, ErrUnavailable):
		return ReasonUnavailable
	}
	return ReasonNone
}
