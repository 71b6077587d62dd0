package httpapi

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/tables"
)

// eventBuffer is the write buffer of an event stream.
const eventBuffer = 256 << 10

// keepAlive is how often an idle event stream gets a comment line, so
// proxies keep it open and a vanished client is noticed.
const keepAlive = 15 * time.Second

// resumeOffset is the offset after a Last-Event-ID "partition:offset"
// of partition p.
func resumeOffset(id, p string) (int64, error) {
	part, off, ok := strings.Cut(id, ":")
	n, err := strconv.ParseInt(off, 10, 64)
	if !ok || err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want partition:offset as the events' ids are", id)
	}
	if part != p {
		return 0, fmt.Errorf("%q is an event of partition %s, not %s", id, part, p)
	}
	return n + 1, nil
}

// serveEvents streams records of v from off as Server-Sent Events:
//
//	id: <partition>:<offset>
//	event: record
//	data: <the record as JSON, as a long-poll read gives it>
//
// The stream tails the partition until the client goes away: it reads
// what is committed, then looks at the table again every half metadata
// age. Each write has WriteTimeout: a client that does not read is cut
// off, and no more than one read's worth (max_records, max_bytes) is held
// at a time. A reconnecting EventSource sends Last-Event-ID and resumes
// after it with no gap or duplicate.
//
// A stream authenticated with a token (expires not zero) ends when the
// token expires, with an error event naming the expiry; the EventSource
// then reconnects and must authenticate again.
func (rd *Reader) serveEvents(w http.ResponseWriter, r *http.Request, v *tables.Partition, off int64, params readParams, expires time.Time) {
	ctx := r.Context()
	var expired <-chan time.Time
	if !expires.IsZero() {
		t := time.NewTimer(time.Until(expires))
		defer t.Stop()
		expired = t.C
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc.SetWriteDeadline(time.Now().Add(rd.cfg.Limits.WriteTimeout))
	if _, err := fmt.Fprintf(w, "retry: 1000\n: %s partition %d from offset %d\n\n", v.Stream, v.Partition, off); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	tick := rd.tables.MetadataMaxAge() / 2
	lastWrite := time.Now()
	// Events go through a buffer of eventBuffer bytes (one write per
	// buffer, not per event); a client that does not read holds at most
	// that and one event, and each write has WriteTimeout.
	bw := bufio.NewWriterSize(w, eventBuffer)
	write := func(format string, args ...any) bool {
		rc.SetWriteDeadline(time.Now().Add(rd.cfg.Limits.WriteTimeout))
		_, err := fmt.Fprintf(bw, format, args...)
		return err == nil
	}
	flush := func() error {
		rc.SetWriteDeadline(time.Now().Add(rd.cfg.Limits.WriteTimeout))
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	var ev []byte // one event
	endExpired := func() {
		write("event: error\ndata: %s\n\n", auth.ErrExpired.Error())
		flush()
	}
	for {
		if !expires.IsZero() && !time.Now().Before(expires) {
			endExpired()
			return
		}
		recs, next, err := rd.read(ctx, v, off, params)
		for _, rec := range recs {
			ev = append(ev[:0], "id: "...)
			ev = strconv.AppendInt(ev, int64(rec.Partition), 10)
			ev = append(ev, ':')
			ev = strconv.AppendInt(ev, rec.Offset, 10)
			ev = append(ev, "\nevent: record\ndata: "...)
			ev = appendRecord(ev, v.Stream, rec, params.format)
			ev = append(ev, "\n\n"...)
			rc.SetWriteDeadline(time.Now().Add(rd.cfg.Limits.WriteTimeout))
			if _, err := bw.Write(ev); err != nil {
				return
			}
		}
		if err != nil {
			rd.cfg.Logger.Warn("http events", "stream", v.Stream, "partition", v.Partition, "err", err)
			write("event: error\ndata: %s\n\n", strings.ReplaceAll(err.Error(), "\n", " "))
			flush()
			return
		}
		if len(recs) == 0 && time.Since(lastWrite) >= keepAlive && !write(": keep-alive\n\n") {
			return
		}
		progressed := next > off
		if progressed {
			off = next
			if off < v.End && bw.Buffered() < eventBuffer/2 {
				continue // more is committed: no wait, no flush yet
			}
		}
		if bw.Buffered() > 0 || len(recs) > 0 || time.Since(lastWrite) >= keepAlive {
			if flush() != nil {
				return
			}
			lastWrite = time.Now()
		}
		if progressed && off < v.End {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-expired:
			endExpired()
			return
		case <-time.After(tick):
		}
		nv, err := rd.tables.Partition(ctx, v.Stream, v.Partition)
		if err != nil {
			if ctx.Err() == nil {
				rd.cfg.Logger.Warn("http events", "stream", v.Stream, "partition", v.Partition, "err", err)
			}
			continue // v stays: the catalog may answer at the next tick
		}
		v = nv
	}
}
