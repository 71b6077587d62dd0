package mqtt

import (
	"sync"
	"sync/atomic"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary"
)

// pipeline acknowledges QoS 1 and 2 publishes asynchronously, so that one
// connection keeps reading while its earlier publishes wait for the WAL's
// fsync and many messages in flight on one connection share a group commit.
//
// # Invariants
//
//  1. Ack only after durable, as in the blocking design: the PUBACK/PUBREC
//     with a success code is written only after the appender's done reported
//     nil for the record.
//  2. In order per client [MQTT-4.6.0-2, -3]: each session's publishes are
//     acknowledged (or refused) in the order they were read, whatever order
//     the appender completes them in: a FIFO per session, popped only at its head.
//  3. Receive Maximum: an MQTT 5 client with more QoS 1/2 publishes
//     unacknowledged (pending here, or QoS 2 awaiting PUBREL) than the
//     server's Receive Maximum gets DISCONNECT 0x93 [MQTT-3.3.4-9]; an
//     MQTT 3.1.1 client, which was never told a limit, is not read from
//     until it is below it (back-pressure, as the blocking design gave).
//  4. A re-sent packet id that is still pending (a client that reconnected
//     to its session and re-sent its unacknowledged publishes) is not
//     appended twice: the pending original is acknowledged instead. One
//     re-sent after its original was answered on the resumed connection,
//     or withheld (stored, not confirmed: stored.go), is found in the
//     server's stored publishes and answered from there.
//  5. Never into a taken-over session: a completion is written only into
//     the session's current connection, after it is established; while a
//     new connection of the id takes the session over, completions wait
//     (and the takeover waits for one being written). When the new
//     connection starts clean, or the session ends, the pending publishes
//     are forgotten: durable ones stay in the WAL but are neither
//     acknowledged nor delivered (as a blocking publish whose client left).
//  6. Delivery is mochi's own: once durable, just before its
//     acknowledgement is written (mochi's order: retained, acked,
//     delivered), the packet is injected (Server.InjectPacket) through an
//     inline client carrying the publisher's client id, so mochi's retain and delivery code runs with
//     the right origin (NoLocal), the MQTT 5 properties (the inline client
//     is of version 5: mochi expires only version-5 messages queued for an
//     offline session [MQTT-3.3.2-5]) and the cluster
//     routing (called here, as the cluster hook does for blocking
//     acknowledgements). A durable publish is delivered once, also when
//     its acknowledgement could not be written (the client's re-send is
//     then logged again at QoS 1 unless the connection was closed for a
//     withheld publish, answered from the session at QoS 2).
//  7. QoS 2: the PUBREC is remembered in the session (pubrecs) before it is
//     written, until the client's PUBREL: a re-sent PUBLISH of that id gets
//     the PUBREC again and is not logged, and the PUBREL, read on the
//     connection's own goroutine (OnPacketRead), puts the PUBREC into
//     mochi's inflight table just before mochi processes it, so mochi
//     answers PUBCOMP as usual.
//
// Why not inject into the publisher's own client: mochi's processPublish
// then writes the client's inflight table (Set/Delete for every QoS 1/2
// message) from the pipeline's goroutine, while the read goroutine's
// Inflight.NextImmediate takes the table's read lock twice (v2.7.9
// inflight.go), which deadlocks when a writer queues between the two — it
// did, in these tests. The pipeline writes only the acknowledgement
// packets (Client.WritePacket takes the client's write lock) and leaves the
// inflight table to the read goroutine.
//
// # Outline
//
// OnPublish (read goroutine) checks the ACL and quotas, adds the publish to
// its session's FIFO and byID, submits it (Appender.Submit, Durable) and returns
// packets.ErrRejectPacket, so mochi neither acks nor delivers it now. The
// appender's done marks the entry durable (or failed) and starts the session's
// worker goroutine if none runs. The worker pops durable entries from the
// FIFO head while the session has a ready connection, all that are ready
// at once: a failure is refused (refuse, as in the blocking design), a
// success is delivered and gets its PUBACK or PUBREC, the batch's
// acknowledgements in one write. Refusals decided at once (ACL, retained quota) go
// through the FIFO too when earlier publishes are pending, so acks stay in
// order.
type pipeline struct {
	s  *Server
	rm int // Receive Maximum

	mu       sync.Mutex
	sessions map[string]*ackSession

	wmu     sync.Mutex // guards closed and the Add of workers
	closed  bool
	stop    chan struct{} // closed by wait: lingering workers leave
	workers sync.WaitGroup

	// locals are inline clients a worker borrows to deliver as a publisher
	// (its client id set for the delivery): one per session would cost
	// each session mochi's client state (about 10 KB).
	locals sync.Pool
}

// ackSession is the pending publishes of one client id.
type ackSession struct {
	id string

	mu    sync.Mutex
	conn  *mochi.Client // the connection that holds the id (latest to establish)
	ready bool          // conn is established and may be written to
	gen   uint64        // bumped when the pending publishes are forgotten
	queue []*pendingPub // FIFO in read order; head at queue[0]
	byID  map[uint16]*pendingPub
	run   bool // a worker is running
	idle  bool // the worker waits (lingers) for more work on wake
	wake  chan struct{}
	space chan struct{} // signalled when an entry leaves byID
	// pubrecs are the QoS 2 PUBRECs written and not yet released.
	pubrecs map[uint16]packets.Packet

	// inject is held while a completion is written into conn; a takeover
	// takes it once after switching conn, so no write into the old
	// connection follows.
	inject sync.Mutex
}

// pendingPub is one QoS 1/2 publish waiting for its acknowledgement.
type pendingPub struct {
	pk     packets.Packet
	stream string
	rec    *tributary.Record // the appended record (nil for a refusal or a re-send)
	stored *storedPub        // a re-send of a stored, unacknowledged publish: confirmed, not appended
	read   *mochi.Client     // the connection it was read on
	gen    uint64
	start  time.Time
	done   bool // durable, failed or refused: ready at the head
	err    error
	deny   *packets.Code // refused without an append (ACL, retained quota)
	again  bool          // a re-sent QoS 2 publish already PUBREC'd: answer PUBREC again
}

// errReject is packets.ErrRejectPacket as an error value made once:
// returning the Code struct itself boxes it anew for every publish.
var errReject error = packets.ErrRejectPacket

func newPipeline(s *Server) *pipeline {
	p := &pipeline{s: s, rm: int(s.cfg.ReceiveMaximum), sessions: map[string]*ackSession{}, stop: make(chan struct{})}
	p.locals.New = func() any {
		local := s.broker.NewClient(nil, "local", "", true)
		// mochi stamps each queued message with the injecting client's
		// version, and its expiry sweep drops only version-5 messages
		// [MQTT-3.3.2-5]; version 5 also keeps the MQTT 5 properties.
		local.Properties.ProtocolVersion = 5
		return local
	}
	return p
}

// session returns the state of cl's id, creating it.
func (p *pipeline) session(id string) *ackSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.sessions[id]
	if !ok {
		a = &ackSession{id: id, byID: map[uint16]*pendingPub{}, pubrecs: map[uint16]packets.Packet{},
			space: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
		p.sessions[id] = a
	}
	return a
}

func (p *pipeline) lookup(id string) *ackSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[id]
}

// forget drops a session's pending publishes (callers hold a.mu).
func (a *ackSession) forget() {
	a.gen++
	a.queue = nil
	clear(a.byID)
	clear(a.pubrecs)
	select {
	case a.space <- struct{}{}:
	default:
	}
}

// establish runs in OnSessionEstablish, before mochi takes an existing
// session of the id over: completions stop going to the old connection,
// and one being written is waited for.
func (p *pipeline) establish(cl *mochi.Client) {
	a := p.session(cl.ID)
	a.mu.Lock()
	a.conn, a.ready = cl, false
	a.mu.Unlock()
	a.inject.Lock()
	a.inject.Unlock() //nolint:staticcheck // a barrier: wait for a write into the old connection
}

// established runs in OnSessionEstablished: the connection may be written
// to. A clean start forgets what the previous connection left pending.
func (p *pipeline) established(cl *mochi.Client, clean bool) {
	a := p.session(cl.ID)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != cl {
		return
	}
	if clean {
		a.forget()
	}
	a.ready = true
	p.kick(a)
}

// disconnected runs in OnDisconnect: completions wait for a connection
// that resumes the session; a session that ends forgets them.
func (p *pipeline) disconnected(cl *mochi.Client, expire bool) {
	a := p.lookup(cl.ID)
	if a == nil {
		return
	}
	a.mu.Lock()
	if a.conn != cl {
		a.mu.Unlock()
		return // taken over: the new connection owns the session
	}
	a.ready = false
	a.conn = nil
	if expire {
		a.forget()
	}
	empty := len(a.queue) == 0 && len(a.pubrecs) == 0 // a kept session keeps its PUBRECs
	a.mu.Unlock()
	if empty {
		p.drop(a)
	}
}

// expired runs in OnClientExpired: the session is gone.
func (p *pipeline) expired(cl *mochi.Client) {
	if a := p.lookup(cl.ID); a != nil {
		a.mu.Lock()
		if a.conn != nil && a.conn != cl {
			a.mu.Unlock()
			return
		}
		a.forget()
		a.mu.Unlock()
		p.drop(a)
	}
}

// drop removes a from the table unless it is in use again.
func (p *pipeline) drop(a *ackSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil && len(a.queue) == 0 && len(a.pubrecs) == 0 && p.sessions[a.id] == a {
		delete(p.sessions, a.id)
	}
}

// publish takes a QoS 1/2 publish of a network client off the read loop.
// It returns the error OnPublish returns (always packets.ErrRejectPacket
// unless the client is stopped).
func (p *pipeline) publish(cl *mochi.Client, pk packets.Packet, rec *tributary.Record) error {
	s := p.s
	a := p.session(cl.ID)
	a.mu.Lock()
	if a.conn != cl {
		if a.conn != nil || cl.Closed() || cl.IsTakenOver() {
			a.mu.Unlock()
			return errReject // an old connection of a taken-over id
		}
		a.conn, a.ready = cl, true // established before the pipeline knew it
	}
	if _, ok := a.byID[pk.PacketID]; ok {
		a.mu.Unlock()
		s.resent.Add(1)
		return errReject // still pending: its ack is coming
	}
	if _, ok := a.pubrecs[pk.PacketID]; ok && pk.FixedHeader.Qos == 2 {
		// Durable and PUBREC'd, not released: answer PUBREC again, in order
		// [MQTT-4.3.3-10].
		e := &pendingPub{pk: pk, gen: a.gen, start: time.Now(), done: true, again: true}
		a.queue = append(a.queue, e)
		a.byID[pk.PacketID] = e
		p.kick(a)
		a.mu.Unlock()
		s.resent.Add(1)
		return errReject
	}
	for p.full(a, cl) {
		if cl.Properties.ProtocolVersion >= 5 {
			a.mu.Unlock()
			s.refusedRM.Add(1)
			_ = s.broker.DisconnectClient(cl, packets.ErrReceiveMaximum) // [MQTT-3.3.4-9]
			return errReject
		}
		a.mu.Unlock()
		if !p.waitSpace(a, cl) {
			return errReject
		}
		a.mu.Lock()
		if a.conn != cl {
			a.mu.Unlock()
			return errReject
		}
	}
	if sp := s.stored.take(cl.ID, pk); sp != nil {
		// The re-send of a publish stored but not acknowledged (stored.go):
		// its stored record is confirmed, not appended again.
		e := &pendingPub{pk: pk, stream: rec.Stream, stored: sp, read: cl, gen: a.gen, start: time.Now()}
		a.queue = append(a.queue, e)
		a.byID[pk.PacketID] = e
		a.mu.Unlock()
		s.resentStored.Add(1)
		go func() { p.complete(a, e, s.confirm(sp)) }()
		return errReject
	}
	e := &pendingPub{pk: pk, stream: rec.Stream, rec: rec, read: cl, gen: a.gen, start: time.Now()}
	a.queue = append(a.queue, e)
	a.byID[pk.PacketID] = e
	a.mu.Unlock()
	if _, err := s.app.Submit(s.ctx, &tributary.Write{Records: []*tributary.Record{rec}}, tributary.Durable, func(err error) { p.complete(a, e, err) }); err != nil {
		p.complete(a, e, err)
	}
	return errReject
}

// refuseInOrder queues a refusal decided at once (code for an MQTT 5
// client) behind the session's pending publishes; ok is false when none is
// pending, and the caller refuses at once.
func (p *pipeline) refuseInOrder(cl *mochi.Client, pk packets.Packet, stream string, cause error, code *packets.Code) bool {
	a := p.lookup(cl.ID)
	if a == nil {
		return false
	}
	a.mu.Lock()
	if a.conn != cl || len(a.queue) == 0 {
		a.mu.Unlock()
		return false
	}
	if _, ok := a.byID[pk.PacketID]; ok {
		a.mu.Unlock()
		return true // a re-send of a pending publish: the original's answer comes
	}
	e := &pendingPub{pk: pk, stream: stream, gen: a.gen, start: time.Now(), done: true, err: cause, deny: code}
	a.queue = append(a.queue, e)
	a.byID[pk.PacketID] = e
	a.mu.Unlock()
	return true
}

// full reports whether one more publish would exceed the Receive Maximum
// (callers hold a.mu): the pending ones and the QoS 2 ones awaiting PUBREL.
func (p *pipeline) full(a *ackSession, cl *mochi.Client) bool {
	return len(a.byID)+len(a.pubrecs) >= p.rm
}

// released runs in OnPacketRead on cl's read goroutine for a PUBREL: the
// PUBREC it releases goes into mochi's inflight table, where mochi's
// processPubrel, next, finds it and answers PUBCOMP.
func (p *pipeline) released(cl *mochi.Client, id uint16) {
	a := p.lookup(cl.ID)
	if a == nil {
		return
	}
	a.mu.Lock()
	rec, ok := a.pubrecs[id]
	if ok && a.conn == cl {
		delete(a.pubrecs, id)
	}
	a.mu.Unlock()
	if ok && a.conn == cl {
		if cl.State.Inflight.Set(rec) {
			atomic.AddInt64(&p.s.broker.Info.Inflight, 1) // processPubrel takes it off
		}
		select {
		case a.space <- struct{}{}:
		default:
		}
	}
}

// waitSpace waits (MQTT 3.1.1 back-pressure) until a's pending publishes
// shrink, cl closes or the server does; it reports whether to go on.
func (p *pipeline) waitSpace(a *ackSession, cl *mochi.Client) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-a.space:
	case <-t.C:
	case <-p.s.ctx.Done():
		return false
	}
	return !cl.Closed()
}

// complete records the appender's outcome for e and starts a's worker.
func (p *pipeline) complete(a *ackSession, e *pendingPub, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.gen != a.gen {
		return // forgotten (clean start, session ended)
	}
	e.done, e.err = true, err
	if len(a.queue) > 0 && a.queue[0] == e {
		p.kick(a)
	}
}

// kick starts a's worker if the head is ready (callers hold a.mu).
func (p *pipeline) kick(a *ackSession) {
	if !a.ready || len(a.queue) == 0 || !a.queue[0].done {
		return
	}
	if a.run {
		if a.idle {
			a.idle = false
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.closed {
		return // the server is closed: nothing is answered any more
	}
	a.run = true
	p.workers.Add(1)
	go p.work(a)
}

// maxBatch bounds the entries a worker answers with one write.
const maxBatch = 256

// linger is how long a session's worker waits for the next completion
// before it ends: a busy session keeps its goroutine (and the stack it grew
// in mochi's delivery code, which a fresh goroutine copies up again on
// every message: a sixth of the CPU of one message at a time), an idle one
// costs nothing. Each session has its own worker so that a client that
// stops reading blocks only its own acknowledgements.
const linger = 100 * time.Millisecond

// work answers a's ready head entries in order, into the current
// connection: all that are ready at once, their acknowledgements in one
// write (one syscall for the many messages of one group commit).
func (p *pipeline) work(a *ackSession) {
	defer p.workers.Done()
	var batch []*pendingPub
	var buf []byte
	idle := time.NewTimer(linger)
	defer idle.Stop()
	for {
		a.mu.Lock()
		if !a.ready || a.conn == nil || a.conn.Closed() {
			a.run, a.idle = false, false
			a.mu.Unlock()
			return
		}
		if len(a.queue) == 0 || !a.queue[0].done {
			a.idle = true
			a.mu.Unlock()
			idle.Reset(linger)
			select {
			case <-a.wake:
				continue
			case <-idle.C:
			case <-p.stop:
			}
			a.mu.Lock()
			if a.idle { // not kicked meanwhile
				a.run, a.idle = false, false
				a.mu.Unlock()
				return
			}
			a.mu.Unlock()
			select { // the kick's signal, if it is still there
			case <-a.wake:
			default:
			}
			continue
		}
		batch = batch[:0]
		now := time.Now().Unix()
		for len(a.queue) > 0 && a.queue[0].done && len(batch) < maxBatch {
			e := a.queue[0]
			a.queue[0] = nil
			a.queue = a.queue[1:]
			if a.byID[e.pk.PacketID] == e {
				delete(a.byID, e.pk.PacketID)
			}
			if e.err == nil && !e.again && e.deny == nil && e.pk.FixedHeader.Qos == 1 && e.read != a.conn {
				// Read on an earlier connection of the session: the client
				// may re-send it before this PUBACK reaches it, and that
				// re-send, once it finds no pending entry, must not be
				// appended again (stored.go; QoS 2 has pubrecs).
				p.rememberStored(a.id, e, true)
			}
			if e.err == nil && !e.again && e.pk.FixedHeader.Qos == 2 {
				// Remembered before the PUBREC is written: the PUBREL may
				// come at once.
				a.pubrecs[e.pk.PacketID] = packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec},
					PacketID: e.pk.PacketID, Created: now}
			}
			batch = append(batch, e)
		}
		if len(a.queue) == 0 {
			a.queue = nil
		}
		cl := a.conn
		a.inject.Lock()
		a.mu.Unlock()
		select {
		case a.space <- struct{}{}:
		default:
		}
		local := p.locals.Get().(*mochi.Client)
		local.ID = a.id
		buf = p.answer(cl, local, batch, buf[:0])
		local.ID = ""
		p.locals.Put(local)
		a.inject.Unlock()
		clear(batch)
	}
}

// hasSubscribers reports whether any subscription of broker (a client's,
// a shared group's or an inline one) matches topic, as mochi's delivery
// looks them up.
func hasSubscribers(broker *mochi.Server, topic string) bool {
	subs := broker.Topics.Subscribers(topic)
	return len(subs.Subscriptions) > 0 || len(subs.Shared) > 0 || len(subs.InlineSubscriptions) > 0
}

// answer delivers the durable packets of batch through local, in order,
// then writes the outcomes of batch into cl, in order: refusals, and the
// acknowledgements of the durable packets (consecutive ones in one write,
// encoded in buf). Delivering first keeps mochi's order, in which a
// retained message is stored before its PUBACK is written (so a client's
// next retained publish, sent on that PUBACK, is checked against it). It
// returns buf for reuse.
func (p *pipeline) answer(cl, local *mochi.Client, batch []*pendingPub, buf []byte) []byte {
	s := p.s
	for _, e := range batch {
		if e.again || e.deny != nil || e.err != nil || e.stored != nil && e.stored.delivered {
			continue
		}
		pk := e.pk
		// The alias was resolved when the packet was read; aliases are the
		// connection's, not the delivery's.
		pk.Properties.TopicAliasFlag, pk.Properties.TopicAlias = false, 0
		if c := s.cluster.Load(); c != nil {
			pk = c.route(pk) // what the cluster hook does for a network client's publish
		}
		if !pk.FixedHeader.Retain && !hasSubscribers(s.broker, pk.TopicName) {
			// Nothing to retain and nobody here to deliver to (the cluster
			// routed it above): mochi's publish path would look the same
			// subscribers up and do nothing else. Measured with
			// BenchmarkPublishPipelined: about a sixth of a publish's CPU.
			atomic.AddInt64(&s.broker.Info.PacketsReceived, 1)
			atomic.AddInt64(&s.broker.Info.MessagesReceived, 1)
			continue
		}
		if err := s.broker.InjectPacket(local, pk); err != nil {
			s.log.Warn("durable publish not delivered", "client", cl.ID, "topic", pk.TopicName, "error", err)
		}
	}
	ok := false
	gone := false // disconnected for a stored, unconfirmed publish
	for _, e := range batch {
		switch {
		case gone && e.err == nil && e.deny == nil && !e.again:
			// Durable (and delivered), but its acknowledgement cannot be
			// written any more: remembered like a stored, unconfirmed one,
			// so the re-send is not appended twice (QoS 2: its PUBREC is in
			// pubrecs already).
			if e.pk.FixedHeader.Qos == 1 {
				p.rememberStored(cl.ID, e, true)
			}
		case gone:
			// Written into a closed connection: nothing to answer.
		case e.err != nil && s.storedUnconfirmed(e.err):
			buf = p.flush(cl, buf)
			p.rememberStored(cl.ID, e, false)
			_ = s.refuse(cl, e.pk, e.stream, e.err) // disconnects
			gone = true
		case e.again:
			buf = appendAck(buf, e.pk)
		case e.deny != nil:
			buf = p.flush(cl, buf)
			_ = writeRefusal(cl, e.pk, *e.deny)
		case e.err != nil:
			buf = p.flush(cl, buf)
			_ = s.refuse(cl, e.pk, e.stream, e.err)
		default:
			s.pubackLatency.Observe(time.Since(e.start).Seconds())
			s.accepted[min(e.pk.FixedHeader.Qos, 2)].Add(1)
			s.payloadBytes.Add(uint64(len(e.pk.Payload)))
			buf = appendAck(buf, e.pk)
			ok = true
		}
	}
	if ok {
		s.budget.ok(s)
	}
	return p.flush(cl, buf)
}

// rememberStored remembers e's record as stored and not acknowledged
// (stored.go); delivered: it was delivered to subscribers already.
func (p *pipeline) rememberStored(client string, e *pendingPub, delivered bool) {
	switch {
	case e.stored != nil:
		e.stored.delivered = e.stored.delivered || delivered
		p.s.stored.put(e.stored)
	case e.rec != nil:
		p.s.stored.remember(client, e.pk, e.rec, delivered)
	}
}

// appendAck appends the success PUBACK (QoS 1) or PUBREC (QoS 2) of pk:
// reason code 0 and no properties, which MQTT 5 lets the sender omit
// (3.4.2.1), so both versions read the same four bytes.
func appendAck(buf []byte, pk packets.Packet) []byte {
	typ := byte(packets.Puback << 4)
	if pk.FixedHeader.Qos == 2 {
		typ = packets.Pubrec << 4
	}
	return append(buf, typ, 2, byte(pk.PacketID>>8), byte(pk.PacketID))
}

// flush writes buf, whole packets, to cl's connection under the client's
// write lock (the lock mochi's WritePacket takes; packets mochi holds in
// its own buffer are whole too, so nothing interleaves inside a packet).
func (p *pipeline) flush(cl *mochi.Client, buf []byte) []byte {
	if len(buf) == 0 {
		return buf
	}
	cl.Lock()
	var err error
	if cl.Closed() || cl.Net.Conn == nil {
		err = mochi.ErrConnectionClosed
	} else {
		_, err = cl.Net.Conn.Write(buf)
	}
	cl.Unlock()
	if err != nil {
		p.s.log.Debug("acknowledgements not written", "client", cl.ID, "bytes", len(buf), "error", err)
	} else {
		atomic.AddInt64(&p.s.broker.Info.BytesSent, int64(len(buf)))
	}
	return buf[:0]
}

// wait waits for the workers to finish (Close, after the clients stopped).
func (p *pipeline) wait() {
	p.wmu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	p.wmu.Unlock()
	p.workers.Wait()
}
