package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
	"github.com/tributary-io/tributary/internal/batch"
)

// Errors the Appender returns for streams it will not write (its own).
var (
	ErrUnknownStream = tributary.ErrUnknownStream
	ErrStreamLimit   = tributary.ErrStreamLimit
)

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	Auth   *auth.Authority
	Limits Limits
	Logger *slog.Logger
}

// Producer serves ProduceService at the edge.
type Producer struct {
	cfg   ProducerConfig
	app   tributary.Appender
	calls calls
	stats Stats
}

// Stats are the counters of a Producer or Reader.
type Stats struct {
	Records  atomic.Int64 // records made durable (Producer) or served (Reader)
	Bytes    atomic.Int64 // their value bytes
	Refused  atomic.Int64 // records answered with an error (Producer)
	Streams  atomic.Int64 // calls being served now
	Rejected atomic.Int64 // calls refused at max_streams
}

// NewProducer returns a Producer appending to app (the edge node's write
// path): each run of records of one stream and partition is one Append.
func NewProducer(cfg ProducerConfig, app tributary.Appender) *Producer {
	cfg.Limits.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Producer{cfg: cfg, app: app}
	p.calls = newCalls(cfg.Limits.MaxStreams, &p.stats.Streams, &p.stats.Rejected)
	return p
}

// Stats returns the counters.
func (p *Producer) Stats() *Stats { return &p.stats }

// Register mounts ProduceService on mux.
func (p *Producer) Register(mux *http.ServeMux) {
	path, h := pbconnect.NewProduceServiceHandler(p, connect.WithReadMaxBytes(int(maxRequestBytes(p.cfg.Limits))))
	mux.Handle(path, withIdentity(p.cfg.Auth, h))
}

// maxRequestBytes caps one ProduceRequest: 4 records of the largest size
// (or 8 MiB of smaller ones); beyond, the call ends (RESOURCE_EXHAUSTED).
func maxRequestBytes(l Limits) int64 { return max(4*l.MaxRecordBytes, 8<<20) + 64<<10 }

// Caps of the pipeline between receiving and the WAL, per call.
const (
	maxAheadBytes = 8 << 20
	maxRunRecs    = 1000
	maxRunBytes   = 4 << 20
	queueDepth    = 4096
)

// item is one received record on its way to the WAL (or, with none, a
// request refused as a whole).
type item struct {
	req       uint64 // the request's id
	stream    string
	partition int32
	last      bool // the last item of its request
	none      bool // a request with no record: refused as a whole (err)
	rec       *tributary.Record
	size      int64
	err       *pb.Error // refused before the WAL
}

// maxRequestRecords caps the records of one ProduceRequest.
const maxRequestRecords = 10000

// Produce receives requests on a goroutine and appends their records in
// runs (what was received while the previous run was being made
// durable), answering each request, in order, once all of its records
// are.
func (p *Producer) Produce(ctx context.Context, st *connect.BidiStream[pb.ProduceRequest, pb.ProduceResponse]) error {
	id, err := guard(ctx)
	if err != nil {
		return err
	}
	if err := p.calls.acquire(); err != nil {
		return err
	}
	defer p.calls.release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan *item, queueDepth)
	ahead := semaphore.NewWeighted(maxAheadBytes)
	recvErr := make(chan error, 1)
	go func() {
		defer close(items)
		recvErr <- p.receive(ctx, st, id, items, ahead)
	}()
	runs := batch.Runs(items, batch.Caps{Items: maxRunRecs, Bytes: maxRunBytes}, func(it *item) int64 { return it.size },
		func(a, b *item) bool { return a.stream == b.stream && a.partition == b.partition }, func(it *item) bool { return it.err != nil })
	var resp *pb.ProduceResponse // the request being answered
	for run := range runs {
		p.append(ctx, run)
		for _, it := range run {
			ahead.Release(it.size)
			if resp == nil {
				resp = &pb.ProduceResponse{Id: it.req, Stream: it.stream}
			}
			switch {
			case it.none:
				resp.Error = it.err
			case it.err != nil:
				resp.Results = append(resp.Results, &pb.ProduceResult{Error: it.err})
			default:
				resp.Results = append(resp.Results, &pb.ProduceResult{Partition: it.rec.Partition, Offset: it.rec.Offset, TimestampUs: it.rec.Timestamp})
			}
			if it.last {
				if err := st.Send(resp); err != nil {
					return err
				}
				resp = nil
			}
		}
	}
	return <-recvErr
}

// receive reads the call's requests into items until the client closes
// its side (nil) or the call fails.
func (p *Producer) receive(ctx context.Context, st *connect.BidiStream[pb.ProduceRequest, pb.ProduceResponse], id identity,
	items chan<- *item, ahead *semaphore.Weighted) error {
	stream := ""
	allowed := map[string]error{}
	send := func(it *item) error {
		if it.err != nil {
			p.stats.Refused.Add(1)
		} else if err := ahead.Acquire(ctx, it.size); err != nil {
			return err
		}
		select {
		case items <- it:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		req, err := st.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if req.Stream != "" {
			stream = req.Stream
		}
		// What refuses the whole request.
		var whole *pb.Error
		invalid := func(format string, args ...any) *pb.Error {
			return &pb.Error{Code: connect.CodeInvalidArgument.String(), Message: fmt.Sprintf(format, args...)}
		}
		switch {
		case stream == "":
			whole = invalid("stream: not set (the first request names it)")
		case req.Partition != nil && *req.Partition < 0:
			whole = invalid("partition: %d, want >= 0", *req.Partition)
		case len(req.Records) == 0:
			whole = invalid("records: none")
		case len(req.Records) > maxRequestRecords:
			whole = invalid("records: %d, at most %d per request", len(req.Records), maxRequestRecords)
		}
		if whole == nil {
			if _, _, err := tributary.ParseStream(stream); err != nil {
				whole = invalid("stream: %v", err)
			}
		}
		if whole == nil {
			e, seen := allowed[stream]
			if !seen {
				e = authorize(p.cfg.Auth, id, auth.Produce, stream)
				allowed[stream] = e
			}
			if e != nil {
				whole = &pb.Error{Code: connect.CodePermissionDenied.String(), Message: e.Error(), Reason: tributary.ReasonUnauthorized.String()}
			}
		}
		if whole != nil && len(req.Records) == 0 {
			if err := send(&item{req: req.Id, stream: stream, last: true, none: true, err: whole}); err != nil {
				return err
			}
			continue
		}
		part := int32(-1)
		if req.Partition != nil {
			part = *req.Partition
		}
		for i, r := range req.Records {
			it := &item{req: req.Id, stream: stream, partition: part, last: i == len(req.Records)-1, err: whole}
			size := int64(len(r.Value) + len(r.Key))
			for _, h := range r.Headers {
				size += int64(len(h.Key) + len(h.Value))
			}
			switch {
			case it.err != nil:
			case size > p.cfg.Limits.MaxRecordBytes:
				it.err = invalid("records[%d]: %d bytes, max_record_bytes %d", i, size, p.cfg.Limits.MaxRecordBytes)
			case len(r.Headers) > 1000:
				it.err = invalid("records[%d].headers: at most 1000", i)
			default:
				rec := &tributary.Record{Stream: stream, Topic: stream, Key: r.Key, Value: r.Value, Source: "grpc",
					Principal: id.p.Name, ProducerID: -1, ProducerEpoch: -1, ProducerTimestamp: r.TimestampMs}
				if rec.Value == nil {
					rec.Value = []byte{}
				}
				for _, h := range r.Headers {
					rec.Headers = append(rec.Headers, tributary.Header{Key: h.Key, Value: h.Value})
				}
				it.rec, it.size = rec, min(size+256, maxAheadBytes)
			}
			if err := send(it); err != nil {
				return err
			}
		}
	}
}

// append makes a run durable with one Append and sets the errors.
func (p *Producer) append(ctx context.Context, run []*item) {
	if run[0].err != nil {
		return
	}
	recs := make([]*tributary.Record, len(run))
	now := time.Now().UnixMicro()
	var bytes int64
	for i, it := range run {
		it.rec.Timestamp = now
		recs[i] = it.rec
		bytes += int64(len(it.rec.Value))
	}
	err := p.app.Append(ctx, tributary.WriteTo(run[0].partition, recs...))
	if err == nil {
		p.stats.Records.Add(int64(len(run)))
		p.stats.Bytes.Add(bytes)
		return
	}
	perr := refusal(err)
	if perr.Code == connect.CodeInternal.String() {
		p.cfg.Logger.Warn("grpc produce", "stream", run[0].stream, "err", err)
	}
	p.stats.Refused.Add(int64(len(run)))
	for _, it := range run {
		it.err = perr
	}
}

// refusal is the Error of an append error.
func refusal(err error) *pb.Error {
	e := &pb.Error{Message: err.Error()}
	switch r := tributary.ReasonOf(err); r {
	case tributary.ReasonBudget:
		e.Code, e.Reason, e.RetryAfterMs = connect.CodeResourceExhausted.String(), r.String(), 5000
	case tributary.ReasonReplication, tributary.ReasonFenced:
		e.Code, e.Reason, e.RetryAfterMs = connect.CodeUnavailable.String(), r.String(), 1000
	case tributary.ReasonUnauthorized:
		e.Code, e.Reason = connect.CodePermissionDenied.String(), r.String()
	default:
		switch {
		case errors.Is(err, ErrUnknownStream):
			e.Code = connect.CodeNotFound.String()
		case errors.Is(err, ErrStreamLimit):
			e.Code, e.Reason = connect.CodeFailedPrecondition.String(), "stream_limit"
		case errors.Is(err, tributary.ErrInvalidStream):
			e.Code = connect.CodeInvalidArgument.String()
		default:
			e.Code = connect.CodeInternal.String()
		}
	}
	return e
}
