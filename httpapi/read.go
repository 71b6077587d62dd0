package httpapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/httpapi/wire"
	"github.com/tributary-io/tributary/offsets"
	"github.com/tributary-io/tributary/tables"
)

// Caps of one read.
const (
	DefaultMaxRecords = 500
	MaxRecords        = 10000
	DefaultMaxBytes   = 1 << 20
	MaxBytes          = 16 << 20
	// MaxTimeout caps a long poll's wait.
	MaxTimeout = 60 * time.Second
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Auth   *auth.Authority
	Limits Limits
	// MaxGroupOffsets caps the offsets a group holds (the cloud's
	// kafka.max_group_offsets; -1 or 0 = no cap).
	MaxGroupOffsets int
	Logger          *slog.Logger
}

// Reader serves the cloud's HTTP reads of the stream tables.
type Reader struct {
	cfg     ReaderConfig
	tables  *tables.Reader
	offsets *offsets.Store
	streams slots
	stats   ReaderStats
}

// ReaderStats are a Reader's counters.
type ReaderStats struct {
	Records  atomic.Int64 // records served (long polls and events)
	Bytes    atomic.Int64 // their value bytes
	Streams  atomic.Int64 // long polls and event streams served now
	Rejected atomic.Int64 // refused at max_streams
}

// NewReader returns a Reader over tr, storing group offsets in os.
func NewReader(cfg ReaderConfig, tr *tables.Reader, os *offsets.Store) *Reader {
	cfg.Limits.defaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxGroupOffsets == 0 {
		cfg.MaxGroupOffsets = -1
	}
	rd := &Reader{cfg: cfg, tables: tr, offsets: os}
	rd.streams = newSlots(cfg.Limits.MaxStreams, &rd.stats.Streams, &rd.stats.Rejected)
	return rd
}

// Stats returns the counters.
func (rd *Reader) Stats() *ReaderStats { return &rd.stats }

// Register mounts the read routes and the OpenAPI document on mux.
func (rd *Reader) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/streams", rd.serveStreams)
	mux.HandleFunc("GET /v1/streams/{stream}/partitions", rd.servePartitions)
	mux.HandleFunc("GET /v1/streams/{stream}/partitions/{p}", rd.servePartitions)
	mux.HandleFunc("GET /v1/streams/{stream}/partitions/{p}/offsets", rd.serveOffsetForTime)
	mux.HandleFunc("GET /v1/streams/{stream}/partitions/{p}/records", rd.serveRecords)
	mux.HandleFunc("GET /v1/groups/{group}/offsets", rd.serveGroupOffsets)
	mux.HandleFunc("POST /v1/groups/{group}/offsets", rd.serveCommit)
	registerOpenAPI(mux)
}

func (rd *Reader) serveStreams(w http.ResponseWriter, r *http.Request) {
	p, ok := authorize(w, r, rd.cfg.Auth, "", "", "")
	if !ok {
		return
	}
	all, err := rd.tables.ListStreams(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "list streams: "+err.Error(), "catalog")
		return
	}
	out := []string{}
	for _, s := range all {
		if allowed(rd.cfg.Auth, r, p, s) {
			out = append(out, s)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"streams": out})
}

// partition resolves {stream} and {p} of r after authorizing consume:
// nil when the error answer has been written.
func (rd *Reader) partition(w http.ResponseWriter, r *http.Request) *tables.Partition {
	v, _ := rd.partitionOf(w, r)
	return v
}

// partitionOf is partition, and the principal authorized.
func (rd *Reader) partitionOf(w http.ResponseWriter, r *http.Request) (*tables.Partition, auth.Principal) {
	stream := r.PathValue("stream")
	if _, _, err := tributary.ParseStream(stream); err != nil {
		writeError(w, http.StatusBadRequest, "stream: "+err.Error(), "")
		return nil, auth.Principal{}
	}
	who, ok := authorize(w, r, rd.cfg.Auth, auth.Consume, stream, "")
	if !ok {
		return nil, who
	}
	p, err := strconv.ParseInt(r.PathValue("p"), 10, 32)
	if err != nil || p < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("partition: %q is not a partition number", r.PathValue("p")), "")
		return nil, who
	}
	v, err := rd.tables.Partition(r.Context(), stream, int32(p))
	if err != nil {
		rd.tableError(w, stream, err)
		return nil, who
	}
	return v, who
}

func (rd *Reader) tableError(w http.ResponseWriter, stream string, err error) {
	switch {
	case errors.Is(err, tables.ErrNoSuchStream):
		writeError(w, http.StatusNotFound, "stream "+stream+" not found", "")
	case errors.Is(err, tables.ErrNoSuchPartition):
		writeError(w, http.StatusNotFound, err.Error(), "")
	case errors.Is(err, context.Canceled):
	default:
		rd.cfg.Logger.Warn("http read", "stream", stream, "err", err)
		writeError(w, http.StatusServiceUnavailable, "reading "+stream+": "+err.Error(), "catalog")
	}
}

func (rd *Reader) servePartitions(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("p") != "" {
		if v := rd.partition(w, r); v != nil {
			writeJSON(w, http.StatusOK, info(v))
		}
		return
	}
	stream := r.PathValue("stream")
	if _, _, err := tributary.ParseStream(stream); err != nil {
		writeError(w, http.StatusBadRequest, "stream: "+err.Error(), "")
		return
	}
	if _, ok := authorize(w, r, rd.cfg.Auth, auth.Consume, stream, ""); !ok {
		return
	}
	ps, err := rd.tables.Partitions(r.Context(), stream)
	if err != nil {
		rd.tableError(w, stream, err)
		return
	}
	out := []wire.PartitionInfo{}
	for _, p := range ps {
		v, err := rd.tables.Partition(r.Context(), stream, p)
		if err != nil {
			rd.tableError(w, stream, err)
			return
		}
		out = append(out, info(v))
	}
	writeJSON(w, http.StatusOK, map[string]any{"stream": stream, "partitions": out})
}

func info(v *tables.Partition) wire.PartitionInfo {
	return wire.PartitionInfo{Stream: v.Stream, Partition: v.Partition, Earliest: v.Earliest, Latest: v.End}
}

// serveOffsetForTime answers ?timestamp= (RFC 3339, or unix
// milliseconds): the first offset accepted at or after it.
func (rd *Reader) serveOffsetForTime(w http.ResponseWriter, r *http.Request) {
	ts := r.URL.Query().Get("timestamp")
	micros, err := parseTime(ts)
	if err != nil {
		writeError(w, http.StatusBadRequest, "timestamp: "+err.Error(), "")
		return
	}
	v := rd.partition(w, r)
	if v == nil {
		return
	}
	rec, err := v.OffsetForTime(r.Context(), micros)
	if err != nil {
		rd.tableError(w, v.Stream, err)
		return
	}
	out := wire.OffsetForTime{Stream: v.Stream, Partition: v.Partition, Offset: v.End}
	if rec != nil {
		out.Offset, out.Timestamp, out.Found = rec.Offset, wire.Time(rec.Timestamp), true
	}
	writeJSON(w, http.StatusOK, out)
}

func parseTime(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("missing: want RFC 3339 (2026-01-02T15:04:05Z) or unix milliseconds")
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return 0, fmt.Errorf("%d: want a time after 1970", ms)
		}
		return ms * 1000, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q: want RFC 3339 (2026-01-02T15:04:05Z) or unix milliseconds", s)
	}
	return t.UnixMicro(), nil
}

// readParams are a read's query parameters.
type readParams struct {
	offset     int64 // -1 earliest, -2 latest, else the offset
	maxRecords int
	maxBytes   int
	timeout    time.Duration
	format     string
}

func parseRead(r *http.Request) (readParams, error) {
	q := r.URL.Query()
	p := readParams{offset: -2, maxRecords: DefaultMaxRecords, maxBytes: DefaultMaxBytes, format: wire.FormatBinary}
	switch o := q.Get("offset"); o {
	case "earliest":
		p.offset = -1
	case "latest", "":
		p.offset = -2
	default:
		n, err := strconv.ParseInt(o, 10, 64)
		if err != nil {
			return p, &wire.FieldError{Field: "offset", Msg: fmt.Sprintf("%q: want an offset >= 0, earliest or latest", o)}
		}
		if n < 0 {
			return p, &wire.FieldError{Field: "offset", Msg: fmt.Sprintf("%d: offsets are >= 0 (earliest and latest are words)", n)}
		}
		p.offset = n
	}
	num := func(name string, dst *int, lo, hi int) error {
		s := q.Get(name)
		if s == "" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return &wire.FieldError{Field: name, Msg: fmt.Sprintf("%q: want %d to %d", s, lo, hi)}
		}
		*dst = n
		return nil
	}
	if err := num("max_records", &p.maxRecords, 1, MaxRecords); err != nil {
		return p, err
	}
	if err := num("max_bytes", &p.maxBytes, 1, MaxBytes); err != nil {
		return p, err
	}
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			ms, err2 := strconv.Atoi(s)
			d, err = time.Duration(ms)*time.Millisecond, err2
		}
		if err != nil || d < 0 || d > MaxTimeout {
			return p, &wire.FieldError{Field: "timeout", Msg: fmt.Sprintf("%q: want milliseconds or a duration (5s), at most %s", s, MaxTimeout)}
		}
		p.timeout = d
	}
	switch f := strings.ToLower(q.Get("format")); f {
	case "", wire.FormatBinary:
	case wire.FormatString, wire.FormatJSON:
		p.format = f
	default:
		return p, &wire.FieldError{Field: "format", Msg: fmt.Sprintf("%q: want binary, string or json", f)}
	}
	return p, nil
}

// start resolves the requested offset against v: 416 when it is outside
// [Earliest, End].
func start(v *tables.Partition, off int64) (int64, error) {
	switch off {
	case -1:
		return v.Earliest, nil
	case -2:
		return v.End, nil
	}
	if off < v.Earliest || off > v.End {
		return 0, fmt.Errorf("offset %d out of range: %s partition %d holds [%d, %d)", off, v.Stream, v.Partition, v.Earliest, v.End)
	}
	return off, nil
}

func (rd *Reader) serveRecords(w http.ResponseWriter, r *http.Request) {
	params, err := parseRead(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	if sse && r.Header.Get("Last-Event-ID") != "" {
		if params.offset, err = resumeOffset(r.Header.Get("Last-Event-ID"), r.PathValue("p")); err != nil {
			writeError(w, http.StatusBadRequest, "Last-Event-ID: "+err.Error(), "")
			return
		}
	}
	v, who := rd.partitionOf(w, r)
	if v == nil {
		return
	}
	off, err := start(v, params.offset)
	if err != nil {
		writeError(w, http.StatusRequestedRangeNotSatisfiable, err.Error(), "")
		return
	}
	if !rd.streams.acquire(w, "reads") {
		return
	}
	defer rd.streams.release()
	if sse {
		rd.serveEvents(w, r, v, off, params, who.Expires)
		return
	}
	ctx := r.Context()
	deadline := time.Now().Add(params.timeout)
	tick := rd.tables.MetadataMaxAge() / 2
	for off >= v.End && time.Now().Before(deadline) {
		// Long poll: look at the table again every half metadata age;
		// a token that expires meanwhile ends the wait with a 401.
		wait := min(tick, time.Until(deadline))
		if !who.Expires.IsZero() {
			if wait = min(wait, time.Until(who.Expires)); wait <= 0 {
				tokenExpired(w)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if v, err = rd.tables.Partition(ctx, v.Stream, v.Partition); err != nil {
			rd.tableError(w, v.Stream, err)
			return
		}
	}
	recs, next, err := rd.read(ctx, v, off, params)
	if err != nil {
		rd.tableError(w, v.Stream, err)
		return
	}
	// The records are the reader's cached rows: each is encoded straight
	// to the connection, so a read holds no copy of its max_bytes.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(rd.cfg.Limits.WriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, `{"records":[`)
	var buf []byte
	for i, rec := range recs {
		buf = buf[:0]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendRecord(buf, v.Stream, rec, params.format)
		if _, err := w.Write(buf); err != nil {
			return
		}
	}
	fmt.Fprintf(w, "],\"next_offset\":%d,\"high_watermark\":%d}\n", next, v.End)
}

// read collects the records of v from off within params' caps (at least
// one record when there is one), and returns the next offset. The records
// are shared with the table reader's cache.
func (rd *Reader) read(ctx context.Context, v *tables.Partition, off int64, params readParams) ([]*tributary.Record, int64, error) {
	var out []*tributary.Record
	size := 0
	next := off
	err := v.Read(ctx, off, func(rec *tributary.Record) bool {
		sz := len(rec.Value) + len(rec.Key)
		if len(out) > 0 && (len(out) >= params.maxRecords || size+sz > params.maxBytes) {
			return false
		}
		out = append(out, rec)
		size += sz
		next = rec.Offset + 1
		rd.stats.Records.Add(1)
		rd.stats.Bytes.Add(int64(len(rec.Value)))
		return true
	})
	return out, next, err
}

func render(stream string, r *tributary.Record, format string) wire.Record {
	out := wire.Record{Stream: stream, Partition: r.Partition, Offset: r.Offset, Timestamp: wire.Time(r.Timestamp),
		Key: wire.Encode(r.Key, format), Value: wire.Encode(r.Value, format), Topic: r.Topic, Source: r.Source}
	if out.Value == nil {
		out.Value = wire.Encode([]byte{}, format)
	}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, wire.OutHeader{Name: h.Key, Value: base64.StdEncoding.EncodeToString(h.Value)})
	}
	return out
}
