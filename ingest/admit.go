package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// CheckWritable refuses the streams no front door may write: the
// dead-letter tables of typed streams, which the uplink writes alone
// (whether or not the table exists yet). The error wraps
// tributary.ErrUnknownStream.
func CheckWritable(stream string) error {
	if tables.IsDLQ(stream) {
		return fmt.Errorf("%s: %w: names ending in %s are the dead-letter tables of typed streams", stream, tributary.ErrUnknownStream, tables.DLQSuffix)
	}
	return nil
}

// admit lets a write to stream in, or refuses it (see the package's
// invariants): nothing is stored of a refused write.
func (in *Ingest) admit(ctx context.Context, stream string) error {
	if err := CheckWritable(stream); err != nil {
		return err
	}
	if in.configured[stream] {
		return nil
	}
	if _, ok := in.admitted.Load(stream); ok {
		return nil
	}
	if _, ok := in.book.Streams()[stream]; !ok {
		var err error
		if in.cfg.AutoCreate {
			err = in.Ensure(ctx, stream)
		} else {
			err = in.exists(ctx, stream)
		}
		if err != nil {
			return err
		}
	}
	in.admitted.Store(stream, struct{}{})
	return nil
}

// Ensure creates stream when it does not exist — unless it is a
// dead-letter stream, or MaxStreams exist already (an error wrapping
// tributary.ErrStreamLimit) — and allocates this node's partition of it:
// a write's auto-creation, and Kafka's (Metadata, produce).
func (in *Ingest) Ensure(ctx context.Context, stream string) error {
	if err := CheckWritable(stream); err != nil {
		return err
	}
	if _, ok := in.book.Streams()[stream]; !ok && in.cfg.MaxStreams > 0 {
		streams, err := in.cat.ListStreams(ctx)
		if err != nil {
			return err
		}
		if !slices.Contains(streams, stream) && len(streams) >= in.cfg.MaxStreams {
			return fmt.Errorf("create %s: %w (%d streams, kafka.max_streams %d)", stream, tributary.ErrStreamLimit, len(streams), in.cfg.MaxStreams)
		}
	}
	_, _, err := in.book.Own(ctx, stream)
	return err
}

// exists refuses a stream the catalog does not have.
func (in *Ingest) exists(ctx context.Context, stream string) error {
	_, err := in.cat.LoadTable(ctx, stream)
	if errors.Is(err, tables.ErrNoSuchStream) {
		return fmt.Errorf("%s: %w", stream, tributary.ErrUnknownStream)
	}
	return err
}
