package consume

// Cloud-produced records (package cloudwrite) are visible before their
// table commit: with Config.Tail set, a partition's high-water mark is
// the end of what the cloud has sequenced when that is beyond the
// table's mark, and a fetch at or above the table's mark is served from
// the tail, encoded as record batches like a row group. With
// Config.Producer set, Produce and InitProducerId are the producer's
// (kafka/produce's request handling over the cloud write path) instead
// of refused.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka"
)

// Tail is the sequenced records of cloud-produced partitions beyond their
// table's mark (cloudwrite.Tail).
type Tail interface {
	// End is the partition's next offset; ok false when the cloud has
	// written nothing to it.
	End(ctx context.Context, stream string, p int32) (end int64, ok bool, err error)
	// Read returns records dense from from, about maxBytes of them at
	// most (at least one if any); empty when from is not in the tail.
	Read(ctx context.Context, stream string, p int32, from int64, maxBytes int) ([]*tributary.Record, error)
}

// Producer answers Produce and InitProducerId (a produce.Server that
// does not listen itself).
type Producer interface {
	kafka.Handler
	kafka.Starter
	// EnsurePartition allocates the stream's cloud partition if it has
	// none, creating the stream first if create, and reports whether it
	// created anything; Metadata calls it for every stream a producer
	// may produce to, so that producers see the partition they write.
	EnsurePartition(ctx context.Context, stream string, create bool) (bool, error)
}

// end is the partition's high-water mark: the table's, or the tail's
// when it is beyond.
func (cs *Server) end(ctx context.Context, stream string, p int32, mark int64) int64 {
	if cs.ccfg.Tail == nil {
		return mark
	}
	end, ok, err := cs.ccfg.Tail.End(ctx, stream, p)
	if err != nil {
		cs.log.Warn("kafka: cloud tail end", "stream", stream, "partition", p, "err", err)
		return mark
	}
	if ok && end > mark {
		return end
	}
	return mark
}

// fetchTail encodes the tail's records from off as record batches.
func (cs *Server) fetchTail(ctx context.Context, stream string, p int32, off int64, limit int) ([]byte, error) {
	recs, err := cs.ccfg.Tail.Read(ctx, stream, p, off, max(limit, 1))
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return encodeGroup(recs[0].Offset, recs).buf, nil
}

// StartRequest hands Produce to the producer (kafka.Starter); every
// other request is Handle's.
func (cs *Server) StartRequest(ctx context.Context, req *kafka.Request) (func() (resp kmsg.Response, closeAfter bool), bool) {
	if cs.ccfg.Producer == nil {
		return nil, false
	}
	return cs.ccfg.Producer.StartRequest(ctx, req)
}
