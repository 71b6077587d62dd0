// Package replica replicates the edge node's write-ahead log to its peers
// and takes over a dead peer's partitions from the replicas it holds.
//
// # Invariants
//
//  1. Acknowledged means durable on the owner and on its replicas.
//     Replicate returns nil only after every chosen replica has answered
//     that it holds the records durably (fsynced), unless a replica is
//     missing and the policy is "degrade" (then it returns nil with
//     Stats.Degraded set, logged loudly); with "refuse" it returns an error
//     wrapping ErrNotReplicated, which wraps tributary.ErrNotReplicated, so
//     the front doors refuse the publish with their own code for it (MQTT 5
//     0x97, Kafka NOT_ENOUGH_REPLICAS; docs/cluster.md "Refusal codes") — never as
//     a full WAL. Admission asks CanReplicate first, so a replica already
//     known missing refuses before the append.
//  2. Offsets are the owner's. A replica stores records with the offsets
//     the owner assigned (AppendAt), gap-free per partition; a replica
//     that is behind answers with its next offset and the owner resends
//     from there, re-reading its own WAL (records stay there until they are
//     in the table; below the owner's released offset the replica skips
//     ahead, since everything there is in the table).
//  3. Replicas are chosen deterministically: the next Factor-1 live members
//     after the owner in id order (a ring), so every node can tell who holds
//     whose data.
//  4. Gossip alone never moves ownership. A member's partitions are taken
//     over only when gossip declares it dead AND its data link (peer ping)
//     has failed for Config.Grace AND the Quorum agrees (package lease:
//     its owner lease in the catalog has run out, and this node is on
//     the majority side). A node cut off from gossip but still
//     reachable answers pings, so nobody takes it over. Ownership moves
//     only through the catalog's compare-and-swap (Catalog.TakeOver), so
//     among several replica holders exactly one wins each partition.
//  5. Fencing on the data path. A node that owns a partition at a higher
//     epoch (it took it over, or its ingest owns it per the table: see
//     Owner.Epoch) answers an old owner's appends for it with "fenced";
//     the old owner's Replicate fails with ErrFenced and Owner.Fenced
//     tells the node to stop writing the partition. The fence lifts if the
//     node owns the partition again at a higher epoch, and a partition the
//     WAL dropped (fenced by the uplink) is no longer replicated.
//  6. Exactly once in the table. The taker copies only the records above
//     the table's committed mark into its main WAL (with the new epoch),
//     and the normal uplink uploads them; the old owner's uploads are fenced
//     by the epoch in the catalog. Before reading its copy's end the taker
//     freezes the copy (the old owner's appends are refused) and records
//     that end with the take-over (Owner.TakeOver's start): the old owner
//     re-admits what it holds at or above it, since only it holds that. Replica copies are released once the
//     table's mark covers them (losers) or once copied (the winner).
//  7. Copies agree after a crash. Records reach a replica before the
//     owner has fsynced them, so an owner killed in between leaves its
//     replicas holding records it never made durable (and never
//     acknowledged: an acknowledgement waits for both fsyncs). Every open
//     of the owner's WAL is a new incarnation; the replicas drop, before
//     storing anything of the new one, what they hold at or above the
//     owner's durable end at that open, and refuse appends of an older
//     incarnation (StatusStale). Acknowledged records are below that end,
//     so they are never dropped. If the owner dies for good, the taker
//     keeps everything its copy holds: all acknowledged records, and
//     possibly unacknowledged ones the owner sent, which then are the
//     partition's history (the old owner, fenced, drops its own copy).
//
// # Outline
//
// Owner side (sender.go): the Replicas are the main WAL's wal.Tap. The
// committer hands each group's chunk values to Tapped before it fsyncs
// them, and they are queued at once, verbatim, as a wire.MsgAppend for
// every replica that is in step (has been sent everything before the
// group): the replicas' fsyncs overlap the owner's. Replicate (and
// ReplicateAsync, whose callback runs on one dispatcher goroutine) then
// waits on a waiter per partition for the replicas' answers. Each
// (partition, replica) pair has a sender goroutine, the only one that
// hands that replica's appends to the link (in offset order); it also
// catches a replica up that is new, behind or recovering by reading chunks
// back from the WAL (ReadChunks), and passes on the owner's releases
// (wire.MsgRelease). Replies advance the replica's acknowledged offset and
// release waiters; a gap reply rewinds the sender; a link error (also
// heard from the peer link at once, OnLinkDown, when nothing is in
// flight), a timeout or a stale-incarnation reply marks the replica
// missing (degrade or refuse) and it is retried with a backoff from
// retryBackoffMin to retryBackoff, and at once when the peer link tells
// it is up again (OnLinkUp), so it catches up from the WAL as soon as its
// link is back. A restarted owner greets
// every replica of every partition of its WAL (takeover loop tick) with
// its new incarnation and durable start (wal.PartitionState.Start), even
// with nothing new to send.
//
// Replica side (store.go): one store per origin node, a wal.WAL under
// Config.Dir/<origin>/ opened on first use, with the node's disk budget.
// Its worker applies the origin's messages in arrival order, storing the
// chunks verbatim (wal.AppendVerbatimAsync: checksums and offsets checked,
// group commit) and releasing asynchronously, replying as each is durable
// so the link keeps pipelining. Per partition it keeps the owner's
// incarnation (the WAL's Tag): the first message of a newer one drops the
// records above the owner's durable start first (invariant 7).
//
// Takeover (takeover.go): a loop watches the members whose replicas this
// node holds; once one is dead and unreachable for Grace, it asks the other
// live members how far they hold each partition of that store (wire.MsgQuery)
// and, unless one holds strictly more (a former replica that left the
// owner's ring holds a stale copy; the current one holds every
// acknowledged record), tries Catalog.TakeOver for it. The winner copies
// the records above the table's mark into its main WAL at the new epoch,
// calls Owner.Adopt, and releases its copy; a loser releases its copy as
// the table's mark passes it. Each takeover is logged and counted.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/replica/wire"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/peer"
	"github.com/tributary-io/tributary/wal"
)

// Policy is what the owner does when replicas are missing.
type Policy string

// Policies.
const (
	// Degrade keeps accepting with the replication factor reduced.
	Degrade Policy = "degrade"
	// Refuse refuses (back-pressure) what cannot be replicated.
	Refuse Policy = "refuse"
)

var (
	// ErrNotReplicated is returned under the refuse policy when the records
	// could not be made durable on enough replicas; it wraps
	// tributary.ErrNotReplicated (back-pressure of its own reason, not the
	// WAL's disk budget).
	ErrNotReplicated = fmt.Errorf("replica: replication_policy refuse: %w", tributary.ErrNotReplicated)
	// ErrFenced is returned when a replica owns the partition at a higher
	// epoch: this node no longer owns it. It wraps tributary.ErrFenced, so
	// the front doors refuse with their code for a partition owned
	// elsewhere.
	ErrFenced = fmt.Errorf("replica: partition fenced: another node took it over: %w", tributary.ErrFenced)
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("replica: closed")
)

// Member is a cluster member as the replicas see it.
type Member struct {
	ID    string
	Peer  string // peer (data link) address
	State cluster.State
}

// Transport is the part of package peer the replicas use: handlers for
// this package's message types, ordered and pipelined requests to a node
// at an address, and a liveness ping. PeerTransport adapts a *peer.Peer.
type Transport interface {
	Handle(typ uint8, h func(from string, payload []byte, reply func(resp []byte, err error)))
	Go(id, addr string, typ uint8, payload []byte, done func(resp []byte, err error))
	Call(ctx context.Context, id, addr string, typ uint8, payload []byte) ([]byte, error)
	Ping(ctx context.Context, id, addr string) error
}

// PeerTransport is the Transport of a peer.Peer.
func PeerTransport(p *peer.Peer) Transport { return peerTransport{p} }

type peerTransport struct{ p *peer.Peer }

func (t peerTransport) Handle(typ uint8, h func(string, []byte, func([]byte, error))) {
	t.p.Handle(typ, h)
}

func (t peerTransport) Go(id, addr string, typ uint8, payload []byte, done func([]byte, error)) {
	t.p.Link(id, addr).Go(typ, payload, done)
}

func (t peerTransport) Call(ctx context.Context, id, addr string, typ uint8, payload []byte) ([]byte, error) {
	return t.p.Link(id, addr).Call(ctx, typ, payload)
}

func (t peerTransport) Ping(ctx context.Context, id, addr string) error {
	_, err := t.p.Link(id, addr).Call(ctx, peer.TypePing, nil)
	return err
}

func (t peerTransport) OnLinkDown(f func(node string, err error)) { t.p.OnLinkDown(f) }

func (t peerTransport) LinkDown(id, addr string) bool { return t.p.Link(id, addr).Down() }

func (t peerTransport) OnLinkUp(f func(node string)) { t.p.OnLinkUp(f) }

// linkEvents is what a Transport may add (PeerTransport does): hearing at
// once that the link to a node broke, and whether it is down now.
type linkEvents interface {
	OnLinkDown(f func(node string, err error))
	LinkDown(id, addr string) bool
}

// linkUpEvents is what a Transport may add too (PeerTransport does):
// hearing at once that the link to a node is up again.
type linkUpEvents interface {
	OnLinkUp(f func(node string))
}

// Log is the node's main WAL (*wal.WAL). Open makes the Replicas its Tap
// (SetTap), so each group's chunks go to the replicas while the WAL
// fsyncs them; ReadChunks catches a replica up.
type Log interface {
	Partition(stream string, partition int32) (wal.PartitionState, bool)
	Read(stream string, partition int32, from int64, maxRecords int, maxBytes int64) ([]*tributary.Record, error)
	ReadChunks(stream string, partition int32, from int64, maxBytes int) ([][]byte, error)
	Partitions() []wal.PartitionState
	Incarnation() int64
	SetTap(wal.Tap)
	EnsurePartition(stream string, partition int32, minNext int64) error
	AppendAt(ctx context.Context, recs ...*tributary.Record) (skipped int, err error)
}

// Owner is this node's book of partition ownership (owner.Book): the
// take-over decisions go through it, and it hears what the replicas learn.
type Owner interface {
	// Claim is called before a takeover of (stream, p) is attempted: the
	// node must not write p until release is called (so that new records
	// cannot take offsets the copied ones need).
	Claim(stream string, p int32) (release func())
	// TakeOver makes this node the owner of (stream, p) at a new epoch if
	// from owns it now, recording start (the end of this node's frozen
	// copy) as where its history begins; won is false (and err nil) if
	// another node owns it.
	TakeOver(ctx context.Context, stream string, p int32, from string, start int64) (epoch int64, won bool, err error)
	// Owner is the partition's current owner and epoch, from the table.
	Owner(ctx context.Context, stream string, p int32) (node string, epoch int64, err error)
	HighWaters(ctx context.Context, stream string) (map[int32]int64, error)
	// Adopt tells the node it owns (stream, p) at epoch from now on, its
	// WAL holding the partition up to at least next.
	Adopt(stream string, p int32, epoch, next int64) error
	// Epoch says at which epoch the node owns (stream, p), if it does (its
	// view, which survives restarts through the table): appends of an
	// older owner are fenced against it as against partitions this node
	// took over itself.
	Epoch(stream string, p int32) (epoch int64, ok bool)
	// Fenced tells the node a peer owns (stream, p) now.
	Fenced(stream string, p int32)
}

// Quorum decides whether this node may take a member's partitions over:
// nil, or why not (logged; asked again every tick).
type Quorum interface {
	MayTakeOver(node string) error
}

// Membership lists the cluster as gossip sees it (this node included).
type Membership interface {
	Members() []Member
}

// Config configures the replicas of one node.
type Config struct {
	NodeID string
	// Dir holds one replica WAL per origin node (DATA_DIR/replicas).
	Dir string
	// MaxBytes is each replica WAL's disk budget (the node's wal.max_bytes).
	MaxBytes int64
	// Factor is the replication factor (>= 1; 1 = off).
	Factor int
	Policy Policy
	// Timeout is how long Replicate waits for a replica before it counts
	// as missing. Default 5s.
	Timeout time.Duration
	// Grace is how long a dead member's data link must have failed before
	// its partitions are taken over. Default 5s.
	Grace time.Duration

	// Quorum, when set, must also agree before a dead member's partitions
	// are taken over (package lease: the member's catalog lease has run
	// out and this node is on the majority side). Nil: gossip and the
	// data link decide alone.
	Quorum Quorum

	Transport Transport
	// Members is the cluster as gossip sees it.
	Members Membership
	// Log is the node's main WAL; takeovers copy into it.
	Log Log
	// Owner is the node's ownership book.
	Owner  Owner
	Logger *slog.Logger
	NoSync bool // tests only: replica WALs skip fsync
}

// Replicas is one node's replication: owner and replica sides, takeover.
type Replicas struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	stores map[string]*store // by origin
	out    map[pkey]*outPart // partitions this node replicates
	taken  map[pkey]int64    // partitions this node took over, at epoch
	frozen map[pkey]bool     // replica partitions refusing their origin's appends (takeover.go)
	watch  map[string]*watchState

	ringMu  sync.Mutex
	ringAt  time.Time
	ringVal []Member

	degraded                      atomic.Bool
	replicated, stored, takeovers atomic.Int64
	fenced                        atomic.Int64
	lastWarn                      atomic.Int64 // unix nanos of the last degrade warning
	truncated                     atomic.Int64 // records of an old incarnation dropped (replica side)

	// The dispatcher runs ReplicateAsync completions in order (sender.go).
	cbMu   sync.Mutex
	cbq    []func()
	cbWake chan struct{}
	cbStop chan struct{}
	// cbExited: the dispatcher has exited (under cbMu).
	cbExited bool

	stop chan struct{}
	wg   sync.WaitGroup
}

// Stats are the replication figures of a node.
type Stats struct {
	Degraded          bool  // the last Replicate had fewer replicas than wanted
	LagRecords        int64 // records in the WAL not yet durable on every replica
	ReplicatedRecords int64 // records replicas confirmed durable (owner side)
	StoredRecords     int64 // records stored as a replica for others
	Takeovers         int64 // partitions this node took over
	Fenced            int64 // partitions a replica reported as taken over
	// TruncatedRecords are records this node dropped from its replicas
	// because their owner restarted (a new incarnation of its WAL) without
	// having made them durable.
	TruncatedRecords int64
}

// Open registers the message handlers, opens the stores left on disk and
// starts the takeover loop.
func Open(cfg Config) (*Replicas, error) {
	if cfg.NodeID == "" || cfg.Dir == "" || cfg.Transport == nil || cfg.Members == nil || cfg.Log == nil ||
		cfg.Owner == nil {
		return nil, errors.New("replica: NodeID, Dir, Transport, Members, Log and Catalog are required")
	}
	if cfg.Factor < 1 {
		cfg.Factor = 1
	}
	if cfg.Policy == "" {
		cfg.Policy = Degrade
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Replicas{cfg: cfg, log: cfg.Logger.With("component", "replica"), stores: map[string]*store{},
		out: map[pkey]*outPart{}, taken: map[pkey]int64{}, frozen: map[pkey]bool{}, watch: map[string]*watchState{}, stop: make(chan struct{}),
		cbWake: make(chan struct{}, 1), cbStop: make(chan struct{})}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() && validOrigin(e.Name()) && e.Name() != cfg.NodeID {
			s := newStore(r, e.Name())
			if s.exists() {
				r.stores[e.Name()] = s
				s.start()
			}
		}
	}
	cfg.Transport.Handle(wire.MsgAppend, r.handleAppend)
	cfg.Transport.Handle(wire.MsgRelease, r.handleRelease)
	cfg.Transport.Handle(wire.MsgQuery, r.handleQuery)
	if le, ok := cfg.Transport.(linkEvents); ok {
		le.OnLinkDown(r.linkDown)
	}
	if le, ok := cfg.Transport.(linkUpEvents); ok {
		le.OnLinkUp(r.linkUp)
	}
	r.wg.Add(2)
	go r.takeoverLoop()
	go r.dispatcher()
	cfg.Log.SetTap(r)
	return r, nil
}

func validOrigin(id string) bool {
	return id != "" && id != "." && id != ".." && filepath.Base(id) == id && len(id) <= 255
}

// Close stops the senders, the stores and the takeover loop. Waiting
// Replicate calls fail with ErrClosed.
func (r *Replicas) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.cfg.Log.SetTap(nil)
	outs := make([]*outPart, 0, len(r.out))
	for _, o := range r.out {
		outs = append(outs, o)
	}
	stores := make([]*store, 0, len(r.stores))
	for _, s := range r.stores {
		stores = append(stores, s)
	}
	r.mu.Unlock()
	close(r.stop)
	for _, o := range outs {
		o.close()
	}
	close(r.cbStop)
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var errs []error
	for _, s := range stores {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// Stats returns the current figures.
func (r *Replicas) Stats() Stats {
	st := Stats{Degraded: r.degraded.Load(), ReplicatedRecords: r.replicated.Load(), StoredRecords: r.stored.Load(),
		Takeovers: r.takeovers.Load(), Fenced: r.fenced.Load(), TruncatedRecords: r.truncated.Load()}
	r.mu.Lock()
	outs := make([]*outPart, 0, len(r.out))
	for _, o := range r.out {
		outs = append(outs, o)
	}
	r.mu.Unlock()
	for _, o := range outs {
		st.LagRecords += o.lag()
	}
	return st
}

// ring returns the replicas this node should write to: the next
// Factor-1 live members after it in id order (membership re-read at most
// every ringTTL, so that every publish does not copy the member list).
func (r *Replicas) ring() []Member {
	r.ringMu.Lock()
	defer r.ringMu.Unlock()
	if now := time.Now(); now.Sub(r.ringAt) >= ringTTL {
		r.ringVal, r.ringAt = ringAfter(r.cfg.NodeID, r.cfg.Members.Members(), r.cfg.Factor-1), now
	}
	return r.ringVal
}

const ringTTL = 100 * time.Millisecond

func ringAfter(self string, members []Member, k int) []Member {
	if k <= 0 {
		return nil
	}
	var live []Member
	for _, m := range members {
		if m.ID != self && m.Peer != "" && (m.State == cluster.Alive || m.State == cluster.Suspect) {
			live = append(live, m)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].ID < live[j].ID })
	start := sort.Search(len(live), func(i int) bool { return live[i].ID > self })
	var out []Member
	for i := 0; i < len(live) && len(out) < k; i++ {
		out = append(out, live[(start+i)%len(live)])
	}
	return out
}

// Check refuses early, under the refuse policy, when fewer live members
// than the replication factor needs are known: nothing is appended then.
func (r *Replicas) Check() error {
	if r.cfg.Policy != Refuse || r.cfg.Factor <= 1 {
		return nil
	}
	if len(r.ring()) < r.cfg.Factor-1 {
		r.setDegraded(true, "too few live members")
		return ErrNotReplicated
	}
	return nil
}

// CanReplicate is the cheap "can replicate now?" of admission: under the
// refuse policy it refuses (ErrNotReplicated) what would be refused
// anyway, before anything is appended — too few live members (Check), or
// a replica of (stream, p) known missing (its sender marked it so, or
// its peer link is down) — so that a refused record never reaches the
// WAL, hence never the table. Only a replica that fails during the wait
// still refuses after the append. Under degrade it returns nil.
func (r *Replicas) CanReplicate(stream string, p int32) error {
	if err := r.Check(); err != nil || r.cfg.Policy != Refuse || r.cfg.Factor <= 1 {
		return err
	}
	r.mu.Lock()
	o := r.out[pkey{stream, p}]
	r.mu.Unlock()
	le, _ := r.cfg.Transport.(linkEvents)
	for _, m := range r.ring() {
		missing := false
		if o != nil {
			o.mu.Lock()
			t := o.targets[m.ID]
			missing = t != nil && t.addr == m.Peer && !t.failedAt.IsZero()
			o.mu.Unlock()
		}
		if !missing && le != nil && le.LinkDown(m.ID, m.Peer) {
			missing = true
		}
		if missing {
			r.setDegraded(true, "replica "+m.ID+" missing")
			return fmt.Errorf("%w: replica %s missing", ErrNotReplicated, m.ID)
		}
	}
	return nil
}

// linkDown marks node missing for every partition at once when its peer
// link broke, also where no append is in flight to notice it.
func (r *Replicas) linkDown(node string, err error) {
	r.eachTarget(node, func(o *outPart, t *target) {
		if !t.failed() {
			o.fail(t, "peer link down: "+err.Error())
			o.settle()
		}
	})
}

// linkUp retries at once every failed target on node, whose peer link is
// up again: a healed cut is caught up from the WAL now, not at the
// target's next retry.
func (r *Replicas) linkUp(node string) {
	r.eachTarget(node, func(o *outPart, t *target) {
		if t.failed() {
			t.retryNow()
		}
	})
}

// eachTarget calls f with o.mu held for node's target of every partition
// this node replicates.
func (r *Replicas) eachTarget(node string, f func(o *outPart, t *target)) {
	r.mu.Lock()
	outs := make([]*outPart, 0, len(r.out))
	for _, o := range r.out {
		outs = append(outs, o)
	}
	r.mu.Unlock()
	for _, o := range outs {
		o.mu.Lock()
		if t := o.targets[node]; t != nil {
			f(o, t)
		}
		o.mu.Unlock()
	}
}

func (r *Replicas) setDegraded(on bool, why string) {
	was := r.degraded.Swap(on)
	switch {
	case on && !was:
		r.log.Error("replication degraded: records are acknowledged with fewer replicas than the replication factor",
			"factor", r.cfg.Factor, "policy", string(r.cfg.Policy), "reason", why)
		r.lastWarn.Store(time.Now().UnixNano())
	case on && time.Since(time.Unix(0, r.lastWarn.Load())) > 10*time.Second:
		r.log.Warn("replication still degraded", "factor", r.cfg.Factor, "policy", string(r.cfg.Policy), "reason", why)
		r.lastWarn.Store(time.Now().UnixNano())
	case !on && was:
		r.log.Info("replication restored", "factor", r.cfg.Factor)
	}
}

// takenEpoch is the epoch at which this node took (stream, p) over.
func (r *Replicas) takenEpoch(pk pkey) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.taken[pk]
	return e, ok
}

// ownedEpoch is the highest epoch at which this node owns (stream, p):
// taken over here, or owned as far as the node's ingest knows.
func (r *Replicas) ownedEpoch(pk pkey) (int64, bool) {
	e, ok := r.takenEpoch(pk)
	if e2, ok2 := r.cfg.Owner.Epoch(pk.stream, pk.partition); ok2 && (!ok || e2 > e) {
		e, ok = e2, true
	}
	return e, ok
}

// MarkOwned records that this node owns (stream, p) at epoch (after a
// takeover, or when ingest learns it from the table), so that appends of
// an older owner are fenced.
func (r *Replicas) MarkOwned(stream string, p int32, epoch int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if epoch > r.taken[pkey{stream, p}] {
		r.taken[pkey{stream, p}] = epoch
	}
}

// storeOf returns origin's store, creating it (not its WAL) on first use.
func (r *Replicas) storeOf(origin string) (*store, error) {
	if !validOrigin(origin) || origin == r.cfg.NodeID {
		return nil, fmt.Errorf("replica: bad origin %q", origin)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	s := r.stores[origin]
	if s == nil {
		s = newStore(r, origin)
		r.stores[origin] = s
		s.start()
	}
	return s, nil
}

func (r *Replicas) handleAppend(from string, payload []byte, reply func([]byte, error)) {
	m, err := wire.DecodeAppend(payload)
	if err != nil {
		reply(nil, err)
		return
	}
	s, err := r.storeOf(from)
	if err != nil {
		reply(nil, err)
		return
	}
	s.enqueue(&task{app: m, reply: reply})
}

// handleQuery answers how far this node holds a replica (never creating
// a store for it).
func (r *Replicas) handleQuery(from string, payload []byte, reply func([]byte, error)) {
	q, err := wire.DecodeQuery(payload)
	if err != nil {
		reply(nil, err)
		return
	}
	r.mu.Lock()
	s := r.stores[q.Origin]
	r.mu.Unlock()
	var next int64
	if s != nil && s.exists() {
		w, err := s.wal()
		if err != nil {
			reply(nil, err)
			return
		}
		ps, _ := w.Partition(q.Stream, q.Partition)
		next = ps.Next
	}
	reply(wire.Reply{Status: wire.StatusOK, Next: next}.Encode(), nil)
}

func (r *Replicas) handleRelease(from string, payload []byte, reply func([]byte, error)) {
	m, err := wire.DecodeRelease(payload)
	if err != nil {
		reply(nil, err)
		return
	}
	s, err := r.storeOf(from)
	if err != nil {
		reply(nil, err)
		return
	}
	s.enqueue(&task{rel: &m, reply: reply})
}
