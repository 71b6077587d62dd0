package subscription

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary"
)

// SubType is a subscription type; the numbers equal the protocol's
// CommandSubscribe.SubType.
type SubType int32

// Subscription types.
const (
	Exclusive SubType = 0
	Shared    SubType = 1
	Failover  SubType = 2
	KeyShared SubType = 3
)

// InitialPosition is where a subscription without a cursor starts; the
// numbers equal the protocol's CommandSubscribe.InitialPosition.
type InitialPosition int32

// Initial positions.
const (
	Latest   InitialPosition = 0
	Earliest InitialPosition = 1
)

// Entry is one message of one topic partition: its row.
type Entry struct {
	Offset int64
	Record *tributary.Record
}

// Source is one topic partition's committed rows. Read returns up to max
// entries from offset `from` on (none = nothing committed yet there); End is
// the next offset not yet committed; OffsetForTime is the first offset whose
// timestamp (publish time = tributary.Record.Timestamp, µs) is >= t, or End.
type Source interface {
	Read(ctx context.Context, from int64, max int) ([]Entry, error)
	End(ctx context.Context) (int64, error)
	OffsetForTime(ctx context.Context, t time.Time) (int64, error)
}

// Consumer is the server side of one consumer. Deliver must not block (the
// connection queues); ActiveChanged is sent to Failover/Exclusive consumers
// (CommandActiveConsumerChange).
type Consumer interface {
	Name() string
	Priority() int32
	Deliver(ds []Delivery)
	ActiveChanged(active bool)
}

// backlogged is implemented by a Consumer whose connection can fall
// behind: while Backlogged is true the dispatcher treats the consumer as
// one without permits (it receives nothing more, a Shared subscription's
// other consumers go on), and the consumer calls Subscription.Wake once
// its backlog has gone.
type backlogged interface{ Backlogged() bool }

// avail is the number of messages cs may be given now: its permits, or 0
// while its connection is backlogged.
func (cs *consumerState) avail() int64 {
	if cs.permits <= 0 {
		return 0
	}
	if b, ok := cs.c.(backlogged); ok && b.Backlogged() {
		return 0
	}
	return cs.permits
}

// Delivery is one entry handed to a consumer.
type Delivery struct {
	Entry
	RedeliveryCount uint32
}

// SubscribeOptions describe one CommandSubscribe.
type SubscribeOptions struct {
	Topic              string // full partition topic name, e.g. persistent://tributary/factory/telemetry-partition-0
	Subscription       string
	Type               SubType
	Durable            bool            // false for readers (non-durable): cursor kept in memory only
	Initial            InitialPosition // used when the subscription has no cursor yet
	StartOffset        *int64          // readers: start at this offset (inclusive) instead of Initial
	KeySharedAutoSplit bool            // Key_Shared: auto-split hash ranges (the default)

	ReplicateSubscriptionState, ReadCompacted bool // accepted, ignored
}

// Sentinel errors; the server maps them to ServerError codes.
var (
	// ErrConsumerBusy: an Exclusive subscription already has a consumer, the
	// subscription exists with another type, or an unsubscribe while other
	// consumers are connected (ServerError ConsumerBusy).
	ErrConsumerBusy = errors.New("pulsar: consumer busy")
	// ErrTooMany: a cap on subscriptions or consumers was reached
	// (ServerError TooManyRequests).
	ErrTooMany = errors.New("pulsar: too many")
	// ErrSubscriptionNotFound: no such subscription (ServerError SubscriptionNotFound).
	ErrSubscriptionNotFound = errors.New("pulsar: subscription not found")
	// ErrNotAllowed: e.g. a cumulative ack on a Shared or Key_Shared
	// subscription (ServerError NotAllowedError).
	ErrNotAllowed = errors.New("pulsar: not allowed")
	// ErrClosed: the manager or subscription is closed (ServerError ServiceNotReady).
	ErrClosed = errors.New("pulsar: closed")
)

// Subscriptions and their consumers.
//
// Invariants:
//   - An offset is in at most one of: acknowledged (the cursor), pending on
//     exactly one consumer (delivered, unacknowledged), or the replay set
//     (to be delivered again). Offsets below readPos that are in none of
//     them do not exist in the source (the table starts later).
//   - Every consumer's delivery order is the offset order of each pass; a
//     redelivered offset (the replay set) goes out before newer ones.
//   - Key_Shared: a slot (a key) is pending on at most one consumer at a
//     time (slotHolder), and a held-back entry blocks every later entry of
//     its slot, so a key's messages are never on two consumers at once and
//     never overtake each other across a consumer change. A consumer that
//     joins while messages are outstanding gets nothing at or above its
//     join point (the read position then) until everything below it is
//     acknowledged (the broker's "recently joined consumers" rule).
//   - Exclusive/Failover: only the active consumer receives messages; when
//     the active consumer changes, everything unacknowledged is rewound
//     (moved to the replay set) for the new one, as the broker's cursor
//     rewind does.
//   - All Consumer callbacks (Deliver, ActiveChanged) are made by the
//     subscription's dispatch goroutine, never under a lock, so a callback
//     may call back into the subscription and each consumer sees its
//     notifications in order; none reaches a consumer before its first
//     Flow (which a client sends only once SUBSCRIBE succeeded).
//
// Outline: Subscribe/Flow/Ack/Redeliver/Seek/Remove change the state under
// mu and wake the dispatch goroutine (dispatch.go), which reads the Source
// outside the lock and hands entries to consumers by the type's rule.
// Durable cursors are saved by the manager's flusher (at most every
// flushInterval per subscription), when a subscription's last consumer
// leaves, on Seek, and on Close.

// Manager owns every subscription of this server and the cursor store.
type Manager struct {
	store CursorStore
	log   *slog.Logger

	ctx    context.Context // cancelled by Close: stops dispatch loops
	cancel context.CancelFunc
	wg     sync.WaitGroup // dispatch loops and the flusher

	// caps bound what clients can make the manager hold (SetCaps).
	caps Caps
	// acksRefused counts individual acks refused for Caps.MaxAckedRanges;
	// ackLog rate-limits their line, unackedLog that of consumers
	// blocked at Caps.MaxUnackedPerConsumer (blocked counts those events).
	acksRefused, blocked atomic.Int64
	ackLog, unackedLog   atomic.Int64

	mu       sync.Mutex
	closed   bool
	subs     map[subKey]*Subscription
	dropping map[subKey]chan struct{} // closed once a dropped subscription's cursor is saved
}

type subKey struct{ topic, sub string }

// flushInterval is how often dirty durable cursors are saved.
const flushInterval = 100 * time.Millisecond

// NewManager returns a manager persisting durable cursors in store (nil: no
// durable subscriptions; they are kept in memory like readers). Close
// closes the store when it is an io.Closer.
// SetCaps sets the manager's caps (zero fields: the defaults); call it
// before use.
func (m *Manager) SetCaps(c Caps) { m.caps = c.withDefaults() }

func NewManager(store CursorStore, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{store: store, log: log, ctx: ctx, cancel: cancel, caps: Caps{}.withDefaults(),
		subs: map[subKey]*Subscription{}, dropping: map[subKey]chan struct{}{}}
	if store != nil {
		m.wg.Add(1)
		go m.flusher()
	}
	return m
}

// Subscription is one named subscription of one topic partition.
type Subscription struct {
	m         *Manager
	key       subKey
	partition int32 // -1: not a partition of a partitioned topic
	durable   bool
	src       Source
	wake      chan struct{}
	cancel    context.CancelFunc
	done      chan struct{} // closed when the dispatch loop returned
	saveMu    sync.Mutex    // serialises cursor saves and the delete

	mu         sync.Mutex
	typ        SubType
	closed     bool // dropped from the manager; no consumer may join
	deleted    bool // unsubscribed: never save again
	seq        uint64
	consumers  []*consumerState // join order
	byConsumer map[Consumer]*consumerState
	active     *consumerState // Exclusive/Failover
	rr         int            // Shared: next consumer index to try
	sel        autoSplit      // Key_Shared
	slotHolder map[int32]*slotHold

	cur          ackState
	dirty        bool                      // cursor changed since the last save
	readPos      int64                     // next offset never read yet
	knownEnd     int64                     // Source.End as last seen
	lastEnd      time.Time                 // when End was last asked
	owner        offsetMap[*consumerState] // pending offset → consumer
	replay       offsetMap[int32]          // offsets to (re)deliver → key slot
	held         offsetMap[Entry]          // entries of replay offsets already read (up to maxHeldBytes)
	heldBytes    int
	redeliveries offsetMap[uint32]
	epoch        uint64 // bumped by Seek: reads begun before it are dropped
	outbox       []note // callbacks for the dispatch goroutine
	idle         bool   // the loop found nothing to do and nothing woke it since (tests)
}

// consumerState is one consumer attached to a subscription.
// Consumers lists the subscription's consumers in join order.
func (s *Subscription) Consumers() []Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Consumer, len(s.consumers))
	for i, cs := range s.consumers {
		out[i] = cs.c
	}
	return out
}

type consumerState struct {
	c       Consumer
	seq     uint64
	permits int64
	pending offsetMap[int32] // unacknowledged offsets delivered to it → slot
	// flowed: the consumer has sent FLOW. Its ActiveChanged notifications
	// wait in deferred until then: a client registers a consumer only once
	// SUBSCRIBE succeeded, and sends FLOW after that, so a notification
	// made earlier could reach it before it knows the consumer.
	flowed   bool
	deferred []note
	// joinPoint (Key_Shared "recently joined consumers"): while >= 0 the
	// consumer receives only offsets below it; cleared once every offset
	// below it is acknowledged.
	joinPoint int64
}

type slotHold struct {
	cs *consumerState
	n  int
}

// note is a callback for the dispatch goroutine to make.
type note struct {
	c      Consumer
	active bool
	ds     []Delivery
}

// Subscribe adds consumer c to the subscription o names, creating it if
// needed (from its stored cursor when it is durable). c gets no callback
// before its first Flow.
func (m *Manager) Subscribe(ctx context.Context, src Source, o SubscribeOptions, c Consumer) (*Subscription, error) {
	key := subKey{o.Topic, o.Subscription}
	durable := o.Durable && m.store != nil
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		if ch := m.dropping[key]; ch != nil {
			m.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		s := m.subs[key]
		m.mu.Unlock()
		if s == nil {
			start, err := m.startCursor(ctx, src, o, durable)
			if err != nil {
				return nil, err
			}
			m.mu.Lock()
			if m.closed {
				m.mu.Unlock()
				return nil, ErrClosed
			}
			if s = m.subs[key]; s == nil && m.dropping[key] == nil {
				if m.caps.MaxSubscriptions > 0 && len(m.subs) >= m.caps.MaxSubscriptions {
					m.mu.Unlock()
					return nil, fmt.Errorf("%w: subscriptions (at most %d on this server)", ErrTooMany, m.caps.MaxSubscriptions)
				}
				s = m.newSubscription(key, src, o, durable, start)
				m.subs[key] = s
			}
			m.mu.Unlock()
			if s == nil {
				continue
			}
		}
		ok, err := s.add(c, o)
		if err != nil {
			return nil, err
		}
		if ok {
			return s, nil
		}
		// s was dropped meanwhile: start over.
	}
}

// startCursor returns a new subscription's cursor: stored, or where o says.
func (m *Manager) startCursor(ctx context.Context, src Source, o SubscribeOptions, durable bool) (ackState, error) {
	if durable {
		c, ok, err := m.store.Load(ctx, o.Topic, o.Subscription)
		if err != nil {
			return ackState{}, fmt.Errorf("load cursor %s %s: %w", o.Topic, o.Subscription, err)
		}
		if ok {
			return newAckState(c), nil
		}
	}
	switch {
	case o.StartOffset != nil:
		return ackState{markDelete: max(*o.StartOffset, 0) - 1}, nil
	case o.Initial == Earliest:
		return ackState{markDelete: -1}, nil
	default:
		end, err := src.End(ctx)
		if err != nil {
			return ackState{}, fmt.Errorf("subscribe %s %s: %w", o.Topic, o.Subscription, err)
		}
		return ackState{markDelete: end - 1}, nil
	}
}

func (m *Manager) newSubscription(key subKey, src Source, o SubscribeOptions, durable bool, cur ackState) *Subscription {
	ctx, cancel := context.WithCancel(m.ctx)
	cur.maxRanges = m.caps.MaxAckedRanges
	s := &Subscription{
		m: m, key: key, partition: partitionIndex(key.topic), durable: durable, src: src,
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}),
		typ: o.Type, byConsumer: map[Consumer]*consumerState{}, slotHolder: map[int32]*slotHold{},
		cur: cur, dirty: durable, readPos: cur.markDelete + 1,
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(s.done)
		s.run(ctx)
	}()
	return s
}

// partitionIndex is N of a "...-partition-N" topic, or -1.
func partitionIndex(topic string) int32 {
	i := strings.LastIndex(topic, "-partition-")
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(topic[i+len("-partition-"):], 10, 32)
	if err != nil || n < 0 {
		return -1
	}
	return int32(n)
}

// add attaches c; false when s was dropped meanwhile.
func (s *Subscription) add(c Consumer, o SubscribeOptions) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, nil
	}
	if _, dup := s.byConsumer[c]; dup {
		return true, nil
	}
	if len(s.consumers) > 0 {
		if s.typ != o.Type {
			return false, fmt.Errorf("%w: subscription %s is of another type", ErrConsumerBusy, s.key.sub)
		}
		if s.typ == Exclusive {
			return false, fmt.Errorf("%w: exclusive subscription %s has a consumer", ErrConsumerBusy, s.key.sub)
		}
	}
	s.typ = o.Type
	s.seq++
	cs := &consumerState{c: c, seq: s.seq, joinPoint: -1}
	s.consumers = append(s.consumers, cs)
	s.byConsumer[c] = cs
	switch s.typ {
	case Exclusive, Failover:
		s.pickActive(cs)
	case KeyShared:
		if len(s.consumers) > 1 && s.readPos > s.cur.markDelete+1 {
			cs.joinPoint = s.readPos
		}
		s.sel.add(cs)
	}
	s.poke()
	return true, nil
}

// pickActive chooses the Exclusive/Failover active consumer by the
// broker's rule: on a non-partitioned topic the earliest subscribed
// consumer; on a partition of a partitioned topic, among the consumers of
// the best (lowest) priority level sorted by name, the one at partition
// index modulo their count. On a change everything unacknowledged is
// rewound for the new active consumer. joined, when not nil, is told its
// state even if nothing changed.
func (s *Subscription) pickActive(joined *consumerState) {
	var next *consumerState
	switch {
	case len(s.consumers) == 0:
	case s.partition < 0:
		next = s.consumers[0] // join order
	default:
		order := append([]*consumerState(nil), s.consumers...)
		sort.SliceStable(order, func(i, j int) bool {
			a, b := order[i], order[j]
			if pa, pb := a.c.Priority(), b.c.Priority(); pa != pb {
				return pa < pb
			}
			return a.c.Name() < b.c.Name()
		})
		best := 1
		for best < len(order) && order[best].c.Priority() == order[0].c.Priority() {
			best++
		}
		next = order[int(s.partition)%best]
	}
	prev := s.active
	s.active = next
	if prev != next {
		s.rewind()
		if prev != nil && s.byConsumer[prev.c] == prev {
			s.notify(prev, false)
		}
		if next != nil {
			s.notify(next, true)
		}
	}
	if joined != nil && joined != next && joined != prev {
		s.notify(joined, false)
	}
}

// notify queues ActiveChanged for Failover consumers (the broker sends
// ACTIVE_CONSUMER_CHANGE only to those).
func (s *Subscription) notify(cs *consumerState, active bool) {
	if s.typ != Failover {
		return
	}
	n := note{c: cs.c, active: active}
	if !cs.flowed {
		cs.deferred = append(cs.deferred, n)
		return
	}
	s.outbox = append(s.outbox, n)
}

// rewind moves every pending offset of every consumer to the replay set.
func (s *Subscription) rewind() {
	for _, cs := range s.consumers {
		s.requeue(cs, nil)
	}
}

// requeue moves cs's pending offsets (all of them when offs is nil) to the
// replay set, counting a redelivery for each. The moved offsets are merged
// into the replay set in one pass: they are usually below offsets already
// there, and a client's list may be long and in any order.
func (s *Subscription) requeue(cs *consumerState, offs []int64) {
	var moved []int64
	var slots []int32
	if offs == nil {
		moved = make([]int64, 0, cs.pending.Len())
		slots = make([]int32, 0, cs.pending.Len())
		for off, slot := range cs.pending.All() {
			moved = append(moved, off)
			slots = append(slots, slot)
		}
		cs.pending.Clear()
	} else {
		offs = slices.Compact(slices.Sorted(slices.Values(offs)))
		for _, off := range offs {
			if slot, ok := cs.pending.Delete(off); ok {
				moved = append(moved, off)
				slots = append(slots, slot)
			}
		}
	}
	for i, off := range moved {
		s.owner.Delete(off)
		s.release(cs, slots[i])
	}
	s.replay.Update(moved, func(i int, _ int32, _ bool) int32 { return slots[i] })
	s.redeliveries.Update(moved, func(_ int, n uint32, _ bool) uint32 { return n + 1 })
}

// release drops one pending message of slot from cs's Key_Shared hold.
func (s *Subscription) release(cs *consumerState, slot int32) {
	if s.typ != KeyShared {
		return
	}
	if h := s.slotHolder[slot]; h != nil && h.cs == cs {
		if h.n--; h.n <= 0 {
			delete(s.slotHolder, slot)
		}
	}
}

// poke wakes the dispatch goroutine.
func (s *Subscription) poke() {
	s.idle = false
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Wake makes the dispatcher look again at once (a consumer's backlog has
// gone).
func (s *Subscription) Wake() {
	s.mu.Lock()
	s.poke()
	s.mu.Unlock()
}

// Flow grants c permits more messages.
func (s *Subscription) Flow(c Consumer, permits uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.byConsumer[c]
	if cs == nil {
		return
	}
	if !cs.flowed {
		cs.flowed = true
		s.outbox = append(s.outbox, cs.deferred...)
		cs.deferred = nil
		s.poke()
	}
	if permits > 0 {
		cs.permits += int64(permits)
		s.poke()
	}
}

// Ack acknowledges offsets individually, or everything up to offsets[0]
// when cumulative. Acks from any consumer of the subscription count. A
// cumulative ack on a Shared or Key_Shared subscription is refused with
// ErrNotAllowed and changes nothing (the broker logs and ignores it).
// Individual acks that would open a range beyond Caps.MaxAckedRanges are
// refused (ErrTooMany, the others of the same ACK taken).
func (s *Subscription) Ack(ctx context.Context, c Consumer, offsets []int64, cumulative bool) (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unackedBlocked() {
		defer s.poke() // the acks may unblock it
	}
	if cumulative {
		if s.typ == Shared || s.typ == KeyShared {
			return fmt.Errorf("%w: cumulative ack on a %s subscription", ErrNotAllowed, s.typ)
		}
		if len(offsets) == 0 {
			return nil
		}
		up := offsets[0]
		if !s.cur.ackUpTo(up) {
			return nil
		}
		// Collected first: forget and dropReplay change the maps.
		var offs []int64
		for off := range s.owner.All() {
			if off > up {
				break
			}
			offs = append(offs, off)
		}
		for _, off := range offs {
			cs, _ := s.owner.Get(off)
			s.forget(cs, off)
		}
		offs = offs[:0]
		for off := range s.replay.All() {
			if off > up {
				break
			}
			offs = append(offs, off)
		}
		for _, off := range offs {
			s.dropReplay(off)
		}
	} else {
		changed := false
		refused := 0
		// In offset order: acks that arrive grouped (clients flush a set
		// of them at once, in any order) then extend the acknowledged
		// prefix or the last range instead of splicing ranges.
		if !slices.IsSorted(offsets) {
			offsets = slices.Sorted(slices.Values(offsets))
		}
		for _, off := range offsets {
			if off >= 0 && len(s.cur.ranges) >= s.m.caps.MaxAckedRanges && !s.cur.acked(off) && s.cur.opensRange(off) {
				refused++
				continue
			}
			if !s.cur.ack(off) {
				continue
			}
			changed = true
			if cs, ok := s.owner.Get(off); ok {
				s.forget(cs, off)
			}
			s.dropReplay(off)
		}
		if refused > 0 {
			err = s.m.refusedAcks(s.key, refused)
		}
		if !changed {
			return err
		}
	}
	s.dirty = true
	if s.typ == KeyShared {
		for _, cs := range s.consumers {
			if cs.joinPoint >= 0 && s.cur.markDelete+1 >= cs.joinPoint {
				cs.joinPoint = -1
			}
		}
		s.poke()
	}
	return err
}

// forget drops an acknowledged pending offset.
func (s *Subscription) forget(cs *consumerState, off int64) {
	slot, _ := cs.pending.Delete(off)
	s.owner.Delete(off)
	s.redeliveries.Delete(off)
	s.release(cs, slot)
}

func (s *Subscription) dropReplay(off int64) {
	s.replay.Delete(off)
	s.unhold(off)
	s.redeliveries.Delete(off)
}

// maxHeldBytes bounds the payload bytes of entries cached for the replay
// set; beyond it only their offsets are kept and they are read again.
const maxHeldBytes = 32 << 20

// hold caches e for the replay set if the budget allows.
func (s *Subscription) hold(e Entry) {
	if s.held.Has(e.Offset) {
		return
	}
	n := entrySize(e)
	if s.heldBytes+n > maxHeldBytes {
		return
	}
	s.held.Put(e.Offset, e)
	s.heldBytes += n
}

func (s *Subscription) unhold(off int64) {
	if e, ok := s.held.Delete(off); ok {
		s.heldBytes -= entrySize(e)
	}
}

func entrySize(e Entry) int {
	if e.Record == nil {
		return 0
	}
	return len(e.Record.Value) + len(e.Record.Key) + 64
}

// Redeliver gives c's unacked offsets back for redelivery; nil/empty = all
// of c's unacked messages. On Exclusive/Failover subscriptions it always
// rewinds everything unacknowledged, as the broker does, so that order is
// kept.
func (s *Subscription) Redeliver(c Consumer, offsets []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.byConsumer[c]
	if cs == nil {
		return
	}
	if s.typ == Exclusive || s.typ == Failover {
		s.rewind()
	} else {
		if len(offsets) == 0 {
			offsets = nil
		}
		s.requeue(cs, offsets)
	}
	s.poke()
}

// Seek resets the cursor to offset (everything below it counts as
// acknowledged, nothing above it does); the consumers get everything from
// offset on, in order, including what they had been delivered. The
// durable cursor is saved before Seek returns. (The broker also
// disconnects the consumers so that clients drop their queues; that is the
// server's part.)
func (s *Subscription) Seek(ctx context.Context, offset int64) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	offset = max(offset, 0)
	s.epoch++
	s.cur = ackState{markDelete: offset - 1, maxRanges: s.m.caps.MaxAckedRanges}
	s.readPos = offset
	s.owner.Clear()
	s.replay.Clear()
	s.held.Clear()
	s.heldBytes = 0
	s.redeliveries.Clear()
	clear(s.slotHolder)
	for _, cs := range s.consumers {
		cs.pending.Clear()
		cs.joinPoint = -1
	}
	s.dirty = s.durable
	s.poke()
	s.mu.Unlock()
	return s.save(ctx)
}

// SeekTime resets the cursor to the first offset published at or after t.
func (s *Subscription) SeekTime(ctx context.Context, t time.Time) error {
	off, err := s.src.OffsetForTime(ctx, t)
	if err != nil {
		return fmt.Errorf("seek %s %s to %s: %w", s.key.topic, s.key.sub, t.Format(time.RFC3339Nano), err)
	}
	return s.Seek(ctx, off)
}

// Remove detaches c (CLOSE_CONSUMER or disconnect): its unacked messages go
// to the other consumers. When the last consumer leaves, the subscription
// is dropped from memory; a durable one saves its cursor first, and a new
// Subscribe of it waits for that.
func (s *Subscription) Remove(c Consumer) {
	s.mu.Lock()
	cs := s.byConsumer[c]
	if cs == nil {
		s.mu.Unlock()
		return
	}
	s.requeue(cs, nil)
	delete(s.byConsumer, c)
	for i, o := range s.consumers {
		if o == cs {
			s.consumers = append(s.consumers[:i], s.consumers[i+1:]...)
			break
		}
	}
	switch s.typ {
	case Exclusive, Failover:
		if s.active == cs {
			s.pickActive(nil)
		}
	case KeyShared:
		s.sel.remove(cs)
	}
	empty := len(s.consumers) == 0
	s.poke()
	s.mu.Unlock()
	if empty {
		s.m.drop(s)
	}
}

// drop removes s from the manager if it still has no consumer, stops it and
// saves its cursor.
func (m *Manager) drop(s *Subscription) {
	m.mu.Lock()
	s.mu.Lock()
	if s.closed || len(s.consumers) > 0 || m.subs[s.key] != s {
		s.mu.Unlock()
		m.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	delete(m.subs, s.key)
	ch := make(chan struct{})
	m.dropping[s.key] = ch
	m.mu.Unlock()

	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := s.save(ctx); err != nil {
		m.log.Warn("pulsar: save cursor", "topic", s.key.topic, "subscription", s.key.sub, "err", err)
	}
	cancel()
	m.mu.Lock()
	delete(m.dropping, s.key)
	close(ch)
	m.mu.Unlock()
}

// stop ends the dispatch loop and waits for it.
func (s *Subscription) stop() {
	s.cancel()
	<-s.done
}

// save writes the cursor if it changed since the last save.
func (s *Subscription) save(ctx context.Context) error {
	if !s.durable {
		return nil
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	if s.deleted || !s.dirty {
		s.mu.Unlock()
		return nil
	}
	c := s.cur.cursor()
	s.dirty = false
	s.mu.Unlock()
	if err := s.m.store.Save(ctx, s.key.topic, s.key.sub, c); err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		return fmt.Errorf("save cursor %s %s: %w", s.key.topic, s.key.sub, err)
	}
	return nil
}

// Unsubscribe deletes the subscription and its durable cursor. It is
// refused with ErrConsumerBusy while more than one consumer is attached
// (the broker's rule: only the last consumer may unsubscribe); that one is
// detached. ErrSubscriptionNotFound when there is no such subscription.
func (m *Manager) Unsubscribe(ctx context.Context, topic, sub string) error {
	key := subKey{topic, sub}
	m.mu.Lock()
	for m.dropping[key] != nil && !m.closed { // a last-consumer save must not outlive the delete
		ch := m.dropping[key]
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
	}
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	s := m.subs[key]
	var ch chan struct{}
	if s != nil {
		s.mu.Lock()
		if len(s.consumers) > 1 {
			s.mu.Unlock()
			m.mu.Unlock()
			return fmt.Errorf("%w: unsubscribe %s: other consumers are connected", ErrConsumerBusy, sub)
		}
		s.closed, s.deleted = true, true
		s.consumers, s.active = nil, nil
		clear(s.byConsumer)
		s.mu.Unlock()
		delete(m.subs, key)
		ch = make(chan struct{})
		m.dropping[key] = ch
	}
	m.mu.Unlock()
	var err error
	if s != nil {
		s.stop()
		if s.durable {
			s.saveMu.Lock()
			err = m.store.Delete(ctx, topic, sub)
			s.saveMu.Unlock()
		}
		m.mu.Lock()
		delete(m.dropping, key)
		close(ch)
		m.mu.Unlock()
	} else if m.store != nil {
		var ok bool
		if _, ok, err = m.store.Load(ctx, topic, sub); err == nil {
			if !ok {
				return fmt.Errorf("%w: %s %s", ErrSubscriptionNotFound, topic, sub)
			}
			err = m.store.Delete(ctx, topic, sub)
		}
	} else {
		return fmt.Errorf("%w: %s %s", ErrSubscriptionNotFound, topic, sub)
	}
	if err != nil {
		return fmt.Errorf("unsubscribe %s %s: %w", topic, sub, err)
	}
	return nil
}

// flusher saves dirty durable cursors every flushInterval.
func (m *Manager) flusher() {
	defer m.wg.Done()
	t := time.NewTicker(flushInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		var dirty []*Subscription
		for _, s := range m.subs {
			if s.durable {
				dirty = append(dirty, s)
			}
		}
		m.mu.Unlock()
		for _, s := range dirty {
			if err := s.save(m.ctx); err != nil && m.ctx.Err() == nil {
				m.log.Warn("pulsar: save cursor", "topic", s.key.topic, "subscription", s.key.sub, "err", err)
			}
		}
	}
}

// Close stops every subscription, saves the durable cursors and closes the
// store when it is an io.Closer.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	subs := make([]*Subscription, 0, len(m.subs))
	for _, s := range m.subs {
		subs = append(subs, s)
	}
	var dropping []chan struct{}
	for _, ch := range m.dropping {
		dropping = append(dropping, ch)
	}
	m.mu.Unlock()
	for _, ch := range dropping { // last-consumer saves under way
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	m.cancel()
	m.wg.Wait() // dispatch loops, flusher and nothing else
	var errs []error
	for _, s := range subs {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		errs = append(errs, s.save(ctx))
	}
	if c, ok := m.store.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (t SubType) String() string {
	switch t {
	case Exclusive:
		return "Exclusive"
	case Shared:
		return "Shared"
	case Failover:
		return "Failover"
	case KeyShared:
		return "Key_Shared"
	}
	return "SubType(" + strconv.Itoa(int(t)) + ")"
}
