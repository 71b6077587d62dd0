package tables

import (
	"errors"

	"github.com/tributary-io/tributary"
)

var (
	// ErrInvalidStream is returned for a stream name that is not namespace.stream.
	ErrInvalidStream = tributary.ErrInvalidStream
	// ErrNoSuchStream is returned when a stream's table does not exist.
	ErrNoSuchStream = errors.New("no such stream")
	// ErrNoSuchPartition is returned when a stream has no such partition.
	ErrNoSuchPartition = errors.New("no such partition")
	// ErrConflict is returned by a commit whose view of the table was stale;
	// the caller reloads and decides again.
	ErrConflict = errors.New("commit conflict")
	// ErrFenced is returned when this node no longer owns a partition it tries
	// to commit to.
	ErrFenced = errors.New("partition owned by another node")
	// ErrForeignLocation refuses maintenance of a table whose location is
	// not its own folder of the warehouse (it would delete files there).
	ErrForeignLocation = errors.New("table outside its warehouse folder")
	// ErrUnsupportedSpec is returned for a table whose partition spec is not
	// one transform (day or hour) of the timestamp column.
	ErrUnsupportedSpec = errors.New("unsupported partition spec")
	// ErrSpansBuckets is returned for a data file whose timestamps fall in
	// more than one partition bucket of its table (see CutRuns).
	ErrSpansBuckets = errors.New("data file spans partition buckets")
	// ErrSchema is returned for a table whose schema cannot be evolved to
	// the envelope (a column changed outside Tributary: see evolve.go).
	ErrSchema = errors.New("table schema does not match the envelope")
)
