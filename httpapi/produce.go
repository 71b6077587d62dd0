package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/internal/batch"

	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/httpapi/wire"
)

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	// ClusterID is the cluster_id of the v3 paths (the catalog name); a
	// request naming another gets 404.
	ClusterID string
	Auth      *auth.Authority
	Limits    Limits
	Logger    *slog.Logger
}

// Producer serves Confluent REST v3 produce at the edge.
type Producer struct {
	cfg     ProducerConfig
	app     tributary.Appender
	streams slots
	stats   ProducerStats
}

// ProducerStats are a Producer's counters (tributary_http_* metrics).
type ProducerStats struct {
	Records   atomic.Int64 // records made durable
	Bytes     atomic.Int64 // their value bytes
	Refused   atomic.Int64 // records refused (back-pressure, denial)
	Malformed atomic.Int64 // requests or records refused as malformed or over a cap
	Streams   atomic.Int64 // produce requests being served now
	Rejected  atomic.Int64 // requests refused at max_streams
}

// NewProducer returns a Producer appending to app (the edge node's write
// path): each run of records of one stream and partition is one Append.
func NewProducer(cfg ProducerConfig, app tributary.Appender) *Producer {
	cfg.Limits.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Producer{cfg: cfg, app: app}
	p.streams = newSlots(cfg.Limits.MaxStreams, &p.stats.Streams, &p.stats.Rejected)
	return p
}

// Stats returns the counters.
func (p *Producer) Stats() *ProducerStats { return &p.stats }

// Register mounts the produce routes and the OpenAPI document on mux.
func (p *Producer) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /v3/clusters/{cluster}/topics/{topic}/records", p.serveProduce)
	mux.HandleFunc("GET /v3/clusters", p.serveClusters)
	mux.HandleFunc("GET /v3/clusters/{cluster}", p.serveClusters)
	registerOpenAPI(mux)
}

// serveClusters answers GET /v3/clusters[/{cluster}], where Confluent
// clients find the cluster_id of the produce path.
func (p *Producer) serveClusters(w http.ResponseWriter, r *http.Request) {
	c := map[string]any{"kind": "KafkaCluster", "cluster_id": p.cfg.ClusterID}
	if id := r.PathValue("cluster"); id != "" {
		if id != p.cfg.ClusterID {
			writeError(w, http.StatusNotFound, fmt.Sprintf("cluster %q not found (this is %q)", id, p.cfg.ClusterID), "")
			return
		}
		writeJSON(w, http.StatusOK, c)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "KafkaClusterList", "data": []any{c}})
}

// item is one decoded record (or the error that ends the stream) on its
// way from the decoder to the appender.
type item struct {
	rec       *tributary.Record
	partition int32
	keyType   string
	valueType string
	size      int64        // bytes held (released when reported)
	err       error        // a record refused before the WAL (a *wire.FieldError, a cap)
	fatal     bool         // the body cannot be read past err
	report    *wire.Report // set by the appender
}

// Caps of the pipeline between the decoder and the WAL, per request.
const (
	maxAheadBytes  = 8 << 20 // decoded, not yet reported
	maxBatchRecs   = 1000    // records of one Append
	maxBatchBytes  = 4 << 20
	itemQueueDepth = 4096
)

// errRecordTooLarge ends a stream whose record exceeds max_record_bytes.
var errRecordTooLarge = errors.New("record too large")

func (p *Producer) serveProduce(w http.ResponseWriter, r *http.Request) {
	stream := r.PathValue("topic")
	if id := r.PathValue("cluster"); id != p.cfg.ClusterID {
		p.stats.Malformed.Add(1)
		writeError(w, http.StatusNotFound, fmt.Sprintf("cluster %q not found (this is %q; GET /v3/clusters)", id, p.cfg.ClusterID), "")
		return
	}
	if _, _, err := tributary.ParseStream(stream); err != nil {
		p.stats.Malformed.Add(1)
		writeError(w, http.StatusBadRequest, "topic_name: "+err.Error(), "")
		return
	}
	if !jsonContent(r) {
		p.stats.Malformed.Add(1)
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: want application/json", r.Header.Get("Content-Type")), "")
		return
	}
	prin, ok := authorize(w, r, p.cfg.Auth, auth.Produce, stream, "")
	if !ok {
		return
	}
	if !p.streams.acquire(w, "produce requests") {
		return
	}
	defer p.streams.release()
	lim := p.cfg.Limits
	rc := http.NewResponseController(w)
	var body io.Reader = r.Body
	streaming := r.ContentLength < 0
	if !streaming {
		// A body of known length is read whole, then answered as one
		// record (its status is the report's) or as a stream.
		if r.ContentLength > 4*lim.MaxRecordBytes {
			p.stats.Malformed.Add(1)
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body of %d bytes: at most %d (stream larger bodies with chunked transfer encoding)", r.ContentLength, 4*lim.MaxRecordBytes), "")
			return
		}
		rc.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4*lim.MaxRecordBytes))
		if err != nil {
			p.stats.Malformed.Add(1)
			writeError(w, http.StatusBadRequest, "reading the body: "+err.Error(), "")
			return
		}
		body = bytes.NewReader(raw)
	} else {
		// Reports are written while the body is still being read.
		rc.EnableFullDuplex()
	}
	items := make(chan *item, itemQueueDepth)
	ahead := semaphore.NewWeighted(maxAheadBytes)
	ctx, cancel := context.WithCancel(r.Context())
	decoded := make(chan struct{})
	defer func() {
		// The body must not be read after the handler returns: stop the
		// decoder (a read blocked on the client ends at the deadline).
		// Only while it still reads: once it has read the body to its
		// end, net/http reads the connection in the background (to see
		// the client go), and a deadline in the past would fail that
		// read, cancel the connection's context, and with it the next
		// request a keep-alive client sends on it (seen as a stream
		// "without a record" under load).
		cancel()
		if streaming {
			select {
			case <-decoded:
			default:
				rc.SetReadDeadline(time.Now())
			}
		}
		<-decoded
	}()
	go func() {
		defer close(decoded)
		p.decode(ctx, body, streaming, rc, stream, prin, items, ahead)
	}()
	if !streaming {
		// Decode everything first (the body is in memory, bounded):
		// one record is answered with its own status.
		var all []*item
		for it := range items {
			all = append(all, it)
		}
		if len(all) == 0 {
			p.stats.Malformed.Add(1)
			writeError(w, http.StatusBadRequest, "body: no record in it (want a JSON object such as {\"value\": {\"type\": \"JSON\", \"data\": ...}})", "")
			return
		}
		if len(all) == 1 {
			it := all[0]
			p.appendBatch(ctx, stream, all)
			ahead.Release(it.size)
			rep := it.report
			if rep.ErrorCode != http.StatusOK {
				retryAfter(w, time.Duration(rep.RetryAfterMs)*time.Millisecond)
			}
			writeJSON(w, rep.ErrorCode, rep)
			return
		}
		replay := make(chan *item, len(all))
		for _, it := range all {
			replay <- it
		}
		close(replay)
		items = replay
	}
	if streaming {
		// The status waits for the first record: a stream without one
		// (an empty body, whitespace) is a bad request, as a body of
		// known length without one is.
		first, ok := <-items
		if !ok {
			p.stats.Malformed.Add(1)
			writeError(w, http.StatusBadRequest, "body: the stream ended without a record (want JSON objects such as {\"value\": {\"type\": \"JSON\", \"data\": ...}})", "")
			return
		}
		src, joined := items, make(chan *item, itemQueueDepth)
		joined <- first
		go func() {
			defer close(joined)
			for it := range src {
				select {
				case joined <- it:
				case <-ctx.Done():
					return
				}
			}
		}()
		items = joined
	}
	w.Header().Set("Content-Type", "application/json")
	if streaming {
		// A stream may end before its body does (a malformed record):
		// what is left of it is not a next request.
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	runs := batch.Runs(items, batch.Caps{Items: maxBatchRecs, Bytes: maxBatchBytes}, func(it *item) int64 { return it.size },
		func(a, b *item) bool { return a.partition == b.partition }, func(it *item) bool { return it.err != nil })
	for run := range runs {
		p.appendBatch(ctx, stream, run)
		rc.SetWriteDeadline(time.Now().Add(lim.WriteTimeout))
		for _, it := range run {
			ahead.Release(it.size)
			if err := enc.Encode(it.report); err != nil {
				return // the client is gone or does not read: ctx ends the decoder
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// decode reads records from body and queues them; it closes items at the
// end of the body or after the first error that ends the stream.
func (p *Producer) decode(ctx context.Context, body io.Reader, streaming bool, rc *http.ResponseController,
	stream string, prin auth.Principal, items chan<- *item, ahead *semaphore.Weighted) {
	defer close(items)
	lim := p.cfg.Limits
	cr := &capReader{r: body, max: lim.MaxRecordBytes}
	dec := json.NewDecoder(cr)
	cr.dec = dec
	for {
		if streaming {
			rc.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		}
		start := dec.InputOffset()
		pr, err := wire.DecodeProduce(dec)
		if errors.Is(err, io.EOF) {
			return
		}
		it := &item{partition: -1}
		if err != nil {
			it.err, it.fatal = err, true
			var fe *wire.FieldError
			if errors.As(err, &fe) && fe.Field != "body" {
				it.fatal = false // a type mismatch in a well-formed object: the stream goes on
			}
		} else {
			size := dec.InputOffset() - start
			if size > lim.MaxRecordBytes {
				it.err = fmt.Errorf("%w: %d bytes of JSON, max_record_bytes %d", errRecordTooLarge, size, lim.MaxRecordBytes)
			} else if d, err := pr.Decode(); err != nil {
				it.err = err
			} else {
				it.size = min(size, maxAheadBytes)
				it.partition, it.keyType, it.valueType = d.Partition, d.KeyType, d.ValueType
				rec := &tributary.Record{Stream: stream, Topic: stream, Key: d.Key, Value: d.Value, Source: "http",
					Principal: prin.Name, ProducerID: -1, ProducerEpoch: -1, ProducerTimestamp: d.Timestamp}
				for _, h := range d.Headers {
					rec.Headers = append(rec.Headers, tributary.Header{Key: h.Key, Value: h.Value})
				}
				it.rec = rec
			}
		}
		if it.err != nil {
			p.stats.Malformed.Add(1)
		}
		if it.size > 0 {
			if ahead.Acquire(ctx, it.size) != nil {
				return
			}
		}
		select {
		case items <- it:
		case <-ctx.Done():
			return
		}
		if it.fatal {
			return
		}
	}
}

// appendBatch makes the batch's records durable (one Append) and sets
// every item's report.
func (p *Producer) appendBatch(ctx context.Context, stream string, batch []*item) {
	if batch[0].err != nil {
		it := batch[0]
		code := http.StatusBadRequest
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(it.err, errRecordTooLarge), errors.As(it.err, &mbe):
			code = http.StatusRequestEntityTooLarge
		case errors.Is(it.err, context.DeadlineExceeded), errors.Is(it.err, errTimeout):
			code = http.StatusRequestTimeout
		}
		it.report = &wire.Report{ErrorCode: code, Message: it.err.Error()}
		return
	}
	recs := make([]*tributary.Record, len(batch))
	var bytes int64
	now := time.Now().UnixMicro()
	for i, it := range batch {
		it.rec.Timestamp = now
		recs[i] = it.rec
		bytes += int64(len(it.rec.Value))
	}
	err := p.app.Append(ctx, tributary.WriteTo(batch[0].partition, recs...))
	if err != nil {
		code, reason, retry := refusal(err)
		p.stats.Refused.Add(int64(len(batch)))
		if code == http.StatusInternalServerError {
			p.cfg.Logger.Warn("http produce", "stream", stream, "err", err)
		}
		for _, it := range batch {
			it.report = &wire.Report{ErrorCode: code, Message: err.Error(), Reason: reason, RetryAfterMs: retry.Milliseconds()}
		}
		return
	}
	p.stats.Records.Add(int64(len(batch)))
	p.stats.Bytes.Add(bytes)
	for _, it := range batch {
		r := it.rec
		part, off := r.Partition, r.Offset
		rep := &wire.Report{ErrorCode: http.StatusOK, ClusterID: p.cfg.ClusterID, TopicName: stream,
			PartitionID: &part, Offset: &off, Timestamp: wire.Time(r.Timestamp)}
		if it.keyType != "" {
			rep.Key = &wire.ReportValue{Type: it.keyType, Size: len(r.Key)}
		}
		if it.valueType != "" {
			rep.Value = &wire.ReportValue{Type: it.valueType, Size: len(r.Value)}
		}
		it.report = rep
		it.rec = nil
	}
}

// errTimeout: the body sent nothing for IdleTimeout.
var errTimeout = errors.New("timeout")

// capReader fails a read when the decoder would hold more than max bytes
// of one record (read but not yet consumed), so a huge record is refused
// before it is buffered whole.
type capReader struct {
	r    io.Reader
	dec  *json.Decoder
	max  int64
	read int64
}

func (c *capReader) Read(b []byte) (int, error) {
	if c.read-c.dec.InputOffset() > c.max+64<<10 {
		return 0, fmt.Errorf("%w: one record is more than max_record_bytes %d", errRecordTooLarge, c.max)
	}
	n, err := c.r.Read(b)
	c.read += int64(n)
	var ne interface{ Timeout() bool }
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		err = fmt.Errorf("%w: the body sent nothing for the idle timeout", errTimeout)
	}
	return n, err
}
