package mqtt

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// localInterest is this node's subscription interest: for every filter
// (shared ones as "$share/g/f"), how many sessions subscribe to it.
//
// Invariants: counts[f].n is the number of clients whose filter set holds
// f; every change bumps version and stamps the filter with it, and a
// filter that drops to zero stays as a tombstone (n = 0) so a delta since
// any version >= floor lists every filter changed since, removals
// included. Tombstones beyond maxTombstones are pruned oldest first, which
// raises floor: a peer behind floor gets the full set instead.
type localInterest struct {
	mu      sync.Mutex
	clients map[string]map[string]struct{} // client id -> filters
	counts  map[string]*filterCount
	version uint64
	floor   uint64
	shared  atomic.Int64 // filters with n > 0 that are shared subscriptions
	changed func()       // called (without mu) after a change
}

type filterCount struct {
	n       uint32
	changed uint64 // version of the last change
}

const (
	maxTombstones    = 4096
	maxGroupCounters = 1 << 16
)

func newLocalInterest(changed func()) *localInterest {
	return &localInterest{clients: map[string]map[string]struct{}{}, counts: map[string]*filterCount{}, changed: changed}
}

// setClient makes filters the client's whole subscription set (empty:
// the client has none) and reports whether the interest changed.
func (l *localInterest) setClient(id string, filters []string) bool {
	l.mu.Lock()
	old := l.clients[id]
	next := make(map[string]struct{}, len(filters))
	for _, f := range filters {
		next[f] = struct{}{}
	}
	changed := false
	for f := range old {
		if _, ok := next[f]; !ok {
			l.bump(f, -1)
			changed = true
		}
	}
	for f := range next {
		if _, ok := old[f]; !ok {
			l.bump(f, +1)
			changed = true
		}
	}
	if len(next) == 0 {
		delete(l.clients, id)
	} else {
		l.clients[id] = next
	}
	if changed {
		l.prune()
	}
	l.mu.Unlock()
	if changed && l.changed != nil {
		l.changed()
	}
	return changed
}

func (l *localInterest) bump(f string, d int) {
	l.version++
	c := l.counts[f]
	if c == nil {
		c = &filterCount{}
		l.counts[f] = c
	}
	was := c.n
	c.n = uint32(int(c.n) + d)
	c.changed = l.version
	if mochi.IsSharedFilter(f) && (was == 0) != (c.n == 0) {
		if c.n == 0 {
			l.shared.Add(-1)
		} else {
			l.shared.Add(1)
		}
	}
}

// hasShared reports whether any local session has a shared subscription.
func (l *localInterest) hasShared() bool { return l.shared.Load() > 0 }

// prune drops the oldest tombstones beyond maxTombstones.
func (l *localInterest) prune() {
	var dead []uint64
	for _, c := range l.counts {
		if c.n == 0 {
			dead = append(dead, c.changed)
		}
	}
	if len(dead) <= maxTombstones {
		return
	}
	slices.Sort(dead)
	cut := dead[len(dead)-maxTombstones-1]
	for f, c := range l.counts {
		if c.n == 0 && c.changed <= cut {
			delete(l.counts, f)
		}
	}
	l.floor = max(l.floor, cut)
}

// full is the whole interest at the current version.
func (l *localInterest) full() (uint64, []interestEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]interestEntry, 0, len(l.counts))
	for f, c := range l.counts {
		if c.n > 0 {
			out = append(out, interestEntry{Filter: f, Count: c.n})
		}
	}
	sortEntries(out)
	return l.version, out
}

// delta lists the filters changed after base with their current counts;
// ok is false when base is older than the retained tombstones allow.
func (l *localInterest) delta(base uint64) (version uint64, entries []interestEntry, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if base < l.floor || base > l.version {
		return l.version, nil, false
	}
	for f, c := range l.counts {
		if c.changed > base {
			entries = append(entries, interestEntry{Filter: f, Count: c.n})
		}
	}
	sortEntries(entries)
	return l.version, entries, true
}

func (l *localInterest) currentVersion() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version
}

func sortEntries(es []interestEntry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Filter < es[j].Filter })
}

// remoteInterest is what the peers said about their subscriptions: per
// node its run (epoch), the version it last told us and its filters, all
// indexed in one mochi topic tree in which the "client" of a subscription
// is the node id, so matching follows exactly the rules local delivery
// uses (wildcards, "$" topics, shared filters).
//
// Invariants: the tree holds exactly the filters in nodes[*].filters; a
// delta is applied only on top of the same run at a version >= its base
// (entries carry absolute counts, so re-applying one is harmless); a
// node removed from the cluster is dropped entirely.
type remoteInterest struct {
	mu    sync.Mutex
	idx   *mochi.TopicsIndex
	nodes map[string]*remoteNode
	total int // sum of counts over every node and filter
}

type remoteNode struct {
	epoch, version uint64
	filters        map[string]uint32
}

func newRemoteInterest() *remoteInterest {
	return &remoteInterest{idx: mochi.NewTopicsIndex(), nodes: map[string]*remoteNode{}}
}

// apply applies a node's interest message and reports whether the node
// must send its full set instead (a delta from another run or from a
// version we never had).
func (r *remoteInterest) apply(node string, m interestMsg) (needFull bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[node]
	if !m.Full {
		if n == nil || n.epoch != m.Epoch || m.Base > n.version {
			return true
		}
		for _, e := range m.Entries {
			r.set(node, n, e.Filter, e.Count)
		}
		n.version = max(n.version, m.Version)
		return false
	}
	if n == nil {
		n = &remoteNode{filters: map[string]uint32{}}
		r.nodes[node] = n
	}
	keep := make(map[string]bool, len(m.Entries))
	for _, e := range m.Entries {
		keep[e.Filter] = true
		r.set(node, n, e.Filter, e.Count)
	}
	for f := range n.filters {
		if !keep[f] {
			r.set(node, n, f, 0)
		}
	}
	n.epoch, n.version = m.Epoch, m.Version
	return false
}

func (r *remoteInterest) set(node string, n *remoteNode, filter string, count uint32) {
	if !mochi.IsValidFilter(filter, false) {
		return // never from a well-behaved peer; mochi would misindex it
	}
	old, had := n.filters[filter]
	r.total += int(count) - int(old)
	if count == 0 {
		if had {
			delete(n.filters, filter)
			r.idx.Unsubscribe(filter, node)
		}
		return
	}
	n.filters[filter] = count
	// Identifier carries the count: mochi keeps a shared subscription's
	// value per (group, client) as given, which is what selection reads.
	r.idx.Subscribe(node, packets.Subscription{Filter: filter, Identifier: int(count)})
}

// drop forgets a node (it left, died, or its link was replaced).
func (r *remoteInterest) drop(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[node]
	if n == nil {
		return
	}
	for f := range n.filters {
		r.set(node, n, f, 0)
	}
	delete(r.nodes, node)
}

// keepOnly drops every node for which live is false.
func (r *remoteInterest) keepOnly(live func(node string) bool) {
	r.mu.Lock()
	var gone []string
	for id := range r.nodes {
		if !live(id) {
			gone = append(gone, id)
		}
	}
	r.mu.Unlock()
	for _, id := range gone {
		r.drop(id)
	}
}

// epoch is the run of node we hold interest from (0: none).
func (r *remoteInterest) epoch(node string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.nodes[node]; n != nil {
		return n.epoch
	}
	return 0
}

// match returns the nodes with an ordinary subscription matching topic
// and, per shared filter matching it, each node's subscriber count.
func (r *remoteInterest) match(topic string) (plain map[string]bool, shared map[string]map[string]int) {
	subs := r.idx.Subscribers(topic)
	plain = make(map[string]bool, len(subs.Subscriptions))
	for node := range subs.Subscriptions {
		plain[node] = true
	}
	if len(subs.Shared) > 0 {
		shared = make(map[string]map[string]int, len(subs.Shared))
		for group, bynode := range subs.Shared {
			m := make(map[string]int, len(bynode))
			for node, sub := range bynode {
				m[node] = sub.Identifier
			}
			shared[group] = m
		}
	}
	return plain, shared
}

// count is the number of remote subscriptions (sum of every node's counts).
func (r *remoteInterest) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// route is where one publish goes: the shared groups this node delivers
// it to, and per peer node the groups that node delivers it to (a node
// listed with no groups delivers it to its ordinary subscribers only).
type route struct {
	local  []string
	remote map[string][]string
}

// balancer decides routes. Shared groups are balanced by weighted round
// robin: each group has a counter, and message k of the group goes to the
// node holding subscriber k mod total in node-id order (this node's id
// included), so nodes get shares proportional to their subscribers.
type balancer struct {
	self string
	mu   sync.Mutex
	next map[string]uint64 // group -> messages routed so far
}

func newBalancer(self string) *balancer { return &balancer{self: self, next: map[string]uint64{}} }

// route computes where a publish to topic goes, given the remote match,
// this node's shared subscriber counts per group (localShared) and the
// live peers (a node not in live is never chosen). Retained publishes go
// to every live peer.
func (rt *balancer) route(retain bool, plain map[string]bool, shared map[string]map[string]int,
	localShared map[string]int, live []string) route {
	var r route
	isLive := make(map[string]bool, len(live))
	for _, id := range live {
		isLive[id] = true
	}
	add := func(node string) {
		if r.remote == nil {
			r.remote = map[string][]string{}
		}
		if _, ok := r.remote[node]; !ok {
			r.remote[node] = nil
		}
	}
	if retain {
		for _, id := range live {
			add(id)
		}
	}
	for node := range plain {
		if isLive[node] {
			add(node)
		}
	}
	groups := make(map[string]bool, len(shared)+len(localShared))
	for g := range shared {
		groups[g] = true
	}
	for g := range localShared {
		groups[g] = true
	}
	if len(groups) == 0 {
		return r
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.next) > maxGroupCounters {
		clear(rt.next) // groups come and go: restart the rotation rather than grow
	}
	for g := range groups {
		type cand struct {
			node string
			n    int
		}
		var cands []cand
		total := 0
		if n := localShared[g]; n > 0 {
			cands = append(cands, cand{rt.self, n})
			total += n
		}
		for node, n := range shared[g] {
			if n > 0 && isLive[node] && node != rt.self {
				cands = append(cands, cand{node, n})
				total += n
			}
		}
		if total == 0 {
			continue
		}
		sort.Slice(cands, func(i, j int) bool { return cands[i].node < cands[j].node })
		k := int(rt.next[g] % uint64(total))
		rt.next[g]++
		for _, c := range cands {
			if k < c.n {
				if c.node == rt.self {
					r.local = append(r.local, g)
				} else {
					add(c.node)
					r.remote[c.node] = append(r.remote[c.node], g)
				}
				break
			}
			k -= c.n
		}
	}
	sort.Strings(r.local)
	for _, gs := range r.remote {
		sort.Strings(gs)
	}
	return r
}
