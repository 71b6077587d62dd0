// Package lease decides, for an edge node of a replicated site, two
// things a network cut makes hard: may this node go on acknowledging into
// the partitions it owns, and may it take a silent peer's partitions over.
//
// # Invariants
//
//  1. No takeover of an owner that may still acknowledge. A node may
//     write (MayWrite) while it holds its lease — its last successful
//     renewal in the catalog began less than Validity ago — or while it
//     sees a strict majority of the site alive. A taker may take a peer's
//     partitions over (MayTakeOver) only when BOTH are gone for the peer:
//     the peer's lease value has stayed unchanged in the catalog for a
//     whole Duration on the taker's own clock (measured from a read that
//     saw it, so after it was written: no clock synchronisation, only
//     clock rates within Duration-Validity of each other), and the taker
//     itself sees a strict majority of the site alive. An owner cut from
//     the majority but reaching the catalog keeps renewing, so nobody
//     takes it over; a majority cut from the catalog cannot commit a
//     takeover anyway; an owner cut from both stops writing before its
//     lease, as the taker counts it, runs out.
//  2. The catalog is the witness of an even site. With an even number of
//     members (a 2-node site), the catalog counts as one more voter for a
//     taker that can read it, so one of two nodes can take over a dead
//     peer, and two halves of four cannot both win.
//  3. The site's size is remembered. Members ever seen and not left
//     (gracefully, or forgotten by gossip after a day) count towards the
//     majority, and the list is kept in Config.StateFile, so a node that
//     restarts alone does not count itself as a majority of one.
//  4. Nothing here moves ownership: the catalog's compare-and-swap does
//     (package owner), and the uplink's epoch check fences a stale owner
//     whatever this package decided. A wrong decision here costs an
//     unneeded fence (whose records are re-admitted, package uplink),
//     never data.
//
// # Outline
//
// Open renews once, then a loop renews this node's lease every
// Duration/5 (Store.Renew of "<incarnation>.<counter>"), reads every
// node's lease (Store.Leases) and notes when each value was first seen.
// Members come from gossip (Membership); Status reports the state for the
// console and metrics.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary"
)

// ErrUnconfirmed is wrapped by MayWrite's refusal. It wraps
// tributary.ErrFenced: the front doors refuse as for a partition this node
// does not own (retriable).
var ErrUnconfirmed = fmt.Errorf("ownership not confirmed: %w", tributary.ErrFenced)

// Store keeps the leases: one value per node (package catalog.go: namespace
// properties of the catalog).
type Store interface {
	// Leases returns every node's current lease value.
	Leases(ctx context.Context) (map[string]string, error)
	// Renew sets node's lease value.
	Renew(ctx context.Context, node, value string) error
}

// Membership lists the site's members as gossip sees them, this node
// included.
type Membership interface {
	Members() []Member
}

// Member is one member as gossip sees it.
type Member struct {
	ID string
	// Alive: gossip hears it now (not suspect, dead or left).
	Alive bool
	// Left: it left the site gracefully (or gossip forgot it): it no
	// longer counts towards the site's size.
	Left bool
}

// Config configures a Keeper.
type Config struct {
	Node string
	// Duration is how long a taker waits, with a peer's lease unchanged,
	// before it may take the peer over (cluster.owner_lease). Default 10s.
	Duration time.Duration
	Store    Store
	Members  Membership
	// StateFile remembers the site's members across restarts (invariant
	// 3); "" keeps them in memory only.
	StateFile string
	Logger    *slog.Logger
}

// Validity is the share of Duration an owner trusts its own renewal for:
// the rest is the margin for clock rates and the taker's polling.
const Validity = 0.7

type seen struct {
	value string
	since time.Time // end of the first read that returned value
}

// Keeper is one node's lease and its view of the others'.
type Keeper struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	incarnation string

	mu        sync.Mutex
	counter   uint64
	renewedAt time.Time // start of the last successful renewal
	readAt    time.Time // end of the last successful read
	firstRead time.Time // end of the first successful read
	renewErr  error
	others    map[string]seen
	known     map[string]time.Time // members seen, not left, and when last alive (invariant 3)
	refusing  bool                 // MayWrite refused last time (logged once per change)
	// wasRefusing mirrors refusing for MayWrite's fast path, so that the
	// change back is logged.
	wasRefusing atomic.Bool
	refusals    atomic.Int64

	// view is what MayWrite reads without the lock: the start of the
	// last successful renewal and whether a majority was alive when the
	// members were last counted (refresh, every viewInterval).
	view atomic.Pointer[view]

	stop chan struct{}
	done chan struct{}
}

type view struct {
	renewedAt time.Time
	majority  bool
}

// viewInterval is how often the members are counted for MayWrite.
const viewInterval = 250 * time.Millisecond

// Status is the Keeper's state for the console and metrics.
type Status struct {
	Valid      bool      `json:"lease_valid"`
	RenewedAt  time.Time `json:"lease_renewed_at"`
	RenewError string    `json:"lease_error,omitempty"`
	SiteSize   int       `json:"site_size"`
	Alive      int       `json:"site_alive"`
	Majority   bool      `json:"site_majority"`
	MayWrite   bool      `json:"may_write"`
}

// Open starts a Keeper: it loads the remembered members, renews once
// (a failure is logged, not returned: the catalog may be away) and starts
// the renewal loop.
func Open(ctx context.Context, cfg Config) (*Keeper, error) {
	k, err := newKeeper(cfg)
	if err != nil {
		return nil, err
	}
	k.tick(ctx)
	go k.loop()
	return k, nil
}

func newKeeper(cfg Config) (*Keeper, error) {
	if cfg.Node == "" || cfg.Store == nil || cfg.Members == nil {
		return nil, errors.New("lease: Node, Store and Members are required")
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var inc [6]byte
	_, _ = rand.Read(inc[:])
	k := &Keeper{cfg: cfg, log: cfg.Logger.With("component", "lease"), now: time.Now,
		incarnation: hex.EncodeToString(inc[:]), others: map[string]seen{}, known: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := k.load(); err != nil {
		return nil, err
	}
	return k, nil
}

// Close stops the renewals. The lease then runs out by itself.
func (k *Keeper) Close(ctx context.Context) error {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *Keeper) interval() time.Duration { return k.cfg.Duration / 5 }

func (k *Keeper) loop() {
	defer close(k.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t := time.NewTicker(k.interval())
	defer t.Stop()
	v := time.NewTicker(viewInterval)
	defer v.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			k.tick(ctx)
		case <-v.C:
			k.mu.Lock()
			k.refresh()
			k.mu.Unlock()
		}
	}
}

// refresh recounts the members for MayWrite. Under mu.
func (k *Keeper) refresh() {
	size, alive := k.votes()
	k.view.Store(&view{renewedAt: k.renewedAt, majority: majority(size, alive, false)})
}

// tick renews this node's lease and reads everybody's.
func (k *Keeper) tick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*k.interval())
	defer cancel()
	k.mu.Lock()
	k.counter++
	value := k.incarnation + "." + strconv.FormatUint(k.counter, 10)
	k.mu.Unlock()
	start := k.now()
	err := k.cfg.Store.Renew(ctx, k.cfg.Node, value)
	k.mu.Lock()
	if err == nil {
		k.renewedAt = start
		if k.renewErr != nil {
			k.log.Info("lease renewed again", "node", k.cfg.Node)
		}
	} else if k.renewErr == nil {
		k.log.Warn("lease: renewal failed; this node keeps writing only while a majority of the site is alive",
			"err", err, "valid_for", time.Duration(float64(k.cfg.Duration)*Validity)-k.now().Sub(k.renewedAt))
	}
	k.renewErr = err
	k.mu.Unlock()

	leases, err := k.cfg.Store.Leases(ctx)
	end := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		k.readAt = end
		if k.firstRead.IsZero() {
			k.firstRead = end
		}
		for node, v := range leases {
			if s, ok := k.others[node]; !ok || s.value != v {
				k.others[node] = seen{value: v, since: end}
			}
		}
		for node := range k.others {
			if _, ok := leases[node]; !ok {
				// A lease that is gone is unchanged from now on.
				k.others[node] = seen{value: "", since: end}
			}
		}
	}
	k.remember()
	k.refresh()
}

// Forgotten is how long a member that is not heard stays in the site's
// size: as long as gossip lists a dead member (cluster), a day.
const Forgotten = 24 * time.Hour

// remember adds the members gossip lists now to the known ones, drops those
// that left or have not been alive for Forgotten, and saves the list when
// it changed (a member's last-alive time at most once a minute). Under mu.
func (k *Keeper) remember() {
	changed := false
	wall := time.Now()
	for _, m := range k.cfg.Members.Members() {
		last, ok := k.known[m.ID]
		switch {
		case m.ID == k.cfg.Node:
		case m.Left:
			if ok {
				delete(k.known, m.ID)
				changed = true
			}
		case !ok:
			k.known[m.ID] = wall
			changed = true
		case m.Alive && wall.Sub(last) > time.Minute:
			k.known[m.ID] = wall
			changed = true
		}
	}
	for id, last := range k.known {
		if wall.Sub(last) > Forgotten {
			delete(k.known, id)
			changed = true
		}
	}
	if changed {
		if err := k.save(); err != nil {
			k.log.Warn("lease: cannot remember the site's members", "file", k.cfg.StateFile, "err", err)
		}
	}
}

// Forget drops a member from the site for good (it was removed from the
// cluster by the operator).
func (k *Keeper) Forget(node string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.known, node)
	return k.save()
}

// state is StateFile's content: each member and when it was last alive.
type state struct {
	Members map[string]time.Time `json:"members"`
}

func (k *Keeper) load() error {
	if k.cfg.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(k.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("lease: %s: %w (delete the file to start the site's member list afresh)", k.cfg.StateFile, err)
	}
	for m, last := range st.Members {
		k.known[m] = last
	}
	return nil
}

func (k *Keeper) save() error {
	if k.cfg.StateFile == "" {
		return nil
	}
	b, _ := json.Marshal(state{Members: k.known})
	tmp := k.cfg.StateFile + ".tmp"
	if err := os.MkdirAll(filepath.Dir(tmp), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, k.cfg.StateFile)
}

// votes counts, under mu, the site's size and the members this node sees
// alive (itself included).
func (k *Keeper) votes() (size, alive int) {
	members := k.cfg.Members.Members()
	all := map[string]bool{k.cfg.Node: true}
	for m := range k.known {
		all[m] = true
	}
	alive = 1
	for _, m := range members {
		if m.Left || m.ID == k.cfg.Node {
			continue
		}
		all[m.ID] = true
		if m.Alive {
			alive++
		}
	}
	return len(all), alive
}

// majority tells whether alive members (plus the catalog's vote, on an
// even site, when witness is true) are a strict majority of the voters.
func majority(size, alive int, witness bool) bool {
	voters := size
	if size%2 == 0 {
		voters++
		if witness {
			alive++
		}
	}
	return 2*alive > voters
}

func (k *Keeper) leaseValid(now time.Time) bool { return k.valid(now, k.renewedAt) }

func (k *Keeper) valid(now, renewedAt time.Time) bool {
	return !renewedAt.IsZero() && now.Sub(renewedAt) < time.Duration(float64(k.cfg.Duration)*Validity)
}

// MayWrite tells whether this node may go on accepting records into the
// partitions it owns: nil, or an error wrapping ErrUnconfirmed that says
// why not.
func (k *Keeper) MayWrite() error {
	if v := k.view.Load(); v != nil && (v.majority || k.valid(k.now(), v.renewedAt)) && !k.wasRefusing.Load() {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	size, alive := k.votes()
	if k.leaseValid(now) || majority(size, alive, false) {
		if k.refusing {
			k.refusing = false
			k.wasRefusing.Store(false)
			k.log.Info("lease: writes accepted again", "lease_valid", k.leaseValid(now), "alive", alive, "site", size)
		}
		return nil
	}
	k.refusals.Add(1)
	err := fmt.Errorf("%w: the catalog lease lapsed %s ago (%v) and only %d of the site's %d members are reachable",
		ErrUnconfirmed, now.Sub(k.renewedAt).Round(time.Millisecond), k.renewErr, alive, size)
	if !k.refusing {
		k.refusing = true
		k.wasRefusing.Store(true)
		k.log.Error("lease: REFUSING writes: another node may take this node's partitions over", "err", err)
	}
	return err
}

// MayTakeOver tells whether this node may take node's partitions over:
// nil, or why not.
func (k *Keeper) MayTakeOver(node string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if k.readAt.IsZero() || now.Sub(k.readAt) > 2*k.interval()+k.cfg.Duration/10 {
		return fmt.Errorf("the catalog's leases could not be read recently (last read %s ago): %s's lease cannot be judged",
			now.Sub(k.readAt).Round(time.Millisecond), node)
	}
	s, ok := k.others[node]
	if !ok {
		// Never renewed (an older node, or one that died before it
		// could): absent, and so unchanged, since the first read.
		s = seen{since: k.firstRead}
	}
	if unchanged := now.Sub(s.since); unchanged < k.cfg.Duration {
		return fmt.Errorf("%s's lease in the catalog is live (renewed %s ago, expires after %s unchanged): it may still acknowledge",
			node, unchanged.Round(time.Millisecond), k.cfg.Duration)
	}
	size, alive := k.votes()
	if !majority(size, alive, true) {
		return fmt.Errorf("only %d of the site's %d members are alive here: a minority never takes over", alive, size)
	}
	return nil
}

// Status reports the Keeper's state.
func (k *Keeper) Status() Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	size, alive := k.votes()
	st := Status{Valid: k.leaseValid(now), RenewedAt: k.renewedAt, SiteSize: size, Alive: alive,
		Majority: majority(size, alive, false)}
	if k.renewErr != nil {
		st.RenewError = k.renewErr.Error()
	}
	st.MayWrite = st.Valid || st.Majority
	return st
}
