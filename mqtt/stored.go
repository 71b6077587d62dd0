package mqtt

import (
	"container/list"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary"
)

// storedPubs remembers the QoS 1/2 publishes that were stored but not
// acknowledged, so that the client's re-send of one is acknowledged
// without being appended a second time.
//
// # Invariants
//
//  1. A publish whose append failed after storing it (ErrAfterAppend) is
//     refused without completing its QoS flow: no negative PUBACK/PUBREC,
//     a DISCONNECT (MQTT 5: codeStoredUnconfirmed) or a closed connection
//     (3.1.1), so the client keeps it in its session and re-sends the same
//     packet id with DUP=1 when it resumes the session.
//  2. Keyed by (client id, packet id). The re-send matches only with DUP
//     set and the same topic and payload (a hash); it is then confirmed
//     (tributary.Appender.Confirm), not appended, and acknowledged as the
//     original would have been. One that still is not confirmed is refused
//     again the same way and stays remembered.
//  3. A clean start, or a session that ends, forgets the client's entries:
//     its next publish of that packet id is a new message (a re-send
//     after a clean start is stored again: a duplicate, docs/cluster.md says so).
//  4. Answered on another connection: a QoS 1 publish the pipeline
//     acknowledges on a later connection of its session than the one it
//     was read on (pending when the session resumed), or could not
//     acknowledge (behind a withheld one), is remembered too (delivered),
//     so a re-send the client made before it got the PUBACK is answered,
//     not appended. Such publishes may be acknowledged — and delivered —
//     before the withheld one, whose re-send waits for its confirmation;
//     their table order is their append order.
//  5. Bounded: at most maxStored entries, each for at most storedTTL;
//     older ones are evicted (counted in Stats.StoredEvicted), and a
//     re-send after that is stored again.
type storedPubs struct {
	mu      sync.Mutex
	clients map[string]map[uint16]*list.Element
	age     *list.List   // of *storedPub, oldest first
	n       atomic.Int64 // age.Len(), read without mu: take's fast path
	max     int
	ttl     time.Duration
	evicted atomic.Uint64
}

// storedPub is one stored, unacknowledged publish.
type storedPub struct {
	client    string
	id        uint16
	topic     string
	sum       uint64 // fnv-1a of the payload
	rec       tributary.Record
	at        time.Time
	delivered bool // delivered to subscribers already (acknowledgement lost)
}

// Bounds of the stored, unacknowledged publishes a node remembers.
const (
	maxStored = 1 << 16
	storedTTL = time.Hour
)

func newStoredPubs(max int, ttl time.Duration) *storedPubs {
	return &storedPubs{clients: map[string]map[uint16]*list.Element{}, age: list.New(), max: max, ttl: ttl}
}

func payloadSum(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// remember records pk of client as stored in rec (only its position is kept).
func (s *storedPubs) remember(client string, pk packets.Packet, rec *tributary.Record, delivered bool) {
	e := &storedPub{client: client, id: pk.PacketID, topic: pk.TopicName, sum: payloadSum(pk.Payload),
		rec: tributary.Record{Stream: rec.Stream, Partition: rec.Partition, Offset: rec.Offset, Epoch: rec.Epoch,
			Topic: rec.Topic, ClientID: rec.ClientID, Node: rec.Node},
		at: time.Now(), delivered: delivered}
	s.put(e)
}

// put (re)inserts e as the newest entry.
func (s *storedPubs) put(e *storedPub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.clients[e.client]
	if ids == nil {
		ids = map[uint16]*list.Element{}
		s.clients[e.client] = ids
	}
	if old := ids[e.id]; old != nil {
		s.age.Remove(old)
	}
	ids[e.id] = s.age.PushBack(e)
	s.evict(time.Now())
	s.n.Store(int64(s.age.Len()))
}

// evict drops the entries beyond max and those older than ttl (s.mu held).
func (s *storedPubs) evict(now time.Time) {
	for f := s.age.Front(); f != nil; f = s.age.Front() {
		e := f.Value.(*storedPub)
		if s.age.Len() <= s.max && now.Sub(e.at) < s.ttl {
			return
		}
		s.remove(f)
		s.evicted.Add(1)
	}
}

// remove drops f (s.mu held).
func (s *storedPubs) remove(f *list.Element) {
	e := s.age.Remove(f).(*storedPub)
	ids := s.clients[e.client]
	delete(ids, e.id)
	if len(ids) == 0 {
		delete(s.clients, e.client)
	}
	s.n.Store(int64(s.age.Len()))
}

// take returns and forgets the entry pk re-sends, if pk is its re-send
// (DUP, same topic and payload). Another publish of the packet id is a
// new message: the entry is forgotten.
func (s *storedPubs) take(client string, pk packets.Packet) *storedPub {
	if s.n.Load() == 0 {
		return nil // the common case: no lock on every publish
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evict(time.Now())
	f := s.clients[client][pk.PacketID]
	if f == nil {
		return nil
	}
	e := f.Value.(*storedPub)
	s.remove(f)
	if !pk.FixedHeader.Dup || e.topic != pk.TopicName || e.sum != payloadSum(pk.Payload) {
		return nil
	}
	return e
}

// forget drops client's entries (a clean start, the session's end).
func (s *storedPubs) forget(client string) {
	if s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.clients[client] {
		s.age.Remove(f)
	}
	delete(s.clients, client)
	s.n.Store(int64(s.age.Len()))
}

func (s *storedPubs) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.age.Len()
}

// storedUnconfirmed reports whether cause is an append that stored the
// record (ErrAfterAppend), which the appender can confirm later.
func (s *Server) storedUnconfirmed(cause error) bool {
	return errors.Is(cause, tributary.ErrAfterAppend)
}

// confirm waits for the stored record e to be confirmed; the error wraps
// tributary.ErrAfterAppend (the record stays stored either way).
func (s *Server) confirm(e *storedPub) error {
	err := s.app.Confirm(s.ctx, &e.rec)
	if err != nil && !errors.Is(err, tributary.ErrAfterAppend) {
		err = fmt.Errorf("%w: %w", tributary.ErrAfterAppend, err)
	}
	return err
}
