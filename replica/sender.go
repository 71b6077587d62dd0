package replica

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/tributary-io/tributary/replica/wire"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/wal"
)

// Sender tuning.
const (
	maxInflight    = 16      // wire.MsgAppend requests in flight per (partition, replica)
	maxSendBytes   = 1 << 20 // WAL bytes per wire.MsgAppend
	maxSendRecords = 4096    // records per wire.MsgAppend
	senderTick     = 200 * time.Millisecond
)

// A failed replica is retried after retryBackoffMin, doubling with each
// failure in a row up to retryBackoff (each with up to half of it as
// jitter), and at once when its peer link is up again (linkUp).
// Variables for tests.
var (
	retryBackoffMin = 100 * time.Millisecond
	retryBackoff    = time.Second
)

// outPart is one partition this node replicates, with a target per
// replica. Its mutex guards every field of it and of its targets.
type outPart struct {
	r  *Replicas
	pk pkey

	mu      sync.Mutex
	next    int64 // the WAL's next offset as last reported by Replicate
	epoch   int64
	targets map[string]*target
	waiters []*waiter
	fenced  bool
	// fencedAt is the epoch a replica owned the partition at when it
	// fenced it; a later submit at a higher epoch (this node owns it
	// again) lifts the fence.
	fencedAt int64
	closed   bool
	// seen: the main WAL has held the partition (a submit, which follows
	// a commit, or a pump found it), so its absence means it was dropped,
	// not that its first group is still being committed.
	seen bool
}

// target is the replication state of one partition on one replica.
type target struct {
	id, addr string
	sent     int64 // next offset to send; -1 = from the WAL's released offset
	acked    int64 // the replica holds everything below, durably
	inflight int
	gen      int       // bumped on every rewind; stale replies do not rewind again
	failedAt time.Time // zero while healthy
	retryAt  time.Time // a failed target is not retried before
	fails    int       // failures in a row (the backoff doubles with each)
	told     int64     // released offset last told to the replica
	telling  bool      // a wire.MsgRelease is in flight
	out      []outMsg  // appends queued for the link, in offset order (counted in inflight)
	greeted  bool      // an append of this incarnation was queued (pump sends one even with nothing new)
	wake     chan struct{}
	stop     chan struct{}
	removed  bool
}

func (t *target) failed() bool { return t.removed || !t.failedAt.IsZero() }

// outMsg is an encoded wire.MsgAppend waiting for the target's sender,
// the only goroutine that hands a target's appends to the link (so they
// reach it in offset order).
type outMsg struct {
	payload []byte
	gen     int
	n       int64 // records
}

// waiter is one Replicate call's wait for one partition: Replicate waits
// on done, ReplicateAsync gets call's callback.
type waiter struct {
	o        *outPart
	upTo     int64
	targets  []*target
	done     chan struct{}
	call     *asyncCall
	degraded bool
	err      error
}

// outPartOf returns the partition's replication state, creating it.
func (r *Replicas) outPartOf(pk pkey) (*outPart, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	o := r.out[pk]
	if o == nil {
		o = &outPart{r: r, pk: pk, targets: map[string]*target{}}
		r.out[pk] = o
	}
	return o, nil
}

// Replicate waits until recs (just made durable in the main WAL) are
// durable on the replicas; see the package comment for the policies.
func (r *Replicas) Replicate(ctx context.Context, recs []*tributary.Record) error {
	return r.replicate(ctx, recs, true)
}

// Notify starts replicating recs without waiting (QoS 0).
func (r *Replicas) Notify(recs []*tributary.Record) {
	r.replicate(context.Background(), recs, false)
}

// ends is the end offset and epoch of each partition of recs.
func ends(recs []*tributary.Record) map[pkey][2]int64 {
	out := make(map[pkey][2]int64, 1)
	for _, rec := range recs {
		pk := pkey{rec.Stream, rec.Partition}
		e := out[pk]
		out[pk] = [2]int64{max(e[0], rec.Offset+1), max(e[1], rec.Epoch)}
	}
	return out
}

func (r *Replicas) replicate(ctx context.Context, recs []*tributary.Record, wait bool) error {
	if r.cfg.Factor <= 1 || len(recs) == 0 {
		return nil
	}
	ring := r.ring()
	short := len(ring) < r.cfg.Factor-1
	var ws []*waiter
	for pk, e := range ends(recs) {
		o, err := r.outPartOf(pk)
		if err != nil {
			return err
		}
		w, err := o.submit(e[0], e[1], ring, wait, nil)
		if err != nil {
			return err
		}
		if w != nil {
			ws = append(ws, w)
		}
	}
	if !wait {
		return nil
	}
	timer := time.NewTimer(r.cfg.Timeout)
	defer timer.Stop()
	degraded := short
	for _, w := range ws {
		select {
		case <-w.done:
		case <-timer.C:
			r.expire(ws)
			<-w.done
		case <-ctx.Done():
			return ctx.Err()
		}
		if w.err != nil {
			return w.err
		}
		degraded = degraded || w.degraded
	}
	return r.outcome(degraded, short)
}

// outcome applies the policy to a replication that was degraded.
func (r *Replicas) outcome(degraded, short bool) error {
	why := "replica unreachable or slow"
	if short {
		why = "too few live members"
	}
	r.setDegraded(degraded, why)
	if degraded && r.cfg.Policy == Refuse {
		return ErrNotReplicated
	}
	return nil
}

// asyncCall is one ReplicateAsync call: its waiters, of which left are
// not done yet. Completions run on the dispatcher goroutine only.
type asyncCall struct {
	left     int
	short    bool
	degraded bool
	err      error
	done     func(error)
	timer    *time.Timer
	ws       []*waiter
}

// ReplicateAsync is Replicate with a callback instead of a wait, so that
// a pipelined front door needs no goroutine per record: done is called
// exactly once, on the replicas' dispatcher goroutine (or the caller's,
// when there is nothing to wait for), and must not block long.
func (r *Replicas) ReplicateAsync(recs []*tributary.Record, done func(error)) {
	if r.cfg.Factor <= 1 || len(recs) == 0 {
		done(nil)
		return
	}
	ring := r.ring()
	parts := ends(recs)
	call := &asyncCall{short: len(ring) < r.cfg.Factor-1, done: done, left: len(parts)}
	for pk, e := range parts {
		var w *waiter
		o, err := r.outPartOf(pk)
		if err == nil {
			w, err = o.submit(e[0], e[1], ring, true, call)
		}
		if err != nil {
			// This partition's share fails now; submitted ones finish as usual.
			r.dispatch(func() { call.finish(r, &waiter{err: err}) })
			continue
		}
		call.ws = append(call.ws, w)
	}
	ws := call.ws
	r.dispatch(func() {
		if call.left > 0 {
			call.timer = time.AfterFunc(r.cfg.Timeout, func() { r.expire(ws) })
		}
	})
}

// finish queues a completed waiter's share of its call (o.mu held).
func (r *Replicas) finish(w *waiter) {
	r.dispatch(func() { w.call.finish(r, w) })
}

func (c *asyncCall) finish(r *Replicas, w *waiter) {
	c.left--
	c.degraded = c.degraded || w.degraded
	if c.err == nil {
		c.err = w.err
	}
	if c.left > 0 {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	err := c.err
	if err == nil {
		err = r.outcome(c.degraded || c.short, c.short)
	}
	c.done(err)
}

// dispatch queues f for the dispatcher goroutine, which runs the queued
// functions in order.
func (r *Replicas) dispatch(f func()) {
	r.cbMu.Lock()
	if r.cbExited { // after Close: run it here
		r.cbMu.Unlock()
		f()
		return
	}
	r.cbq = append(r.cbq, f)
	r.cbMu.Unlock()
	wakeUp(r.cbWake)
}

// dispatcher runs what dispatch queued until Close has closed every
// partition (whose waiters then finish with ErrClosed) and the queue is
// empty.
func (r *Replicas) dispatcher() {
	defer r.wg.Done()
	for {
		r.cbMu.Lock()
		q := r.cbq
		r.cbq = nil
		r.cbMu.Unlock()
		for _, f := range q {
			f()
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-r.cbWake:
		case <-r.cbStop:
			r.cbMu.Lock()
			if len(r.cbq) == 0 {
				r.cbExited = true
				r.cbMu.Unlock()
				return
			}
			r.cbMu.Unlock()
		}
	}
}

// expire marks the targets the waiters still wait for as failed.
func (r *Replicas) expire(ws []*waiter) {
	for _, w := range ws {
		o := w.o
		o.mu.Lock()
		for _, t := range w.targets {
			if t.acked < w.upTo && !t.failed() {
				o.fail(t, "no reply within the replication timeout")
			}
		}
		o.settle()
		o.mu.Unlock()
	}
}

// submit records that the WAL holds the partition up to end, brings the
// targets in line with ring and, when wait, registers a waiter.
func (o *outPart) submit(end, epoch int64, ring []Member, wait bool, call *asyncCall) (*waiter, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unfence(epoch)
	if o.fenced {
		return nil, ErrFenced
	}
	if o.closed {
		return nil, ErrClosed
	}
	o.next = max(o.next, end)
	o.epoch = max(o.epoch, epoch)
	o.seen = true
	o.align(ring)
	var w *waiter
	if wait {
		w = &waiter{o: o, upTo: end, done: make(chan struct{}), call: call}
		for _, t := range o.targets {
			w.targets = append(w.targets, t)
		}
		if !o.try(w) { // only the new waiter can have changed
			o.waiters = append(o.waiters, w)
		}
	}
	for _, t := range o.targets {
		wakeUp(t.wake)
	}
	return w, nil
}

// unfence lifts the fence when the node writes the partition at a higher
// epoch than it was fenced at (o.mu held).
func (o *outPart) unfence(epoch int64) {
	if o.fenced && epoch > o.fencedAt {
		o.r.log.Info("partition owned again at a higher epoch: replicating it again", "stream", o.pk.stream, "partition", o.pk.partition,
			"epoch", epoch, "fenced_at", o.fencedAt)
		o.fenced = false
		for _, t := range o.targets {
			o.rewind(t)
		}
	}
}

// align brings the targets in line with ring (o.mu held).
func (o *outPart) align(ring []Member) {
	want := map[string]bool{}
	for _, m := range ring {
		want[m.ID] = true
		t := o.targets[m.ID]
		if t != nil && t.addr != m.Peer {
			o.remove(t) // restarted on a new address: start over
			t = nil
		}
		if t == nil {
			t = &target{id: m.ID, addr: m.Peer, sent: -1, wake: make(chan struct{}, 1), stop: make(chan struct{})}
			o.targets[m.ID] = t
			o.r.wg.Add(1)
			go o.run(t)
		}
	}
	for id, t := range o.targets {
		if !want[id] {
			o.remove(t)
		}
	}
}

// Tapped implements wal.Tap: the main WAL hands over each group's chunks
// before fsyncing them, and they go to every target that is in step (it
// has been sent everything before the group) at once, so that the
// replicas' fsyncs overlap the owner's. A target that is behind, failed
// or has maxInflight appends in flight gets the records later from the
// WAL (pump).
func (r *Replicas) Tapped(parts []wal.TappedPartition) {
	if r.cfg.Factor <= 1 {
		return
	}
	ring := r.ring()
	for i := range parts {
		o, err := r.outPartOf(pkey{parts[i].Stream, parts[i].Partition})
		if err != nil {
			return
		}
		o.tapped(&parts[i], ring)
	}
}

func (o *outPart) tapped(p *wal.TappedPartition, ring []Member) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unfence(p.Epoch)
	if o.fenced || o.closed {
		return
	}
	o.next = max(o.next, p.Next)
	o.epoch = max(o.epoch, p.Epoch)
	o.align(ring)
	var msg []byte
	for _, t := range o.targets {
		if t.failed() || t.sent != p.First || t.inflight >= maxInflight {
			continue
		}
		if msg == nil {
			msg = (&wire.Append{Stream: p.Stream, Partition: p.Partition, Epoch: o.epoch, Base: p.Released,
				Incarnation: p.Incarnation, From: p.Start, Chunks: p.Chunks}).Encode()
		}
		t.sent = p.Next
		t.inflight++
		t.greeted = true
		t.out = append(t.out, outMsg{payload: msg, gen: t.gen, n: p.Next - p.First})
		wakeUp(t.wake)
	}
}

func wakeUp(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// remove stops a target (o.mu held).
func (o *outPart) remove(t *target) {
	if t.removed {
		return
	}
	t.removed = true
	close(t.stop)
	delete(o.targets, t.id)
	o.settle()
}

// fail marks a target missing and rewinds it to what it acknowledged
// (o.mu held).
func (o *outPart) fail(t *target, why string) {
	if t.failedAt.IsZero() {
		o.r.log.Warn("replica missing for a partition", "replica", t.id, "stream", o.pk.stream, "partition", o.pk.partition,
			"acked", t.acked, "next", o.next, "reason", why)
	}
	t.failedAt = time.Now()
	t.fails++
	b := min(retryBackoff, retryBackoffMin<<min(t.fails-1, 10))
	t.retryAt = t.failedAt.Add(b/2 + rand.N(b/2+1))
	o.rewind(t)
}

// retryNow lets a failed target be retried at once (o.mu held).
func (t *target) retryNow() {
	t.retryAt = time.Time{}
	wakeUp(t.wake)
}

// rewind makes a target resend from what it acknowledged (o.mu held).
func (o *outPart) rewind(t *target) {
	t.gen++
	t.inflight -= len(t.out)
	t.out = nil
	if t.sent > t.acked {
		t.sent = t.acked
	}
}

// settle completes the waiters every target has answered for (o.mu held).
func (o *outPart) settle() {
	keep := o.waiters[:0]
	for _, w := range o.waiters {
		if !o.try(w) {
			keep = append(keep, w)
		}
	}
	clear(o.waiters[len(keep):])
	o.waiters = keep
}

// try completes w if every target has answered for it, reporting whether
// it did (o.mu held).
func (o *outPart) try(w *waiter) bool {
	done, degraded := true, false
	for _, t := range w.targets {
		switch {
		case t.acked >= w.upTo:
		case t.failed():
			degraded = true
		default:
			done = false
		}
	}
	if o.fenced {
		done, w.err = true, ErrFenced
	}
	if o.closed && !done {
		done, w.err = true, ErrClosed
	}
	if !done {
		return false
	}
	w.degraded = degraded
	if w.call != nil {
		o.r.finish(w)
	} else {
		close(w.done)
	}
	return true
}

// lag is the records of the partition not yet on every replica.
func (o *outPart) lag() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fenced {
		return 0 // not replicated any more: another node owns it
	}
	var lag int64
	for _, t := range o.targets {
		lag = max(lag, o.next-max(t.acked, 0))
	}
	return lag
}

func (o *outPart) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	for _, t := range o.targets {
		o.remove(t)
	}
	o.settle()
}

// run is the sender of one target: it sends whenever woken, and on a tick
// (to retry after failures and to pass on releases).
func (o *outPart) run(t *target) {
	defer o.r.wg.Done()
	tick := time.NewTicker(senderTick)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-o.r.stop:
			return
		case <-t.wake:
		case <-tick.C:
		}
		o.flushOut(t)
		o.pump(t)
		o.flushOut(t)
	}
}

// flushOut hands the target's queued appends to the link, in order.
func (o *outPart) flushOut(t *target) {
	o.mu.Lock()
	msgs := t.out
	t.out = nil
	o.mu.Unlock()
	for _, m := range msgs {
		o.r.cfg.Transport.Go(t.id, t.addr, wire.MsgAppend, m.payload, func(resp []byte, err error) {
			o.onReply(t, m.gen, m.n, resp, err)
		})
	}
}

// pump queues what the target lacks, read back from the WAL (a target
// that is new, behind or recovering), up to the in-flight limit.
func (o *outPart) pump(t *target) {
	st, ok := o.r.cfg.Log.Partition(o.pk.stream, o.pk.partition)
	o.mu.Lock()
	if ok {
		o.seen = true
	}
	seen := o.seen
	o.mu.Unlock()
	if !ok && !seen {
		return // a new partition whose first group is tapped, not yet committed
	}
	if !ok {
		// The WAL dropped the partition: the uplink was fenced out of it.
		o.mu.Lock()
		if !o.fenced {
			o.fenced, o.fencedAt = true, o.epoch
			o.r.log.Warn("partition dropped from the WAL (fenced): no longer replicating it", "stream", o.pk.stream, "partition", o.pk.partition)
			o.settle()
		}
		o.mu.Unlock()
		return
	}
	base, inc := st.Released, o.r.cfg.Log.Incarnation()
	for {
		o.mu.Lock()
		if o.fenced || t.removed || !t.failedAt.IsZero() && time.Now().Before(t.retryAt) {
			o.mu.Unlock()
			return
		}
		o.next = max(o.next, st.Next)
		t.sent = max(t.sent, base)
		// Retry a failed replica with what there is; greet a new one.
		probe := t.inflight == 0 && (!t.failedAt.IsZero() || !t.greeted)
		if t.inflight >= maxInflight || t.sent >= st.Next && !probe {
			break // o.mu held
		}
		from, gen, epoch := t.sent, t.gen, o.epoch
		o.mu.Unlock()
		chunks, err := o.r.cfg.Log.ReadChunks(o.pk.stream, o.pk.partition, from, maxSendBytes)
		end := from
		if err == nil && len(chunks) > 0 {
			var first int64
			if first, _, err = wal.ChunkOffsets(chunks[0]); err == nil && first > from {
				base = max(base, first) // released meanwhile: all below is in the table
			}
			if err == nil {
				_, end, err = wal.ChunkOffsets(chunks[len(chunks)-1])
			}
		}
		if err != nil {
			o.r.log.Warn("replica: read wal", "stream", o.pk.stream, "partition", o.pk.partition, "from", from, "err", err)
			return
		}
		o.mu.Lock()
		if t.removed || o.fenced || gen != t.gen || t.sent != from {
			o.mu.Unlock()
			return
		}
		t.sent = max(end, from)
		t.inflight++
		t.greeted = true
		msg := wire.Append{Stream: o.pk.stream, Partition: o.pk.partition, Epoch: epoch, Base: base,
			Incarnation: inc, From: st.Start, Chunks: chunks}
		t.out = append(t.out, outMsg{payload: msg.Encode(), gen: gen, n: max(end-from, 0)})
		o.mu.Unlock()
		if len(chunks) == 0 {
			return // a probe: wait for its answer
		}
	}
	// o.mu is held: pass on the owner's releases.
	tell := base > t.told && !t.telling && t.failedAt.IsZero()
	if tell {
		t.telling = true
	}
	o.mu.Unlock()
	if !tell {
		return
	}
	o.r.cfg.Transport.Go(t.id, t.addr, wire.MsgRelease, wire.Release{Stream: o.pk.stream, Partition: o.pk.partition, UpTo: base}.Encode(),
		func(_ []byte, err error) {
			o.mu.Lock()
			defer o.mu.Unlock()
			t.telling = false
			if err == nil {
				t.told = max(t.told, base)
			}
		})
}

// onReply handles a wire.MsgAppend reply.
func (o *outPart) onReply(t *target, gen int, n int64, resp []byte, err error) {
	var rep wire.Reply
	if err == nil {
		rep, err = wire.DecodeReply(resp)
	}
	var fencedAt int64 = -1
	o.mu.Lock()
	t.inflight--
	switch {
	case t.removed:
	case err != nil:
		if gen == t.gen {
			o.fail(t, err.Error())
		}
	case rep.Status == wire.StatusFenced:
		if !o.fenced {
			o.fenced, o.fencedAt = true, rep.Epoch
			fencedAt = rep.Epoch
		}
	case rep.Status == wire.StatusStale:
		if gen == t.gen {
			o.fail(t, "the replica holds a newer incarnation of this node's WAL")
		}
	case rep.Status == wire.StatusGap:
		t.acked = max(t.acked, rep.Next)
		if gen == t.gen {
			t.gen++
			t.sent = rep.Next
		}
	default:
		if rep.Next > t.acked {
			o.r.replicated.Add(min(rep.Next-max(t.acked, 0), n))
		}
		t.acked = max(t.acked, rep.Next)
		t.failedAt, t.fails = time.Time{}, 0
		if gen == t.gen && t.sent < rep.Next {
			t.sent = rep.Next
		}
	}
	o.settle()
	o.mu.Unlock()
	wakeUp(t.wake)
	if fencedAt >= 0 {
		o.r.fenced.Add(1)
		o.r.log.Error("partition fenced by a replica: another node took it over; no longer writing it",
			"stream", o.pk.stream, "partition", o.pk.partition, "replica", t.id, "their_epoch", fencedAt, "our_epoch", o.epoch)
		o.r.cfg.Owner.Fenced(o.pk.stream, o.pk.partition)
	}
}
