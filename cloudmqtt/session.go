package cloudmqtt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/cloudmqtt/wire"
	"github.com/tributary-io/tributary/tables"
)

// errSessionOwner refuses a client id whose stored session belongs to
// another principal.
var errSessionOwner = errors.New("the client id's session belongs to another principal")

// session is a connected client's subscriptions and delivery state.
//
// Invariants:
//   - Per partition of a subscription, rows are sent in offset order, and
//     a cursor's durable position (the lowest offset sent at QoS 1 and not
//     acknowledged, else the next offset to read) only moves forward; it is
//     what the store keeps, so a resumed session receives again only rows
//     that were not acknowledged.
//   - At most inflightMax QoS 1 messages are unacknowledged at a time
//     (Receive Maximum); an inflight entry is a few words (no payload), so
//     a client that never acknowledges holds no rows.
type session struct {
	s       *Server
	conn    *conn
	id      string
	p       auth.Principal
	expiry  time.Duration // 0: not persistent
	maxIn   int
	wake    chan struct{} // cap 1
	done    chan struct{} // closed by finish
	finOnce sync.Once
	// loaded: load succeeded, so finish may write the session back (a
	// refused or failed CONNECT never writes over a stored session);
	// present: a stored session was resumed.
	loaded, present bool
	// dropped: the stored subscription filters load refused under the
	// rules in force (told in the CONNACK to MQTT 5 clients).
	dropped []string

	mu       sync.Mutex
	subs     []*sub
	inflight map[uint16]inflight
	nextPID  uint16
	// waitSince: since when a partly free window waits to be refilled;
	// deferred: the pump should look again after refillDelay.
	waitSince time.Time
	deferred  bool
	watching  map[string]int // streams registered with the watcher, by count
}

// sub is one subscription.
type sub struct {
	filter string // as subscribed: the key
	t      wire.Target
	qos    byte // granted: 0 or 1
	subID  int
	start  wire.Start
	parts  map[int32]*cursor
	// latest: the newest row of each matching topic (stream-latest=true),
	// sent first with the retain flag, outside the cursors.
	latest []*tributary.Record
}

// cursor is a subscription's position in one partition.
type cursor struct {
	next    int64   // next offset to read
	unacked []int64 // offsets sent at QoS 1, not acknowledged, ascending
	saved   int64   // durable position last given to the store (-1: none)
	limit   int64   // shared subscription: the end (exclusive) of the claimed chunk; 0 = none
}

func (c *cursor) durable() int64 {
	if len(c.unacked) > 0 {
		return c.unacked[0]
	}
	return c.next
}

type inflight struct {
	sub    *sub
	part   int32
	off    int64
	latest bool // a stream-latest row: its ack moves no cursor
}

func newSession(s *Server, c *conn, id string, p auth.Principal, expiry time.Duration) *session {
	se := &session{s: s, conn: c, id: id, p: p, expiry: expiry, maxIn: s.cfg.MaxInflight,
		wake: make(chan struct{}, 1), done: make(chan struct{}), inflight: map[uint16]inflight{}, watching: map[string]int{}}
	c.sess = se
	return se
}

func (se *session) persistent() bool { return se.expiry > 0 }

func (se *session) setExpiry(d time.Duration) {
	se.mu.Lock()
	se.expiry = d
	se.mu.Unlock()
}

func (se *session) kick() {
	select {
	case se.wake <- struct{}{}:
	default:
	}
}

// take makes se the holder of its client id on this server and returns
// the session it takes over (nil: none connected here) — unless the id's
// session, stored or connected here, belongs to another principal
// (errSessionOwner). It is checked before anything is ended or deleted,
// so a client that may use an id but is not its session's owner can
// neither disconnect the owner nor delete its session with Clean Start.
// The local check and the registration are one step under s.mu, so two
// principals racing for an id on one server cannot both pass.
func (s *Server) take(se *session) (*session, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	owner, err := s.store.Owner(ctx, se.id)
	if err != nil {
		return nil, err
	}
	if owner != "" && owner != se.p.String() {
		return nil, errSessionOwner
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.sessions[se.id]
	if old != nil && old.p.String() != se.p.String() {
		return nil, errSessionOwner
	}
	s.sessions[se.id] = se
	return old, nil
}

// load starts the session (the caller has taken its id, see take): clean
// drops a stored one; otherwise a stored session of the same principal
// is resumed (se.present).
func (se *session) load(clean bool) error {
	ctx, cancel := context.WithTimeout(se.s.ctx, 30*time.Second)
	defer cancel()
	st := se.s.store
	if clean {
		if err := st.Delete(ctx, se.id); err != nil {
			return err
		}
	} else {
		ss, pos, err := st.Load(ctx, se.id)
		if err != nil {
			return err
		}
		if ss != nil {
			if ss.Principal != se.p.String() {
				return errSessionOwner
			}
			se.present = true
			for _, x := range ss.Subs {
				t, err := wire.ParseFilter(x.Filter)
				if err != nil {
					continue // a filter this version refuses: dropped
				}
				// A plain filter's streams are those it had positions in.
				streams := []string{t.Stream}
				if t.Stream == "" {
					streams = streams[:0]
					for st := range pos[x.Filter] {
						streams = append(streams, st)
					}
					sort.Strings(streams)
				}
				if len(streams) == 0 {
					continue
				}
				// Authorised again, as a new SUBSCRIBE would be: the rules
				// may have changed since it was granted.
				kept := se.reauthorize(x.Filter, t, streams)
				if len(kept) == 0 {
					se.dropped = append(se.dropped, x.Filter)
					if err := st.DropFilter(ctx, se.id, x.Filter); err != nil {
						return err
					}
					continue
				}
				for _, name := range streams {
					if !slices.Contains(kept, name) {
						if err := st.DropStream(ctx, se.id, x.Filter, name); err != nil {
							return err
						}
					}
				}
				streams = kept
				for _, st := range streams {
					tt := t
					tt.Stream = st
					su := &sub{filter: x.Filter, t: tt, qos: x.QoS, subID: x.SubID, parts: map[int32]*cursor{}}
					for p, n := range pos[x.Filter][st] {
						su.parts[p] = &cursor{next: n, saved: n}
					}
					se.subs = append(se.subs, su)
					se.watchLocked(st, 1)
				}
			}
		}
	}
	if se.persistent() {
		if err := st.Save(ctx, se.id, se.row()); err != nil {
			return err
		}
	} else if !clean {
		// Not kept after this connection: forget the stored one now.
		if err := st.Delete(ctx, se.id); err != nil {
			return err
		}
	}
	se.loaded = true
	return nil
}

// reauthorize is what is left of a stored subscription's streams under
// the rules in force: none when its filter is refused. Each refusal is
// audited, logged and counted.
func (se *session) reauthorize(filter string, t wire.Target, streams []string) []string {
	a := se.s.cfg.Auth
	if a == nil {
		return streams
	}
	rq := auth.Request{Client: auth.Client{Protocol: "mqtt", Remote: se.conn.remote}, Principal: se.p,
		Action: auth.Subscribe, ClientID: se.id, Topic: t.Filter, Stream: t.Stream, Group: t.Share}
	var kept []string
	if a.Authorize(rq) == nil {
		for _, st := range streams {
			rq.Stream = st
			if t.Stream != "" || a.Allowed(rq) {
				kept = append(kept, st)
			}
		}
	}
	if len(kept) < len(streams) {
		se.s.m.resumeDropped.Inc()
		se.s.log.Info("cloud mqtt: stored subscription no longer authorized, dropped from the resumed session",
			"client", se.id, "principal", se.p.String(), "filter", filter, "streams", len(streams)-len(kept))
	}
	return kept
}

// row is the session's stored row (caller holds mu or owns se).
func (se *session) row() storedSession {
	ss := storedSession{Principal: se.p.String(), Expiry: int64(se.expiry / time.Second), Seen: time.Now().UnixMilli()}
	seen := map[string]bool{}
	for _, su := range se.subs {
		if !seen[su.filter] {
			seen[su.filter] = true
			ss.Subs = append(ss.Subs, storedSub{Filter: su.filter, QoS: su.qos, SubID: su.subID})
		}
	}
	return ss
}

// finish ends the session on this server: its positions are written and
// its row says when it was last seen, or it is deleted when it does not
// outlive the connection.
func (se *session) finish() {
	se.finOnce.Do(func() {
		defer close(se.done)
		se.mu.Lock()
		for st, n := range se.watching {
			for range n {
				se.s.watch.remove(st, se.wake)
			}
		}
		se.watching = map[string]int{}
		persistent, row := se.persistent() && se.loaded, se.row()
		subs := slices.Clone(se.subs)
		se.mu.Unlock()
		se.releaseShares(subs)
		s := se.s
		// The id stays held until the row is written, so that a new
		// connection of the id waits for done instead of racing the write.
		defer func() {
			s.mu.Lock()
			if s.sessions[se.id] == se {
				delete(s.sessions, se.id)
			}
			s.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if !persistent {
			return
		}
		if err := s.store.Flush(ctx); err != nil {
			s.log.Warn("cloud mqtt: write session positions", "client", se.id, "err", err)
		}
		if err := s.store.Save(ctx, se.id, row); err != nil {
			s.log.Warn("cloud mqtt: save session", "client", se.id, "err", err)
		}
	})
}

func (se *session) watchLocked(stream string, d int) {
	if stream == "" {
		return
	}
	if d > 0 {
		se.s.watch.add(stream, se.wake)
		se.watching[stream]++
		return
	}
	if se.watching[stream] > 0 {
		se.watching[stream]--
		if se.watching[stream] == 0 {
			delete(se.watching, stream)
			se.s.watch.remove(stream, se.wake)
		}
	}
}

// subscribe answers SUBSCRIBE: each filter is parsed, authorized and
// given its start position (persisted for a persistent session) before
// SUBACK is sent.
func (se *session) subscribe(pk packets.Packet) error {
	c := se.conn
	s := se.s
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	var start wire.Start
	var startErr error
	haveStart, latest := false, false
	for _, u := range pk.Properties.User {
		switch u.Key {
		case "stream-offset":
			start, startErr = wire.ParseStart(u.Val)
			haveStart = true
		case "stream-latest":
			latest = u.Val == "true"
		}
	}
	subID := 0
	if len(pk.Properties.SubscriptionIdentifier) > 0 {
		subID = pk.Properties.SubscriptionIdentifier[0]
	}
	codes := make([]byte, len(pk.Filters))
	var why []string
	for i, f := range pk.Filters {
		code, reason := se.subscribeOne(ctx, f, start, haveStart, startErr, subID, latest)
		codes[i] = code
		if code >= 0x80 {
			s.m.subsRefused.Inc()
			why = append(why, fmt.Sprintf("%s: %s", f.Filter, reason))
			s.log.Info("cloud mqtt subscription refused", "client", se.id, "filter", f.Filter, "code", code, "reason", reason)
		}
	}
	if se.persistent() {
		se.mu.Lock()
		row := se.row()
		se.mu.Unlock()
		if err := s.store.Save(ctx, se.id, row); err != nil {
			s.log.Warn("cloud mqtt: save session", "client", se.id, "err", err)
			for i := range codes {
				if codes[i] < 0x80 {
					codes[i] = codeImplementation
				}
			}
		}
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ProtocolVersion: c.version,
		PacketID: pk.PacketID, ReasonCodes: codes}
	if c.version < 5 {
		for i := range ack.ReasonCodes {
			if ack.ReasonCodes[i] >= 0x80 {
				ack.ReasonCodes[i] = 0x80
			}
		}
	} else if len(why) > 0 {
		r := why[0]
		if len(why) > 1 {
			r += fmt.Sprintf(" (and %d more)", len(why)-1)
		}
		ack.Properties.ReasonString = r
	}
	if err := c.write(&ack); err != nil {
		return err
	}
	se.kick()
	return nil
}

// subscribeOne adds (or replaces) one subscription filter — one sub per
// stream it addresses; it returns the SUBACK reason code and, for a
// refusal, why.
func (se *session) subscribeOne(ctx context.Context, f packets.Subscription, start wire.Start, haveStart bool, startErr error, subID int, latest bool) (byte, string) {
	s := se.s
	full := f.Filter
	t, err := wire.ParseFilter(full)
	if err != nil {
		return codeFilterInvalid, err.Error()
	}
	if startErr != nil {
		return codeImplementation, startErr.Error()
	}
	a := s.cfg.Auth
	rq := auth.Request{Client: auth.Client{Protocol: "mqtt", Remote: se.conn.remote}, Principal: se.p,
		Action: auth.Subscribe, ClientID: se.id, Topic: t.Filter, Stream: t.Stream, Group: t.Share}
	if a != nil && a.Authorize(rq) != nil {
		return codeNotAuthorized, "not authorized"
	}
	streams := []string{t.Stream}
	if t.Stream == "" {
		// A plain topic filter: the streams the edge nodes route matching
		// topics to, those of them the principal may read.
		all, err := s.resolve(ctx, t.Filter)
		if err != nil {
			return codeImplementation, "resolve routes: " + err.Error()
		}
		streams = streams[:0]
		for _, st := range all {
			rq.Stream = st
			if a == nil || a.Allowed(rq) {
				streams = append(streams, st)
			}
		}
		if len(streams) == 0 {
			return codeFilterInvalid, "no stream the edge nodes route topics matching " + t.Filter + " to (or none you may read)"
		}
	}
	se.mu.Lock()
	var olds []*sub
	for _, su := range se.subs {
		if su.filter == full {
			olds = append(olds, su)
		}
	}
	if len(olds) == 0 && se.filtersLocked() >= s.cfg.MaxSubscriptions {
		se.mu.Unlock()
		return codeQuotaExceeded, fmt.Sprintf("at most %d subscriptions per session", s.cfg.MaxSubscriptions)
	}
	se.mu.Unlock()
	qos := min(f.Qos, 1)
	// A re-subscription without stream-offset keeps its positions.
	if len(olds) > 0 && !haveStart {
		for _, old := range olds {
			var newest []*tributary.Record
			if latest {
				parts, err := s.r.Partitions(ctx, old.t.Stream)
				if err == nil {
					newest, err = latestPerTopic(ctx, s.r, old.t, parts)
				}
				if err != nil {
					return codeImplementation, "read stream: " + err.Error()
				}
			}
			se.mu.Lock()
			old.qos, old.subID, old.latest = qos, subID, newest
			se.mu.Unlock()
		}
		return qos, ""
	}
	var subs []*sub
	for _, st := range streams {
		tt := t
		tt.Stream = st
		parts, err := s.r.Partitions(ctx, st)
		if errors.Is(err, tables.ErrNoSuchStream) {
			return codeFilterInvalid, "no such stream " + st
		}
		if err != nil {
			return codeImplementation, "read stream: " + err.Error()
		}
		su := &sub{filter: full, t: tt, qos: qos, subID: subID, start: start, parts: map[int32]*cursor{}}
		if latest {
			if su.latest, err = latestPerTopic(ctx, s.r, tt, parts); err != nil {
				return codeImplementation, "read stream: " + err.Error()
			}
		}
		for _, p := range parts {
			if t.Share != "" {
				break // the group's chunks say where (share.go)
			}
			n, err := startOffset(ctx, s.r, st, p, start)
			if err != nil {
				return codeImplementation, "read stream: " + err.Error()
			}
			su.parts[p] = &cursor{next: n, saved: n}
		}
		subs = append(subs, su)
	}
	if se.persistent() {
		if err := s.store.DropFilter(ctx, se.id, full); err != nil {
			return codeImplementation, "session store: " + err.Error()
		}
		for _, su := range subs {
			pos := map[int32]int64{}
			for p, c := range su.parts {
				pos[p] = c.next
			}
			if err := s.store.SavePositions(ctx, se.id, full, su.t.Stream, pos); err != nil {
				return codeImplementation, "session store: " + err.Error()
			}
		}
	}
	se.mu.Lock()
	for _, old := range olds {
		se.dropLocked(old)
	}
	for _, su := range subs {
		se.subs = append(se.subs, su)
		se.watchLocked(su.t.Stream, 1)
	}
	se.mu.Unlock()
	return qos, ""
}

// filtersLocked counts the session's subscription filters.
func (se *session) filtersLocked() int {
	seen := map[string]bool{}
	for _, su := range se.subs {
		seen[su.filter] = true
	}
	return len(seen)
}

// startOffset is where a new subscription starts in partition p.
func startOffset(ctx context.Context, r *tables.Reader, stream string, p int32, st wire.Start) (int64, error) {
	v, err := r.Partition(ctx, stream, p)
	if errors.Is(err, tables.ErrNoSuchPartition) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	switch st.Kind {
	case wire.Earliest:
		return v.Earliest, nil
	case wire.Offset:
		n, ok := st.Offsets[p]
		if !ok {
			n = st.All
		}
		if n < 0 {
			return v.End, nil
		}
		return min(max(n, v.Earliest), v.End), nil
	case wire.Time:
		rec, err := v.OffsetForTime(ctx, st.Time.UnixMicro())
		if err != nil {
			return 0, err
		}
		if rec == nil {
			return v.End, nil
		}
		return rec.Offset, nil
	}
	return v.End, nil
}

// Bounds of stream-latest: the rows of each partition it looks at (from
// the committed mark back) and the topics it keeps.
const (
	latestScanRows = 100000
	latestTopics   = 10000
)

// latestPerTopic is the newest row of each topic matching t's filter
// among the last latestScanRows rows of each partition (at most
// latestTopics topics), by acceptance time.
func latestPerTopic(ctx context.Context, r *tables.Reader, t wire.Target, parts []int32) ([]*tributary.Record, error) {
	byTopic := map[string]*tributary.Record{}
	for _, p := range parts {
		v, err := r.Partition(ctx, t.Stream, p)
		if errors.Is(err, tables.ErrNoSuchPartition) {
			continue
		}
		if err != nil {
			return nil, err
		}
		from := max(v.Earliest, v.End-latestScanRows)
		err = v.Read(ctx, from, func(rec *tributary.Record) bool {
			if !wire.Match(t.Filter, rec.Topic) {
				return true
			}
			if old, ok := byTopic[rec.Topic]; ok || len(byTopic) < latestTopics {
				if !ok || rec.Timestamp >= old.Timestamp {
					byTopic[rec.Topic] = rec
				}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]*tributary.Record, 0, len(byTopic))
	for _, rec := range byTopic {
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Timestamp < out[j].Timestamp })
	return out, nil
}

// dropLocked removes su and its inflight entries.
func (se *session) dropLocked(su *sub) {
	se.subs = slices.DeleteFunc(se.subs, func(x *sub) bool { return x == su })
	for id, in := range se.inflight {
		if in.sub == su {
			delete(se.inflight, id)
		}
	}
	se.watchLocked(su.t.Stream, -1)
}

// unsubscribe answers UNSUBSCRIBE.
func (se *session) unsubscribe(pk packets.Packet) error {
	ctx, cancel := context.WithTimeout(se.s.ctx, 30*time.Second)
	defer cancel()
	codes := make([]byte, len(pk.Filters))
	for i, f := range pk.Filters {
		se.mu.Lock()
		var found []*sub
		for _, su := range se.subs {
			if su.filter == f.Filter {
				found = append(found, su)
			}
		}
		for _, su := range found {
			se.dropLocked(su)
		}
		se.mu.Unlock()
		se.releaseShares(found)
		if len(found) == 0 {
			codes[i] = 0x11 // no subscription existed
			continue
		}
		if se.persistent() {
			if err := se.s.store.DropFilter(ctx, se.id, f.Filter); err != nil {
				codes[i] = codeImplementation
			}
		}
	}
	if se.persistent() {
		se.mu.Lock()
		row := se.row()
		se.mu.Unlock()
		if err := se.s.store.Save(ctx, se.id, row); err != nil {
			se.s.log.Warn("cloud mqtt: save session", "client", se.id, "err", err)
		}
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsuback}, ProtocolVersion: se.conn.version,
		PacketID: pk.PacketID}
	if se.conn.version == 5 {
		ack.ReasonCodes = codes
	}
	return se.conn.write(&ack)
}

// ack handles a PUBACK: the message's cursor may advance.
func (se *session) ack(id uint16) {
	se.mu.Lock()
	in, ok := se.inflight[id]
	if !ok {
		se.mu.Unlock()
		return
	}
	delete(se.inflight, id)
	c := in.sub.parts[in.part]
	if c != nil && !in.latest {
		if i, found := slices.BinarySearch(c.unacked, in.off); found {
			c.unacked = slices.Delete(c.unacked, i, i+1)
		}
		se.saveLocked(in.sub, in.part, c)
	}
	se.mu.Unlock()
	se.kick()
}

// saveLocked gives the store a cursor's durable position when it moved.
func (se *session) saveLocked(su *sub, p int32, c *cursor) {
	if su.t.Share != "" {
		return // the group's chunks hold the position
	}
	if d := c.durable(); d != c.saved && se.persistent() {
		c.saved = d
		se.s.store.Set(se.id, su.filter, su.t.Stream, p, d)
	}
}

// pump sends rows until ctx ends: round-robin over the subscriptions'
// partitions, a batch at a time, waiting for acknowledgements when the
// inflight window is full and for the watcher when every cursor is at its
// partition's committed mark.
func (se *session) pump(ctx context.Context) {
	for ctx.Err() == nil {
		sent, err := se.round(ctx)
		if err != nil {
			if ctx.Err() == nil {
				se.s.log.Debug("cloud mqtt delivery ended", "client", se.id, "err", err)
				se.conn.end(codeUnspecified, "delivery failed")
			}
			return
		}
		if sent {
			continue
		}
		se.mu.Lock()
		wait := 5 * time.Second
		if se.deferred {
			se.deferred, wait = false, refillDelay
		}
		se.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-se.wake:
		case <-time.After(wait):
		}
	}
}

// batchRows bounds the rows one partition gets per round; refillDelay is
// how long a partly acknowledged window waits to be refilled in one batch.
const (
	batchRows   = 128
	refillDelay = 2 * time.Millisecond
)

// round makes one pass over every subscription's partitions; sent tells
// whether anything moved.
func (se *session) round(ctx context.Context) (sent bool, err error) {
	se.mu.Lock()
	subs := slices.Clone(se.subs)
	se.mu.Unlock()
	for _, su := range subs {
		n, pending, err := se.sendLatest(su)
		if err != nil {
			return sent, err
		}
		sent = sent || n
		if pending {
			continue // the rows come after the latest values
		}
		parts, err := se.s.r.Partitions(ctx, su.t.Stream)
		if err != nil {
			if errors.Is(err, tables.ErrNoSuchStream) {
				continue
			}
			return sent, nil // a catalog hiccup: the next round tries again
		}
		for _, p := range parts {
			n, err := se.deliver(ctx, su, p)
			if err != nil {
				return sent, err
			}
			sent = sent || n
		}
	}
	return sent, nil
}

// sendLatest sends what is left of su's latest values, as far as the
// inflight window allows.
func (se *session) sendLatest(su *sub) (sent, pending bool, err error) {
	se.mu.Lock()
	room := len(su.latest)
	if su.qos > 0 {
		room = min(room, se.maxIn-len(se.inflight))
	}
	batch := su.latest[:max(room, 0)]
	su.latest = su.latest[len(batch):]
	pending = len(su.latest) > 0
	se.mu.Unlock()
	var out bytes.Buffer
	for _, r := range batch {
		if err := se.sendRow(su, r.Partition, r, true, &out); err != nil {
			return true, pending, err
		}
	}
	if err := se.conn.writeBytes(out.Bytes()); err != nil {
		return true, pending, err
	}
	return len(batch) > 0, pending, nil
}

// deliver sends the next batch of partition p's rows for su.
func (se *session) deliver(ctx context.Context, su *sub, p int32) (bool, error) {
	se.mu.Lock()
	if !slices.Contains(se.subs, su) {
		se.mu.Unlock()
		return false, nil
	}
	c := su.parts[p]
	room := batchRows
	if su.qos > 0 {
		room = min(room, se.maxIn-len(se.inflight))
		// Refill the window in batches, not one PUBLISH per PUBACK: wait
		// until half of it (or a batch) is free again, for at most
		// refillDelay (a client may wait for more before acknowledging).
		// (Small windows are refilled at once: the round trip bounds them.)
		if se.maxIn >= 64 && len(se.inflight) > 0 && room > 0 && room < min(batchRows, se.maxIn/2) {
			if se.waitSince.IsZero() {
				se.waitSince = time.Now()
			}
			if time.Since(se.waitSince) < refillDelay {
				se.deferred, room = true, 0
			}
		}
		if room > 0 {
			se.waitSince = time.Time{}
		}
	}
	se.mu.Unlock()
	if room <= 0 {
		return false, nil
	}
	v, err := se.s.r.Partition(ctx, su.t.Stream, p)
	if err != nil {
		return false, nil
	}
	end := v.End
	if su.t.Share != "" {
		if c = se.shareCursor(ctx, su, p, v.End); c == nil {
			return false, nil
		}
		se.mu.Lock()
		end = min(end, c.limit)
		se.mu.Unlock()
	}
	if c == nil {
		// A partition that appeared after the subscription: all of it is new.
		n := v.Earliest
		if su.start.Kind == wire.Time {
			if n, err = startOffset(ctx, se.s.r, su.t.Stream, p, su.start); err != nil {
				return false, nil
			}
		}
		c = &cursor{next: n, saved: -1}
		se.mu.Lock()
		if su.parts[p] == nil {
			su.parts[p] = c
		} else {
			c = su.parts[p]
		}
		se.mu.Unlock()
	}
	se.mu.Lock()
	from := c.next
	se.mu.Unlock()
	if from >= end {
		return false, nil
	}
	from = max(from, v.Earliest)
	var recs []*tributary.Record
	last := from - 1
	if err := v.Read(ctx, from, func(r *tributary.Record) bool {
		if r.Offset >= end {
			return false
		}
		last = r.Offset
		if wire.Match(su.t.Filter, r.Topic) {
			recs = append(recs, r)
		}
		return len(recs) < room && r.Offset-from < 4*batchRows
	}); err != nil && last < from {
		return false, nil
	}
	if last < from {
		return false, nil
	}
	var out bytes.Buffer
	for _, r := range recs {
		if err := se.sendRow(su, p, r, false, &out); err != nil {
			return true, err
		}
	}
	if err := se.conn.writeBytes(out.Bytes()); err != nil {
		return true, err
	}
	se.mu.Lock()
	if c.next < last+1 {
		c.next = last + 1
	}
	se.saveLocked(su, p, c)
	se.mu.Unlock()
	return true, nil
}

// sendRow encodes one row as a PUBLISH into out, registering it inflight
// first at QoS 1 (the caller writes out: one write per batch); latest
// marks a stream-latest value (retain flag set).
func (se *session) sendRow(su *sub, p int32, r *tributary.Record, latest bool, out *bytes.Buffer) error {
	c := se.conn
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: su.qos, Retain: latest}, ProtocolVersion: c.version,
		TopicName: r.Topic, Payload: r.Value}
	if c.version == 5 {
		u := make([]packets.UserProperty, 0, len(r.Headers)+3)
		for _, h := range r.Headers {
			u = append(u, packets.UserProperty{Key: h.Key, Val: string(h.Value)})
		}
		u = append(u, packets.UserProperty{Key: "offset", Val: strconv.FormatInt(r.Offset, 10)},
			packets.UserProperty{Key: "partition", Val: strconv.FormatInt(int64(r.Partition), 10)},
			packets.UserProperty{Key: "timestamp", Val: time.UnixMicro(r.Timestamp).UTC().Format(time.RFC3339Nano)})
		pk.Properties.User = u
		if su.subID > 0 {
			pk.Properties.SubscriptionIdentifier = []int{su.subID}
		}
		if c.maxOut > 0 && publishSize(&pk) > int(c.maxOut) {
			se.s.m.skipped.Inc()
			return nil // MQTT 5 3.1.2.25: not sent, as if delivered
		}
	}
	if su.qos > 0 {
		se.mu.Lock()
		if !slices.Contains(se.subs, su) {
			se.mu.Unlock()
			return nil
		}
		id := se.nextIDLocked()
		pk.PacketID = id
		se.inflight[id] = inflight{sub: su, part: p, off: r.Offset, latest: latest}
		if cu := su.parts[p]; cu != nil && !latest {
			if i, found := slices.BinarySearch(cu.unacked, r.Offset); !found {
				cu.unacked = slices.Insert(cu.unacked, i, r.Offset)
			}
		}
		se.mu.Unlock()
	}
	b, err := wire.Encode(&pk)
	if err != nil {
		return err
	}
	out.Write(b)
	se.s.m.delivered.Inc()
	return nil
}

// nextIDLocked is a packet identifier not inflight (the window is far
// below 65535, so one is free).
func (se *session) nextIDLocked() uint16 {
	for {
		se.nextPID++
		if se.nextPID == 0 {
			se.nextPID = 1
		}
		if _, used := se.inflight[se.nextPID]; !used {
			return se.nextPID
		}
	}
}

// publishSize is the encoded size of pk.
func publishSize(pk *packets.Packet) int {
	b, err := wire.Encode(pk)
	if err != nil {
		return 1 << 30
	}
	return len(b)
}
