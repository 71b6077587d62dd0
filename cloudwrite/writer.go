package cloudwrite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite/wire"
)

// Defaults of a Writer.
const (
	DefaultFlushInterval    = 250 * time.Millisecond
	DefaultFlushBytes       = 8 << 20
	DefaultMaxBufferedBytes = 64 << 20
	DefaultMaxFlushes       = 4
	DefaultPutTimeout       = 30 * time.Second
	DefaultOrphanGrace      = 10 * time.Minute
	// Prefix is the folder of the warehouse WAL objects are written to:
	// outside every table's folder, so no table maintenance touches it.
	Prefix = "_tributary/cloud-wal/"
)

// ErrBackpressure refuses a submission while the server holds
// MaxBufferedBytes of produced data not yet answered: retriable.
var ErrBackpressure = errors.New("cloudwrite: produce buffer full")

// ErrClosed refuses a submission to a closed Writer.
var ErrClosed = errors.New("cloudwrite: writer closed")

// ErrNotWritten is wrapped by the error a submission gets when its
// object was not put or not sequenced: nothing of it is visible, and a
// retry is safe (an idempotent producer's lands once). It wraps
// tributary.ErrUnavailable: each protocol's retriable refusal (HTTP 503,
// gRPC UNAVAILABLE, Kafka KAFKA_STORAGE_ERROR).
var ErrNotWritten = fmt.Errorf("cloudwrite: not written: %w", tributary.ErrUnavailable)

// Config configures a Writer.
type Config struct {
	// Server is this cloud server's id, named in its objects and records.
	Server string
	// FlushInterval: a submission waits at most this long before its
	// object is cut. Default 250ms.
	FlushInterval time.Duration
	// FlushBytes: an object is cut as soon as this much is buffered.
	// Default 8 MiB.
	FlushBytes int
	// MaxBufferedBytes bounds what the server holds unanswered (buffered
	// and being flushed); a submission beyond it gets ErrBackpressure.
	// Default 64 MiB.
	MaxBufferedBytes int64
	// MaxFlushes bounds the objects being put at once (their sequencing
	// is in cut order). Default 4.
	MaxFlushes int
	// PutTimeout bounds one object's put. Default 30s.
	PutTimeout time.Duration
	// OrphanGrace: an object older than this that was never sequenced is
	// an orphan (Collector deletes it); the writer never sequences an
	// object older than half of it. Default 10 min.
	OrphanGrace time.Duration
	Logger      *slog.Logger
	// Metrics to count in (NewMetrics); nil = the writer's own.
	Metrics *Metrics

	// TestPause, tests only, names a point of the flush pipeline
	// (PauseBeforePut, PauseAfterPut, PauseAfterSequence) where every
	// flush but the first TestPauseSkip logs "test pause" and blocks for
	// good, so that an end-to-end test can kill -9 the server there
	// (cloud: TestPauseEnv). Never set it in production: the writer
	// stops answering.
	TestPause     string
	TestPauseSkip int

	// afterPut, for tests, runs between an object's put and its
	// sequencing; an error stops the flush there (a crash).
	afterPut func(key string) error
}

// The points of the flush pipeline Config.TestPause names.
const (
	PauseBeforePut     = "cloudwrite.before-put"     // the object is encoded, not yet put
	PauseAfterPut      = "cloudwrite.after-put"      // put, not yet sequenced: an orphan
	PauseAfterSequence = "cloudwrite.after-sequence" // sequenced, the producers not yet answered
)

// TestPauseEnv, tests only, is the environment variable a cloud server
// reads Config.TestPause from: POINT, or POINT:N to let the first N
// flushes through (ParseTestPause).
const TestPauseEnv = "TRIBUTARY_TEST_PAUSE"

// ParseTestPause parses TestPauseEnv's value into Config.TestPause and
// TestPauseSkip; ok is false when it names no point.
func ParseTestPause(v string) (point string, skip int, ok bool) {
	point, n, cut := strings.Cut(v, ":")
	if cut {
		var err error
		if skip, err = strconv.Atoi(n); err != nil || skip < 0 {
			return "", 0, false
		}
	}
	if point != PauseBeforePut && point != PauseAfterPut && point != PauseAfterSequence {
		return "", 0, false
	}
	return point, skip, true
}

// pause blocks the flush of object for good when Config.TestPause is
// point (tests only).
func (w *Writer) pause(point, object string, segments int) {
	if w.cfg.TestPause != point || w.pauses.Add(1) <= int64(w.cfg.TestPauseSkip) {
		return
	}
	w.log.Warn("test pause: the flush blocks here until the process is killed", "point", point, "object", object, "segments", segments)
	select {}
}

func (c *Config) defaults() {
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.FlushBytes <= 0 {
		c.FlushBytes = DefaultFlushBytes
	}
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.MaxFlushes <= 0 {
		c.MaxFlushes = DefaultMaxFlushes
	}
	if c.PutTimeout <= 0 {
		c.PutTimeout = DefaultPutTimeout
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Done is called once per submission: with the outcome after its
// object is sequenced, or with an error wrapping ErrNotWritten.
type Done func(Outcome, error)

type submission struct {
	seg   *wire.Segment
	size  int
	done  Done
	at    time.Time
	t     *Ticket // this submission's
	after *Ticket // the one it follows (nil: none)
}

// Ticket names a submission for a later one to follow (Enqueue's
// after): that one is sequenced only if this one was.
type Ticket struct {
	settled chan struct{} // closed once ok is final
	ok      bool          // sequenced (or a duplicate of a sequenced one)
}

func newTicket() *Ticket { return &Ticket{settled: make(chan struct{})} }

// settle records the outcome; once.
func (t *Ticket) settle(ok bool) {
	t.ok = ok
	close(t.settled)
}

// refusedTicket is the Ticket of a submission refused at once.
func refusedTicket() *Ticket {
	t := newTicket()
	t.settle(false)
	return t
}

// Writer buffers the segments every connection of the server submits
// and writes them as one WAL object per flush, then sequences it (see
// the package documentation). Safe for concurrent use.
type Writer struct {
	cfg   Config
	st    *State
	store Store
	log   *slog.Logger

	mu       sync.Mutex
	buf      []submission
	bufBytes int
	held     int64 // buffered + flushing bytes
	timer    *time.Timer
	closed   bool
	prev     chan struct{} // closed when the last cut flush has sequenced
	slots    chan struct{}
	wg       sync.WaitGroup
	pauses   atomic.Int64 // flushes that reached Config.TestPause

	m *Metrics
}

// NewWriter returns a Writer sequencing into st and writing to store.
func NewWriter(cfg Config, st *State, store Store) *Writer {
	cfg.defaults()
	prev := make(chan struct{})
	close(prev)
	w := &Writer{cfg: cfg, st: st, store: store, log: cfg.Logger, prev: prev,
		slots: make(chan struct{}, cfg.MaxFlushes), m: cfg.Metrics}
	if w.m == nil {
		w.m = newMetrics()
	}
	return w
}

// Submit queues seg to be written; done is called exactly once, never
// before Submit returns (a refusal at once too: ErrClosed,
// ErrBackpressure). See Enqueue.
func (w *Writer) Submit(seg *wire.Segment, done Done) {
	if _, err := w.Enqueue(seg, nil, done); err != nil {
		go done(Outcome{}, err)
	}
}

// Enqueue queues seg to be written after the submission after names (nil:
// none): seg is sequenced only if that one was, else its Outcome.Err
// wraps ErrPredecessorFailed. done is called exactly once, never before
// Enqueue returns — unless Enqueue returns an error (ErrClosed,
// ErrBackpressure): then nothing was queued and done is never called.
// seg's records must not change until done; Enqueue sets a zero
// Timestamp to now and Node to the server. The Ticket names seg (also
// one refused) for a later Enqueue.
func (w *Writer) Enqueue(seg *wire.Segment, after *Ticket, done Done) (*Ticket, error) {
	now := time.Now()
	seg.Node = w.cfg.Server
	for _, r := range seg.Records {
		if r.Timestamp == 0 {
			r.Timestamp = now.UnixMicro()
		}
	}
	size := wire.SegmentSize(seg)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return refusedTicket(), ErrClosed
	}
	if w.held+int64(size) > w.cfg.MaxBufferedBytes && w.held > 0 {
		w.mu.Unlock()
		w.m.refused.Inc()
		return refusedTicket(), ErrBackpressure
	}
	w.held += int64(size)
	w.m.held.Set(float64(w.held))
	t := newTicket()
	w.buf = append(w.buf, submission{seg: seg, size: size, done: done, at: now, t: t, after: after})
	w.bufBytes += size
	switch {
	case w.bufBytes >= w.cfg.FlushBytes:
		w.cutLocked()
	case w.timer == nil:
		w.timer = time.AfterFunc(w.cfg.FlushInterval, w.cut)
	}
	w.mu.Unlock()
	return t, nil
}

func (w *Writer) cut() {
	w.mu.Lock()
	w.cutLocked()
	w.mu.Unlock()
}

// cutLocked hands the buffer to a flush.
func (w *Writer) cutLocked() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if len(w.buf) == 0 {
		return
	}
	subs, bytes := w.buf, w.bufBytes
	w.buf, w.bufBytes = nil, 0
	prev, mine := w.prev, make(chan struct{})
	w.prev = mine
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		// After the Enqueue that cut (holding mu) returned: no done
		// before its Enqueue returns.
		w.mu.Lock()
		w.mu.Unlock()
		w.flush(subs, bytes, prev, mine)
	}()
}

// ObjectKey names a new WAL object of server.
func ObjectKey(server string, now time.Time) string {
	var r [6]byte
	rand.Read(r[:])
	return fmt.Sprintf("%s%s/%s-%d-%s.trbw", Prefix, now.UTC().Format("2006-01-02"), safeName(server), now.UnixMicro(), hex.EncodeToString(r[:]))
}

func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// flush writes subs as one object, then, after the previous flush has
// sequenced (prev), sequences it and answers every submission.
func (w *Writer) flush(subs []submission, bytes int, prev <-chan struct{}, mine chan struct{}) {
	answered := false
	// The bytes are no longer held once answered (before, so that a
	// producer answered may submit again at once).
	release := func() {
		w.mu.Lock()
		w.held -= int64(bytes)
		w.m.held.Set(float64(w.held))
		w.mu.Unlock()
	}
	fail := func(err error) {
		if !answered {
			answered = true
			release()
			for _, s := range subs {
				s.t.settle(false)
				s.done(Outcome{}, err)
			}
		}
	}
	defer close(mine)
	w.slots <- struct{}{}
	start := time.Now()
	segs := make([]*wire.Segment, len(subs))
	for i, s := range subs {
		segs[i] = s.seg
	}
	key := ObjectKey(w.cfg.Server, start)
	data, refs := wire.EncodeObject(nil, w.cfg.Server, start.UnixMicro(), segs)
	w.pause(PauseBeforePut, key, len(segs))
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.PutTimeout)
	err := w.store.Put(ctx, key, data)
	cancel()
	<-w.slots
	w.m.put.Observe(time.Since(start).Seconds())
	if err == nil {
		w.pause(PauseAfterPut, key, len(segs))
	}
	if err == nil && w.cfg.afterPut != nil {
		err = w.cfg.afterPut(key)
	}
	<-prev // sequence in cut order: a producer's batches stay in order
	if err != nil {
		w.m.failures.WithLabelValues("put").Inc()
		w.log.Warn("cloud write: put WAL object", "object", key, "err", err)
		fail(fmt.Errorf("%w: put %s: %v", ErrNotWritten, key, err))
		return
	}
	if time.Since(start) > w.cfg.OrphanGrace/2 {
		w.m.failures.WithLabelValues("late").Inc()
		fail(fmt.Errorf("%w: object %s put too late to sequence", ErrNotWritten, key))
		return
	}
	// A submission follows one in this object (the transaction decides
	// both) or one of an earlier object, answered by now (cut order).
	after := make([]int, len(subs))
	idx := make(map[*Ticket]int, len(subs))
	for i, s := range subs {
		after[i] = -1
		if s.after != nil {
			if j, ok := idx[s.after]; ok {
				after[i] = j
			} else if !settledOK(s.after) {
				after[i] = Refused
			}
		}
		idx[s.t] = i
	}
	seqStart := time.Now()
	// Sequenced by half the orphan grace at the latest: the sweep spares
	// an object older than the grace only when it finds it sequenced,
	// so a sequencing that committed later could lose what it answered.
	ctx, cancel = context.WithDeadline(context.Background(), minTime(seqStart.Add(w.cfg.PutTimeout), start.Add(w.cfg.OrphanGrace/2)))
	outs, err := w.st.Sequence(ctx, key, w.cfg.Server, segs, refs, after...)
	cancel()
	w.m.sequence.Observe(time.Since(seqStart).Seconds())
	if err != nil {
		w.m.failures.WithLabelValues("sequence").Inc()
		w.log.Warn("cloud write: sequence WAL object", "object", key, "err", err)
		fail(fmt.Errorf("%w: %v", ErrNotWritten, err))
		return
	}
	w.pause(PauseAfterSequence, key, len(segs))
	w.m.objects.Inc()
	w.m.bytes.Add(float64(len(data)))
	answered = true
	release()
	now := time.Now()
	for i, s := range subs {
		w.m.ack.Observe(now.Sub(s.at).Seconds())
		s.t.settle(outs[i].Err == nil)
		s.done(outs[i], nil)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// settledOK tells whether t is settled and was sequenced (a predecessor
// not in the object being sequenced is settled by then; one that is not
// was never submitted before its follower, and counts as refused).
func settledOK(t *Ticket) bool {
	select {
	case <-t.settled:
		return t.ok
	default:
		return false
	}
}

// Flush cuts what is buffered now and waits until it is answered.
func (w *Writer) Flush() {
	w.mu.Lock()
	w.cutLocked()
	prev := w.prev
	w.mu.Unlock()
	<-prev
}

// Close flushes what is buffered and waits for every flush; later
// submissions get ErrClosed.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	w.cutLocked()
	w.mu.Unlock()
	w.wg.Wait()
}

// Collectors are the writer's metrics.
func (w *Writer) Collectors() []prometheus.Collector { return w.m.collectors() }
