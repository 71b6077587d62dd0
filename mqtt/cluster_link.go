package mqtt

import (
	"context"
	"sync"
	"time"
)

// clusterLink is this node's side of one live peer: the queue of
// publishes to forward to it and the loops that drain the queue and keep
// the peer's copy of our interest current.
//
// Invariants: queued publishes leave in queue order; a batch stays at the
// head of the queue (same payload, same sequence numbers) until the peer
// acknowledged it, so a broken link re-sends rather than skips; the queue
// holds at most QueueLimit publishes and QueueBytes, and what does not fit is dropped for
// this peer and counted by the caller.
type clusterLink struct {
	c        *clusterNode
	id, addr string

	mu      sync.Mutex
	queue   []fwdMsg
	qbytes  int           // sum of size() over queue
	wake    chan struct{} // send loop
	push    chan struct{} // push loop
	full    bool          // the peer needs our full interest
	started bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newClusterLink(c *clusterNode, id, addr string) *clusterLink {
	l := &clusterLink{c: c, id: id, addr: addr,
		wake: make(chan struct{}, 1), push: make(chan struct{}, 1), full: true}
	l.ctx, l.cancel = context.WithCancel(c.ctx)
	return l
}

func (l *clusterLink) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.ctx.Err() != nil {
		return
	}
	l.started = true
	l.wg.Add(2)
	go l.sendLoop()
	go l.pushLoop()
}

// stop ends the loops and waits for them.
func (l *clusterLink) stop() {
	l.cancel()
	l.wg.Wait()
}

// discard empties the queue and returns how many publishes it held.
func (l *clusterLink) discard() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.queue)
	l.queue, l.qbytes = nil, 0
	return n
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (l *clusterLink) wakePush() { signal(l.push) }

// forceFull makes the next push send the full interest (and retained set).
func (l *clusterLink) forceFull() {
	l.mu.Lock()
	l.full = true
	l.mu.Unlock()
	signal(l.push)
}

// enqueue queues a publish for the peer; false when the queue is full.
func (l *clusterLink) enqueue(m fwdMsg) bool {
	l.mu.Lock()
	size := m.size()
	if len(l.queue) >= l.c.cfg.QueueLimit || (len(l.queue) > 0 && l.qbytes+size > l.c.cfg.QueueBytes) || l.ctx.Err() != nil {
		l.mu.Unlock()
		return false
	}
	l.queue = append(l.queue, m)
	l.qbytes += size
	l.mu.Unlock()
	signal(l.wake)
	return true
}

// head returns the first publishes of the queue, up to the batch limits.
func (l *clusterLink) head() []fwdMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, size := 0, 0
	for n < len(l.queue) && n < maxBatchMsgs && (n == 0 || size+l.queue[n].size() <= maxBatchBytes) {
		size += l.queue[n].size()
		n++
	}
	return l.queue[:n:n]
}

// pop removes the first n publishes (acknowledged by the peer).
func (l *clusterLink) pop(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n > len(l.queue) {
		n = len(l.queue) // discarded meanwhile
	}
	for i := range n {
		l.qbytes -= l.queue[i].size()
	}
	clear(l.queue[:n])
	l.queue = l.queue[n:]
	if len(l.queue) == 0 {
		l.queue = nil // let the backing array go
	}
}

// sleep waits d or until the link stops; false when stopped.
func (l *clusterLink) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// call sends one request with the standard timeout.
func (l *clusterLink) call(typ uint8, payload []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(l.ctx, callTimeout)
	defer cancel()
	// The transport's link to the peer is looked up on every call, not
	// kept: the peer links are shared with replication, and a link
	// replaced meanwhile (the peer's address seen changing) is closed for
	// good — a kept one would fail with "closed" forever.
	return l.c.tr.Link(l.id, l.addr).Call(ctx, typ, payload)
}

func (l *clusterLink) logFailure(what string, err error) {
	if n, ok := l.c.logLimit.allow(); ok {
		l.c.s.log.Warn("mqtt cluster: "+what+" failed, retrying", "peer", l.id, "err", err, "failed_since_last_log", n)
	}
}

// sendLoop forwards the queue in batches, each re-sent until acknowledged.
func (l *clusterLink) sendLoop() {
	defer l.wg.Done()
	for {
		batch := l.head()
		if len(batch) == 0 {
			select {
			case <-l.ctx.Done():
				return
			case <-l.wake:
				continue
			}
		}
		payload := forwardBatch{Epoch: l.c.epoch, Seq: l.c.nextSeqs(l.id, len(batch)), Msgs: batch}.encode()
		backoff := 50 * time.Millisecond
		for {
			_, err := l.call(msgForward, payload)
			if err == nil {
				break
			}
			if l.ctx.Err() != nil {
				return
			}
			l.logFailure("forward", err)
			if !l.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
		}
		l.c.forwardedOut.Add(uint64(len(batch)))
		l.pop(len(batch))
	}
}

// pushLoop keeps the peer's copy of our interest current: the full set
// first and whenever the peer asks for it, then deltas since the version
// the peer acknowledged, on every change and on each anti-entropy tick.
// After a full set it sends our retained messages for the peer to fill in.
func (l *clusterLink) pushLoop() {
	defer l.wg.Done()
	local := l.c.s.interest
	tick := time.NewTicker(l.c.cfg.AntiEntropy)
	defer tick.Stop()
	var acked uint64
	backoff := 50 * time.Millisecond
	check := true
	for {
		l.mu.Lock()
		full := l.full
		l.full = false
		l.mu.Unlock()
		if full || check || local.currentVersion() != acked {
			msg := interestMsg{Epoch: l.c.epoch, Base: acked}
			ok := false
			if !full {
				msg.Version, msg.Entries, ok = local.delta(acked)
			}
			if !ok {
				msg.Full, msg.Base = true, 0
				msg.Version, msg.Entries = local.full()
			}
			resp, err := l.call(msgInterest, msg.encode())
			if err != nil || len(resp) != 1 || resp[0] == replyNeedFull {
				if l.ctx.Err() != nil {
					return
				}
				l.forceFullQuiet()
				if err != nil {
					l.logFailure("interest push", err)
					if !l.sleep(backoff) {
						return
					}
					backoff = min(2*backoff, 2*time.Second)
				}
				continue
			}
			backoff = 50 * time.Millisecond
			acked, check = msg.Version, false
			if msg.Full {
				l.sendRetained()
			}
			continue // changes may have come in meanwhile
		}
		select {
		case <-l.ctx.Done():
			return
		case <-l.push:
		case <-tick.C:
			check = true
		}
	}
}

func (l *clusterLink) forceFullQuiet() {
	l.mu.Lock()
	l.full = true
	l.mu.Unlock()
}

// sendRetained sends our retained messages (bounded, see
// RetainedSyncMaxMessages) for the peer to fill in; a failure is logged
// and left to the next full exchange.
func (l *clusterLink) sendRetained() {
	for _, chunk := range l.c.retainedSet() {
		if _, err := l.call(msgRetained, chunk); err != nil {
			if l.ctx.Err() == nil {
				l.logFailure("retained catch-up", err)
				l.forceFullQuiet()
			}
			return
		}
	}
}
