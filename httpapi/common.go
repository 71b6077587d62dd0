package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/httpapi/wire"
)

// Defaults of the caps (Limits).
const (
	DefaultMaxRecordBytes = 1 << 20
	DefaultMaxStreams     = 1024
	DefaultIdleTimeout    = 30 * time.Second
	DefaultWriteTimeout   = 30 * time.Second
)

// Limits are the caps of a Producer or Reader; zero values take the
// defaults.
type Limits struct {
	// MaxRecordBytes caps one produced record's JSON, and a non-streamed
	// body is at most 4 times it (413 beyond).
	MaxRecordBytes int64
	// MaxStreams caps the concurrent produce requests (of a Producer) or
	// long polls and event streams (of a Reader); 429 beyond.
	MaxStreams int
	// IdleTimeout ends a produce stream that sends nothing for so long.
	IdleTimeout time.Duration
	// WriteTimeout ends a response whose write blocks for so long (the
	// client does not read).
	WriteTimeout time.Duration
}

func (l *Limits) defaults() {
	if l.MaxRecordBytes <= 0 {
		l.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if l.MaxStreams <= 0 {
		l.MaxStreams = DefaultMaxStreams
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
}

// ErrUnknownStream is the Appender's for a stream that does not exist
// (and may not be created): 404.
var ErrUnknownStream = tributary.ErrUnknownStream

// ErrStreamLimit is the Appender's (wrapped) when it may not create one
// more stream: 403 with reason stream_limit (Kafka says POLICY_VIOLATION).
var ErrStreamLimit = tributary.ErrStreamLimit

// protocol names the HTTP API in the audit log and the auth metrics.
const protocol = "http"

// authorize authenticates r and checks action on stream (and group);
// false when the error answer has been written (401, 403). With action
// "" it only authenticates.
func authorize(w http.ResponseWriter, r *http.Request, a *auth.Authority, action auth.Action, stream, group string) (auth.Principal, bool) {
	if a.Open() {
		return auth.Principal{}, true
	}
	p, err := a.HTTPClient(r, protocol)
	if err != nil {
		w.Header().Add("WWW-Authenticate", `Basic realm="tributary", charset="UTF-8"`)
		w.Header().Add("WWW-Authenticate", `Bearer realm="tributary"`)
		writeError(w, http.StatusUnauthorized, "authentication required: "+err.Error(), "")
		return p, false
	}
	if action == "" {
		return p, true // a listing: filtered by the caller
	}
	if err := a.Authorize(auth.Request{Client: auth.Client{Protocol: protocol, Remote: r.RemoteAddr}, Principal: p,
		Action: action, Stream: stream, Group: group}); err != nil {
		what := "stream " + stream
		if group != "" {
			what += " in group " + group
		}
		writeError(w, http.StatusForbidden, p.String()+" may not "+string(action)+" "+what, "unauthorized")
		return p, false
	}
	return p, true
}

// tokenExpired answers a long poll whose token expired while it waited:
// 401 naming the expiry.
func tokenExpired(w http.ResponseWriter) {
	w.Header().Add("WWW-Authenticate", `Bearer realm="tributary", error="invalid_token"`)
	writeError(w, http.StatusUnauthorized, auth.ErrExpired.Error(), "token_expired")
}

// allowed is authorize's decision without an answer or an audit line (for
// filtering listings).
func allowed(a *auth.Authority, r *http.Request, p auth.Principal, stream string) bool {
	return a.Allowed(auth.Request{Client: auth.Client{Protocol: protocol, Remote: r.RemoteAddr}, Principal: p,
		Action: auth.Consume, Stream: stream})
}

// writeError answers with status and the Confluent error body.
func writeError(w http.ResponseWriter, status int, msg, reason string) {
	writeJSON(w, status, wire.Error{ErrorCode: status, Message: msg, Reason: reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// refusal maps an append error to its HTTP status, reason and retry
// delay: 429 for the WAL budget, 503 for replication and a partition
// being taken over (or owned elsewhere), 403 unauthorized, else 500.
func refusal(err error) (status int, reason string, retry time.Duration) {
	switch r := tributary.ReasonOf(err); r {
	case tributary.ReasonBudget:
		return http.StatusTooManyRequests, r.String(), 5 * time.Second
	case tributary.ReasonReplication:
		return http.StatusServiceUnavailable, r.String(), time.Second
	case tributary.ReasonFenced:
		return http.StatusServiceUnavailable, r.String(), time.Second
	case tributary.ReasonUnauthorized:
		return http.StatusForbidden, r.String(), 0
	}
	switch {
	case errors.Is(err, ErrUnknownStream):
		return http.StatusNotFound, "", 0
	case errors.Is(err, ErrStreamLimit):
		return http.StatusForbidden, "stream_limit", 0
	case errors.Is(err, tributary.ErrInvalidStream):
		return http.StatusBadRequest, "", 0
	}
	return http.StatusInternalServerError, "", 0
}

func retryAfter(w http.ResponseWriter, d time.Duration) {
	if d > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
	}
}

// jsonContent tells whether r's body is declared JSON.
func jsonContent(r *http.Request) bool {
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "application/json" || (strings.HasPrefix(ct, "application/") && strings.HasSuffix(ct, "+json"))
}

// slots caps the concurrent streams of a Producer or Reader (max_streams)
// and counts them.
type slots struct {
	sem      *semaphore.Weighted
	max      int
	open     *atomic.Int64 // streams served now
	rejected *atomic.Int64 // refused at max
}

func newSlots(max int, open, rejected *atomic.Int64) slots {
	return slots{sem: semaphore.NewWeighted(int64(max)), max: max, open: open, rejected: rejected}
}

// acquire takes a slot, or answers 429 with Retry-After and returns false;
// call release when done.
func (s slots) acquire(w http.ResponseWriter, what string) bool {
	if !s.sem.TryAcquire(1) {
		s.rejected.Add(1)
		retryAfter(w, time.Second)
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("too many concurrent %s (max_streams %d)", what, s.max), "max_streams")
		return false
	}
	s.open.Add(1)
	return true
}

func (s slots) release() {
	s.open.Add(-1)
	s.sem.Release(1)
}
