package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
	"github.com/tributary-io/tributary/subscription"
	"github.com/tributary-io/tributary/tables"
)

// Caps of one FetchResponse.
const (
	DefaultMaxRecords = 500
	MaxRecords        = 10000
	DefaultMaxBytes   = 1 << 20
	MaxBytes          = 4 << 20
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Auth   *auth.Authority
	Limits Limits
	Logger *slog.Logger
	// Catalog is the catalog name, the tenant of the Pulsar topic names
	// subscriptions are kept under.
	Catalog string
	// Subscriptions is the cloud's subscription manager, the Pulsar
	// server's when it runs (nil: Subscribe is Unimplemented).
	Subscriptions *subscription.Manager
}

// Reader serves ReadService in the cloud.
type Reader struct {
	cfg    ReaderConfig
	tables *tables.Reader
	calls  calls
	stats  Stats
}

// NewReader returns a Reader over tr.
func NewReader(cfg ReaderConfig, tr *tables.Reader) *Reader {
	cfg.Limits.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rd := &Reader{cfg: cfg, tables: tr}
	rd.calls = newCalls(cfg.Limits.MaxStreams, &rd.stats.Streams, &rd.stats.Rejected)
	return rd
}

// Stats returns the counters.
func (rd *Reader) Stats() *Stats { return &rd.stats }

// Register mounts ReadService on mux.
func (rd *Reader) Register(mux *http.ServeMux) {
	path, h := pbconnect.NewReadServiceHandler(rd, connect.WithReadMaxBytes(64<<10))
	mux.Handle(path, withIdentity(rd.cfg.Auth, h))
}

// Fetch streams req's partition from its offset in batches: to the
// committed end, or, with follow, on as commits land (the table is looked
// at again every half metadata age) until the client goes away.
func (rd *Reader) Fetch(ctx context.Context, req *connect.Request[pb.FetchRequest], st *connect.ServerStream[pb.FetchResponse]) error {
	id, err := guard(ctx)
	if err != nil {
		return err
	}
	m := req.Msg
	if _, _, err := tributary.ParseStream(m.Stream); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("stream: %w", err))
	}
	if err := authorize(rd.cfg.Auth, id, auth.Consume, m.Stream); err != nil {
		return err
	}
	maxRecs, maxBytes := int(m.MaxRecords), int(m.MaxBytes)
	switch {
	case m.Partition < 0:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("partition: %d, want >= 0", m.Partition))
	case m.Offset < -2:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("offset: %d, want >= 0, -1 (earliest) or -2 (latest)", m.Offset))
	case maxRecs < 0 || maxRecs > MaxRecords:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("max_records: %d, want 0 (500) to %d", maxRecs, MaxRecords))
	case maxBytes < 0 || maxBytes > MaxBytes:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("max_bytes: %d, want 0 (1 MiB) to %d", maxBytes, MaxBytes))
	}
	if maxRecs == 0 {
		maxRecs = DefaultMaxRecords
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	v, err := rd.tables.Partition(ctx, m.Stream, m.Partition)
	if err != nil {
		return tableError(m.Stream, err)
	}
	off := m.Offset
	switch {
	case off == -1:
		off = v.Earliest
	case off == -2:
		off = v.End
	case off < v.Earliest || off > v.End:
		return connect.NewError(connect.CodeOutOfRange, fmt.Errorf("offset %d out of range: %s partition %d holds [%d, %d)", off, v.Stream, v.Partition, v.Earliest, v.End))
	}
	if err := rd.calls.acquire(); err != nil {
		return err
	}
	defer rd.calls.release()
	// The headers now: a client waits for them before its first Receive,
	// and a following Fetch at the end may have nothing to send for long.
	if err := st.Send(nil); err != nil {
		return err
	}
	tick := rd.tables.MetadataMaxAge() / 2
	for {
		resp := &pb.FetchResponse{HighWatermark: v.End}
		size := 0
		err := v.Read(ctx, off, func(r *tributary.Record) bool {
			sz := len(r.Value) + len(r.Key)
			if len(resp.Records) > 0 && (len(resp.Records) >= maxRecs || size+sz > maxBytes) {
				return false
			}
			size += sz
			resp.Records = append(resp.Records, record(v.Stream, r))
			return true
		})
		if err != nil {
			return tableError(v.Stream, err)
		}
		if n := len(resp.Records); n > 0 {
			off = resp.Records[n-1].Offset + 1
			rd.stats.Records.Add(int64(n))
			rd.stats.Bytes.Add(int64(size))
			if err := st.Send(resp); err != nil {
				return err
			}
			if off < v.End {
				continue
			}
		}
		if !m.Follow && off >= v.End {
			return nil
		}
		select {
		case <-ctx.Done():
			return expired(ctx)
		case <-time.After(tick):
		}
		if nv, err := rd.tables.Partition(ctx, v.Stream, v.Partition); err == nil {
			v = nv
		} else if ctx.Err() != nil {
			return expired(ctx)
		}
	}
}

func record(stream string, r *tributary.Record) *pb.Record {
	out := &pb.Record{Stream: stream, Partition: r.Partition, Offset: r.Offset, TimestampUs: r.Timestamp,
		Key: r.Key, Value: r.Value, Topic: r.Topic, Source: r.Source}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, &pb.Header{Key: h.Key, Value: h.Value})
	}
	return out
}

func tableError(stream string, err error) error {
	switch {
	case errors.Is(err, tables.ErrNoSuchStream):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("stream %s not found", stream))
	case errors.Is(err, tables.ErrNoSuchPartition):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("reading %s: %w", stream, err))
}
