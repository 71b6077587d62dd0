package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// ingest is the Sink of the protocol front doors: it resolves each record's
// partition and appends to the WAL.
type ingest struct {
	node string
	wal  *wal.WAL
	cat  *tables.Catalog
	log  *slog.Logger

	mu    sync.RWMutex
	parts map[string]int32 // stream -> partition this node writes
	sf    singleflight.Group
	async *semaphore.Weighted // bytes queued by AppendAsync
	count streamCounters      // durable messages and bytes by protocol and stream
	repl  replication         // WAL replication to peers (cluster only)
}

func newIngest(node string, w *wal.WAL, cat *tables.Catalog, log *slog.Logger) *ingest {
	in := &ingest{node: node, wal: w, cat: cat, log: log, parts: map[string]int32{},
		async: semaphore.NewWeighted(maxAsyncBytes)}
	// Streams this node has written before are known without the catalog,
	// so a restart while the cloud is unreachable keeps accepting them.
	for _, p := range w.Partitions() {
		if old, ok := in.parts[p.Stream]; !ok || p.Partition > old {
			in.parts[p.Stream] = p.Partition
		}
	}
	return in
}

// Append resolves partitions and makes the records durable.
func (in *ingest) Append(ctx context.Context, recs ...*wal.Record) error {
	for _, r := range recs {
		p, err := in.partition(ctx, r.Stream)
		if err != nil {
			return err
		}
		r.Partition = p
		if r.Node == "" {
			r.Node = in.node
		}
	}
	if err := in.repl.check(); err != nil {
		return err
	}
	if err := in.wal.Append(ctx, recs...); err != nil {
		return err
	}
	in.count.add(recs)
	return in.repl.wait(ctx, recs)
}

// partition returns this node's partition of stream, allocating it through
// the catalog on first use and moving the WAL to the table's mark.
func (in *ingest) partition(ctx context.Context, stream string) (int32, error) {
	in.mu.RLock()
	p, ok := in.parts[stream]
	in.mu.RUnlock()
	if ok {
		return p, nil
	}
	v, err, _ := in.sf.Do(stream, func() (any, error) {
		if _, _, err := tables.ParseStream(stream); err != nil {
			return int32(0), err
		}
		p, err := in.cat.AllocatePartition(ctx, stream, in.node)
		if err != nil {
			return int32(0), fmt.Errorf("stream %s: %w", stream, err)
		}
		t, err := in.cat.LoadTable(ctx, stream)
		if err != nil {
			return int32(0), fmt.Errorf("stream %s: %w", stream, err)
		}
		if err := in.wal.EnsurePartition(stream, p, tables.HighWater(t, p)); err != nil {
			return int32(0), fmt.Errorf("stream %s: %w", stream, err)
		}
		in.mu.Lock()
		in.parts[stream] = p
		in.mu.Unlock()
		in.log.Info("stream ready", "stream", stream, "partition", p, "table", in.cat.TableLocation(stream))
		return p, nil
	})
	if err != nil {
		return 0, err
	}
	return v.(int32), nil
}

// maxAsyncBytes bounds the payload bytes queued by AppendAsync and not yet
// durable; beyond it AppendAsync waits (back-pressure on the connection).
const maxAsyncBytes = 32 << 20

// AppendAsync resolves the partition and queues the record for the next
// group commit without waiting for it (QoS 0).
func (in *ingest) AppendAsync(ctx context.Context, r *wal.Record, done func(error)) error {
	p, err := in.partition(ctx, r.Stream)
	if err != nil {
		return err
	}
	r.Partition = p
	if r.Node == "" {
		r.Node = in.node
	}
	n := int64(len(r.Value)) + 256
	if err := in.async.Acquire(ctx, n); err != nil {
		return err
	}
	in.wal.AppendAsync([]*wal.Record{r}, func(err error) {
		in.async.Release(n)
		if err == nil {
			in.count.add([]*wal.Record{r})
			in.repl.notify([]*wal.Record{r})
		}
		done(err)
	})
	return nil
}

// Streams returns the streams this node writes and their partitions.
func (in *ingest) Streams() map[string]int32 {
	in.mu.RLock()
	defer in.mu.RUnlock()
	out := make(map[string]int32, len(in.parts))
	for k, v := range in.parts {
		out[k] = v
	}
	return out
}
