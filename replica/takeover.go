package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tributary-io/tributary/replica/wire"

	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/wal"
)

const (
	takeoverTick    = 250 * time.Millisecond
	pingTimeout     = time.Second
	releaseInterval = time.Second
)

// watchState follows one origin whose replicas this node holds (takeover
// loop only).
type watchState struct {
	downSince   time.Time       // data link failing since (while gossip says dead)
	handled     bool            // every partition of this death was resolved
	answering   bool            // dead to gossip but answering pings (logged once)
	resolved    map[pkey]bool   // partitions taken over or lost in this death
	lost        map[pkey]bool   // partitions another node owns: release as the mark passes
	deferred    map[pkey]bool   // partitions left to a holder with more (logged)
	claims      map[pkey]func() // ingest claims held while taking partitions over
	lastRelease time.Time
	lastStale   time.Time
	waiting     string // why the quorum refused the takeover (logged when it changes)
}

// takeoverLoop checks, every takeoverTick, the origins this node holds
// replicas of (see the package comment, invariant 4).
func (r *Replicas) takeoverLoop() {
	defer r.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-r.stop
		cancel()
	}()
	tick := time.NewTicker(takeoverTick)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		r.checkTakeovers(ctx)
		r.greet()
	}
}

func (r *Replicas) checkTakeovers(ctx context.Context) {
	list := r.cfg.Members.Members()
	members := map[string]Member{}
	for _, m := range list {
		members[m.ID] = m
	}
	r.mu.Lock()
	stores := make(map[string]*store, len(r.stores))
	for o, s := range r.stores {
		stores[o] = s
	}
	r.mu.Unlock()
	now := time.Now()
	for origin, s := range stores {
		ws := r.watch[origin]
		if ws == nil {
			ws = &watchState{resolved: map[pkey]bool{}, lost: map[pkey]bool{}, deferred: map[pkey]bool{}, claims: map[pkey]func(){}}
			r.watch[origin] = ws
		}
		m, known := members[origin]
		switch {
		case !known || m.State != cluster.Dead:
			if ws.handled || !ws.downSince.IsZero() {
				r.log.Info("member no longer dead; takeover watch reset", "member", origin, "state", string(m.State))
			}
			ws.downSince, ws.handled, ws.answering, ws.waiting = time.Time{}, false, false, ""
			clear(ws.resolved)
			clear(ws.deferred)
			for pk := range ws.claims {
				ws.unclaim(pk)
			}
			if known && now.Sub(ws.lastStale) >= releaseInterval {
				ws.lastStale = now
				r.markStale(s, ws, ringAfter(origin, list, r.cfg.Factor-1))
			}
		case ws.handled:
		case r.reachable(ctx, m):
			if !ws.answering {
				r.log.Warn("member declared dead by gossip still answers on its data link: not taking over", "member", origin)
				ws.answering = true
			}
			ws.downSince = time.Time{}
		case ws.downSince.IsZero():
			ws.downSince, ws.answering = now, false
			r.log.Warn("member dead and its data link down; taking over its partitions after the grace period unless it answers",
				"member", origin, "grace", r.cfg.Grace)
		case now.Sub(ws.downSince) < r.cfg.Grace:
		case r.cfg.Quorum != nil:
			if err := r.cfg.Quorum.MayTakeOver(origin); err != nil {
				if ws.waiting != err.Error() {
					ws.waiting = err.Error()
					r.log.Warn("member dead and its data link down, but not taking over", "member", origin, "why", err)
				}
				break
			}
			ws.waiting = ""
			ws.handled = r.takeOverAll(ctx, s, ws)
		default:
			ws.handled = r.takeOverAll(ctx, s, ws)
		}
		if len(ws.lost) > 0 && now.Sub(ws.lastRelease) >= releaseInterval {
			ws.lastRelease = now
			r.releaseLost(ctx, s, ws)
		}
	}
}

// markStale schedules the release (as the table's mark passes) of a live
// origin's replicas when this node is no longer in the origin's ring: the
// origin's releases go to its current replicas only, and a copy nobody
// updates would otherwise stay on disk for good.
func (r *Replicas) markStale(s *store, ws *watchState, ring []Member) {
	for _, m := range ring {
		if m.ID == r.cfg.NodeID {
			return
		}
	}
	if !s.exists() {
		return
	}
	w, err := s.wal()
	if err != nil {
		return
	}
	for _, p := range w.Partitions() {
		if p.Released < p.Next {
			ws.lost[pkey{p.Stream, p.Partition}] = true
		}
	}
}

func (ws *watchState) unclaim(pk pkey) {
	if release := ws.claims[pk]; release != nil {
		release()
		delete(ws.claims, pk)
	}
}

// reachable pings m over the data link.
func (r *Replicas) reachable(ctx context.Context, m Member) bool {
	if m.Peer == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return r.cfg.Transport.Ping(ctx, m.ID, m.Peer) == nil
}

// takeOverAll tries every partition of origin's store; it reports whether
// all were resolved (taken over, or owned by another node).
func (r *Replicas) takeOverAll(ctx context.Context, s *store, ws *watchState) bool {
	w, err := s.wal()
	if err != nil {
		r.log.Error("takeover: open replica store", "member", s.origin, "err", err)
		return false
	}
	all := true
	for _, p := range w.Partitions() {
		pk := pkey{p.Stream, p.Partition}
		if ws.resolved[pk] {
			continue
		}
		if _, ours := r.takenEpoch(pk); ours && p.Released == p.Next {
			ws.resolved[pk] = true // taken over in an earlier death, nothing new since
			continue
		}
		if ws.deferred[pk] {
			// Left to another holder: has it taken the partition?
			if owner, _, err := r.cfg.Owner.Owner(ctx, p.Stream, p.Partition); err == nil && owner != s.origin {
				r.log.Info("partition of a dead member taken over by another node; releasing the replica as the table passes it",
					"member", s.origin, "stream", p.Stream, "partition", p.Partition, "owner", owner)
				ws.lost[pk], ws.resolved[pk] = true, true
				continue
			}
		}
		if who, next := r.betterHolder(ctx, s.origin, p); who != "" {
			if !ws.deferred[pk] {
				r.log.Info("takeover: another node holds more of the dead member's partition; leaving it to that node",
					"member", s.origin, "stream", p.Stream, "partition", p.Partition, "holder", who, "their_next", next, "our_next", p.Next)
				ws.deferred[pk] = true
			}
			all = false
			continue
		}
		if err := r.takeOver(ctx, s.origin, w, p, ws); err != nil {
			r.log.Warn("takeover failed; retrying", "member", s.origin, "stream", p.Stream, "partition", p.Partition, "err", err)
			all = false
			continue
		}
		ws.resolved[pk] = true
	}
	return all
}

// betterHolder asks every other live member how far it holds origin's
// partition and names one that holds strictly more than this node (so
// that the taker is a holder with the most acknowledged records; equal
// holders race through the catalog). Members that do not answer are
// passed over: they cannot take over either.
func (r *Replicas) betterHolder(ctx context.Context, origin string, p wal.PartitionState) (string, int64) {
	q := wire.Query{Origin: origin, Stream: p.Stream, Partition: p.Partition}.Encode()
	for _, m := range r.cfg.Members.Members() {
		if m.ID == r.cfg.NodeID || m.ID == origin || m.Peer == "" || (m.State != cluster.Alive && m.State != cluster.Suspect) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, pingTimeout)
		resp, err := r.cfg.Transport.Call(cctx, m.ID, m.Peer, wire.MsgQuery, q)
		cancel()
		if err != nil {
			continue
		}
		if rep, err := wire.DecodeReply(resp); err == nil && rep.Next > p.Next {
			return m.ID, rep.Next
		}
	}
	return "", 0
}

// takeOver moves one partition of a dead origin to this node if the
// catalog lets it (see the package comment, invariant 6).
func (r *Replicas) takeOver(ctx context.Context, origin string, w *wal.WAL, p wal.PartitionState, ws *watchState) error {
	pk := pkey{p.Stream, p.Partition}
	// The claim is held until the partition is resolved, across failed
	// attempts: between them ingest must not adopt p from the table and
	// hand out offsets the copied records need.
	if release := ws.claims[pk]; release == nil {
		claim := r.cfg.Owner.Claim(p.Stream, p.Partition)
		ws.claims[pk] = func() { claim(); r.unfreeze(pk) }
	}
	done := false
	defer func() {
		if done {
			ws.unclaim(pk)
		}
	}()
	// The copy refuses the origin's appends before its end is read, so
	// the start recorded with the take-over is exact: every record the
	// origin holds at or above it reached no one else, and the origin,
	// fenced, re-admits them (package uplink).
	start, err := r.freeze(ctx, origin, w, pk)
	if err != nil {
		return fmt.Errorf("freeze the replica: %w", err)
	}
	epoch, won, err := r.cfg.Owner.TakeOver(ctx, p.Stream, p.Partition, origin, start)
	if err != nil {
		return fmt.Errorf("take over: %w", err)
	}
	if !won {
		owner, e, err := r.cfg.Owner.Owner(ctx, p.Stream, p.Partition)
		if err != nil {
			return fmt.Errorf("owner: %w", err)
		}
		if owner != r.cfg.NodeID {
			r.log.Info("partition of a dead member is owned by another node; releasing the replica as the table passes it",
				"member", origin, "stream", p.Stream, "partition", p.Partition, "owner", owner, "epoch", e)
			ws.lost[pk], done = true, true
			return nil
		}
		epoch = e // won in an earlier attempt that did not finish
	}
	if epoch < 1 {
		// Owned by this node at epoch 0: its own allocation, not a
		// takeover. The origin's records of this partition number cannot be
		// this partition's (nodes with separate catalogs?): leave both alone.
		r.log.Error("takeover: the dead member's partition is this node's own allocation; not copying its replica (do the nodes share one catalog?)",
			"member", origin, "stream", p.Stream, "partition", p.Partition)
		done = true
		return nil
	}
	marks, err := r.cfg.Owner.HighWaters(ctx, p.Stream)
	if err != nil {
		return fmt.Errorf("marks: %w", err)
	}
	mark := marks[p.Partition]
	if err := r.cfg.Log.Apply(context.Background(), wal.Op{Kind: wal.OpEnsure, Stream: p.Stream, Partition: p.Partition, Offset: mark}).Err; err != nil {
		return fmt.Errorf("main wal: %w", err)
	}
	copied, err := r.copyFrom(ctx, w, p.Stream, p.Partition, mark, epoch)
	if err != nil {
		return err
	}
	r.MarkOwned(p.Stream, p.Partition, epoch)
	if err := r.cfg.Owner.Adopt(p.Stream, p.Partition, epoch, max(mark, r.mainNext(pk))); err != nil {
		return fmt.Errorf("adopt: %w", err)
	}
	if err := w.Apply(context.Background(), wal.Op{Kind: wal.OpRelease, Stream: p.Stream, Partition: p.Partition, Offset: p.Next}).Err; err != nil {
		r.log.Warn("takeover: release replica copy", "stream", p.Stream, "partition", p.Partition, "err", err)
	}
	done = true
	r.takeovers.Add(1)
	r.log.Warn("partition taken over from a dead member", "member", origin, "stream", p.Stream, "partition", p.Partition,
		"epoch", epoch, "table_mark", mark, "copied_records", copied, "replica_next", p.Next)
	// Replicate the copied records onward without waiting.
	if next := r.mainNext(pk); next > 0 {
		if o, err := r.outPartOf(pk); err == nil {
			o.submit(next, epoch, r.ring(), false, nil)
		}
	}
	return nil
}

// errFrozen answers an origin's append to a replica partition this node
// is taking over: the origin counts this replica as missing.
var errFrozen = errors.New("replica: partition frozen: this node is taking it over")

// freeze makes origin's store refuse the origin's appends to pk (until
// the claim is released) and returns the partition's end once every
// append taken before is durable in w.
func (r *Replicas) freeze(ctx context.Context, origin string, w *wal.WAL, pk pkey) (int64, error) {
	r.mu.Lock()
	r.frozen[pk] = true
	s := r.stores[origin]
	r.mu.Unlock()
	if s != nil {
		reached := make(chan struct{})
		s.enqueue(&task{barrier: reached})
		select {
		case <-reached:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	// Ordered after every append the worker handed to w before the
	// barrier: done once they are committed.
	if err := w.Apply(context.Background(), wal.Op{Kind: wal.OpRelease, Stream: pk.stream, Partition: pk.partition, Offset: 0}).Err; err != nil {
		return 0, err
	}
	ps, _ := w.Partition(pk.stream, pk.partition)
	return ps.Next, nil
}

func (r *Replicas) unfreeze(pk pkey) {
	r.mu.Lock()
	delete(r.frozen, pk)
	r.mu.Unlock()
}

func (r *Replicas) isFrozen(pk pkey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frozen[pk]
}

// copyFrom copies the replica records of (stream, p) from offset from on
// into the main WAL with the new epoch, skipping what it already holds.
func (r *Replicas) copyFrom(ctx context.Context, w *wal.WAL, stream string, p int32, from, epoch int64) (int, error) {
	copied := 0
	for {
		from = max(from, r.mainNext(pkey{stream, p}))
		recs, err := w.Read(stream, p, from, maxSendRecords, maxSendBytes)
		if err != nil {
			return copied, fmt.Errorf("read replica: %w", err)
		}
		if len(recs) == 0 {
			return copied, nil
		}
		for _, rec := range recs {
			rec.Epoch = epoch
		}
		if err := r.cfg.Log.Apply(ctx, wal.Op{Kind: wal.OpAppendAt, Records: recs}).Err; err != nil {
			return copied, fmt.Errorf("copy to main wal: %w", err)
		}
		copied += len(recs)
		from = recs[len(recs)-1].Offset + 1
	}
}

// mainNext is the main WAL's next offset of a partition (0 if unknown).
func (r *Replicas) mainNext(pk pkey) int64 {
	p, _ := r.cfg.Log.Partition(pk.stream, pk.partition)
	return p.Next
}

// releaseLost releases the replica copies of partitions another node took
// over, as far as the table's marks cover them.
func (r *Replicas) releaseLost(ctx context.Context, s *store, ws *watchState) {
	w, err := s.wal()
	if err != nil {
		return
	}
	parts := map[pkey]wal.PartitionState{}
	for _, p := range w.Partitions() {
		parts[pkey{p.Stream, p.Partition}] = p
	}
	marks := map[string]map[int32]int64{}
	for pk := range ws.lost {
		p, ok := parts[pk]
		if !ok {
			delete(ws.lost, pk)
			continue
		}
		m, ok := marks[pk.stream]
		if !ok {
			if m, err = r.cfg.Owner.HighWaters(ctx, pk.stream); err != nil {
				continue
			}
			marks[pk.stream] = m
		}
		upTo := min(m[pk.partition], p.Next)
		if upTo > p.Released {
			if err := w.Apply(context.Background(), wal.Op{Kind: wal.OpRelease, Stream: pk.stream, Partition: pk.partition, Offset: upTo}).Err; err != nil {
				continue
			}
		}
		if upTo >= p.Next {
			delete(ws.lost, pk)
			r.log.Info("replica copy released: the table holds all of it", "member", s.origin, "stream", pk.stream, "partition", pk.partition)
		}
	}
}

// greet starts replicating every partition of the main WAL that has no
// sender yet (after a restart, before anything new is appended to it):
// its first message tells the replicas the WAL's new incarnation and
// durable end, so they drop what the previous one never made durable.
func (r *Replicas) greet() {
	if r.cfg.Factor <= 1 {
		return
	}
	var ring []Member
	for _, p := range r.cfg.Log.Partitions() {
		pk := pkey{p.Stream, p.Partition}
		r.mu.Lock()
		_, ok := r.out[pk]
		r.mu.Unlock()
		if ok {
			continue
		}
		if ring == nil {
			if ring = r.ring(); len(ring) == 0 {
				return // no replica known yet: next tick
			}
		}
		if o, err := r.outPartOf(pk); err == nil {
			o.submit(p.Next, p.Epoch, ring, false, nil)
		}
	}
}
