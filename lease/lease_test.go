package lease

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
)

// site is an in-memory catalog and gossip view for a few Keepers sharing
// one fake clock: reach[node] false cuts the node from the catalog, and
// sees[a][b] false makes b look dead to a.
type site struct {
	mu     sync.Mutex
	clock  time.Time
	leases map[string]string
	reach  map[string]bool
	sees   map[string]map[string]bool
	nodes  []string
}

func newSite(nodes ...string) *site {
	s := &site{clock: time.Unix(1000, 0), leases: map[string]string{}, reach: map[string]bool{}, sees: map[string]map[string]bool{}, nodes: nodes}
	for _, a := range nodes {
		s.reach[a] = true
		s.sees[a] = map[string]bool{}
		for _, b := range nodes {
			s.sees[a][b] = true
		}
	}
	return s
}

func (s *site) now() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.clock }

func (s *site) advance(d time.Duration) { s.mu.Lock(); s.clock = s.clock.Add(d); s.mu.Unlock() }

// cut isolates node from every other member, and from the catalog too
// when catalog is true.
func (s *site) cut(node string, catalog bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.nodes {
		if o != node {
			s.sees[node][o], s.sees[o][node] = false, false
		}
	}
	if catalog {
		s.reach[node] = false
	}
}

type nodeStore struct {
	s    *site
	node string
}

var errCut = errors.New("catalog unreachable")

func (n nodeStore) Leases(context.Context) (map[string]string, error) {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	if !n.s.reach[n.node] {
		return nil, errCut
	}
	out := map[string]string{}
	for k, v := range n.s.leases {
		out[k] = v
	}
	return out, nil
}

func (n nodeStore) Renew(_ context.Context, node, value string) error {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	if !n.s.reach[n.node] {
		return errCut
	}
	n.s.leases[node] = value
	return nil
}

func (n nodeStore) Members() []Member {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	var out []Member
	for _, o := range n.s.nodes {
		out = append(out, Member{ID: o, Alive: n.s.sees[n.node][o]})
	}
	return out
}

func (s *site) keeper(t *testing.T, node, stateFile string) *Keeper {
	t.Helper()
	ns := nodeStore{s, node}
	k, err := newKeeper(Config{Node: node, Duration: 10 * time.Second, Store: ns, Members: ns, StateFile: stateFile})
	if err != nil {
		t.Fatal(err)
	}
	k.now = s.now
	return k
}

// run ticks every keeper once per renewal interval for d.
func run(s *site, d time.Duration, ks ...*Keeper) {
	step := ks[0].interval()
	for t := time.Duration(0); t < d; t += step {
		for _, k := range ks {
			k.tick(context.Background())
		}
		s.advance(step)
	}
}

func TestHealthySiteNobodyTakesOver(t *testing.T) {
	s := newSite("a", "b", "c")
	a, b, c := s.keeper(t, "a", ""), s.keeper(t, "b", ""), s.keeper(t, "c", "")
	run(s, time.Minute, a, b, c)
	for _, k := range []*Keeper{a, b, c} {
		if err := k.MayWrite(); err != nil {
			t.Fatalf("%s: MayWrite: %v", k.cfg.Node, err)
		}
	}
	if err := a.MayTakeOver("c"); err == nil {
		t.Fatal("a may take over c while c renews its lease")
	}
}

// The cut the issue measured: one node isolated from its peers but still
// reaching the catalog. It keeps its own partitions (its lease is live,
// so the majority must not take it over) and it never wins a takeover of
// a majority node's partitions (it is a minority, and their leases are
// live).
func TestIsolatedNodeReachingCatalog(t *testing.T) {
	s := newSite("a", "b", "c")
	a, b, c := s.keeper(t, "a", ""), s.keeper(t, "b", ""), s.keeper(t, "c", "")
	run(s, 5*time.Second, a, b, c)
	s.cut("c", false)
	run(s, 2*time.Minute, a, b, c)
	if err := c.MayWrite(); err != nil {
		t.Fatalf("isolated c with a live lease must keep writing its own partitions: %v", err)
	}
	for _, o := range []string{"a", "b"} {
		if err := c.MayTakeOver(o); err == nil {
			t.Fatalf("minority c may take over %s", o)
		}
	}
	if err := a.MayTakeOver("c"); err == nil {
		t.Fatal("majority may take over c, whose lease is live")
	}
}

// A node cut from everything stops writing before anyone may take it
// over, and the majority then may.
func TestOwnerStopsBeforeTakeover(t *testing.T) {
	for _, size := range []int{2, 3, 5} {
		nodes := []string{"a", "b", "c", "d", "e"}[:size]
		s := newSite(nodes...)
		var ks []*Keeper
		for _, n := range nodes {
			ks = append(ks, s.keeper(t, n, ""))
		}
		run(s, 5*time.Second, ks...)
		s.cut("a", true)
		owner, taker := ks[0], ks[1]
		var stopped, took time.Time
		step := 100 * time.Millisecond
		for i := 0; i < 600 && took.IsZero(); i++ {
			if i%int(owner.interval()/step) == 0 {
				for _, k := range ks {
					k.tick(context.Background())
				}
			}
			if stopped.IsZero() && owner.MayWrite() != nil {
				stopped = s.now()
			}
			if took.IsZero() && taker.MayTakeOver("a") == nil {
				took = s.now()
			}
			s.advance(step)
		}
		if took.IsZero() {
			t.Fatalf("%d nodes: the majority never may take the dead node over", size)
		}
		if stopped.IsZero() || !stopped.Before(took) {
			t.Fatalf("%d nodes: owner stopped writing at %v, takeover allowed at %v", size, stopped, took)
		}
		t.Logf("%d nodes: owner stopped %s before the takeover was allowed", size, took.Sub(stopped))
		if err := owner.MayWrite(); !errors.Is(err, ErrUnconfirmed) || !errors.Is(err, tributary.ErrFenced) {
			t.Fatalf("refusal %v: want ErrUnconfirmed wrapping tributary.ErrFenced", err)
		}
		if err := owner.MayTakeOver("b"); err == nil {
			t.Fatalf("%d nodes: the cut-off node may take over", size)
		}
	}
}

// The whole site cut from the catalog keeps writing (store and forward)
// on the majority's word, and nobody may take anybody over.
func TestSiteCutFromCatalog(t *testing.T) {
	s := newSite("a", "b", "c")
	a, b, c := s.keeper(t, "a", ""), s.keeper(t, "b", ""), s.keeper(t, "c", "")
	run(s, 5*time.Second, a, b, c)
	for _, n := range []string{"a", "b", "c"} {
		s.reach[n] = false
	}
	run(s, 5*time.Minute, a, b, c)
	for _, k := range []*Keeper{a, b, c} {
		if err := k.MayWrite(); err != nil {
			t.Fatalf("%s: %v", k.cfg.Node, err)
		}
		if err := k.MayTakeOver("a"); err == nil {
			t.Fatalf("%s may take over without reading the catalog", k.cfg.Node)
		}
	}
}

// A 2-node site: the catalog is the witness.
func TestTwoNodesWitness(t *testing.T) {
	s := newSite("a", "b")
	a, b := s.keeper(t, "a", ""), s.keeper(t, "b", "")
	run(s, 5*time.Second, a, b)
	// Cut from each other, both reach the catalog: both keep writing,
	// neither takes the other over.
	s.cut("a", false)
	run(s, time.Minute, a, b)
	if a.MayWrite() != nil || b.MayWrite() != nil {
		t.Fatal("both halves of a 2-node site reaching the catalog must keep writing")
	}
	if a.MayTakeOver("b") == nil || b.MayTakeOver("a") == nil {
		t.Fatal("a takeover of a node renewing its lease")
	}
	// a loses the catalog too: it stops, and b (with the catalog's vote)
	// may take it over.
	s.reach["a"] = false
	run(s, 15*time.Second, a, b)
	if err := a.MayWrite(); err == nil {
		t.Fatal("a, cut from b and the catalog, still writes")
	}
	if err := b.MayTakeOver("a"); err != nil {
		t.Fatalf("b with the catalog's vote: %v", err)
	}
}

// A node that restarts alone remembers the site's size: it is not a
// majority of one.
func TestRememberedSiteSize(t *testing.T) {
	file := filepath.Join(t.TempDir(), "site.json")
	s := newSite("a", "b", "c")
	a := s.keeper(t, "a", file)
	b, c := s.keeper(t, "b", ""), s.keeper(t, "c", "")
	run(s, 3*time.Second, a, b, c)
	// a restarts, alone and cut from the catalog; gossip knows only a.
	s2 := newSite("a")
	s2.reach["a"] = false
	a2 := s2.keeper(t, "a", file)
	run(s2, 5*time.Second, a2)
	if err := a2.MayWrite(); err == nil {
		t.Fatal("a restarted alone counts itself a majority")
	}
	if st := a2.Status(); st.SiteSize != 3 {
		t.Fatalf("site size %d, want 3 (remembered)", st.SiteSize)
	}
	// A member that left gracefully no longer counts.
	if err := a2.Forget("b"); err != nil {
		t.Fatal(err)
	}
	if err := a2.Forget("c"); err != nil {
		t.Fatal(err)
	}
	if err := a2.MayWrite(); err != nil {
		t.Fatalf("a single-node site: %v", err)
	}
}

// A node that never renewed a lease (an older version) can be taken over
// once it has been absent for a whole Duration.
func TestAbsentLease(t *testing.T) {
	s := newSite("a", "b", "c")
	b, c := s.keeper(t, "b", ""), s.keeper(t, "c", "")
	s.cut("a", true)
	run(s, 5*time.Second, b, c)
	if err := b.MayTakeOver("a"); err == nil {
		t.Fatal("took over after 5s of an absent lease")
	}
	run(s, 6*time.Second, b, c)
	if err := b.MayTakeOver("a"); err != nil {
		t.Fatalf("absent for 11s: %v", err)
	}
}

// A minority never wins, even reading the catalog and seeing the dead
// node's lease run out.
func TestMinorityNeverWins(t *testing.T) {
	s := newSite("a", "b", "c", "d", "e")
	var ks []*Keeper
	for _, n := range s.nodes {
		ks = append(ks, s.keeper(t, n, ""))
	}
	run(s, 5*time.Second, ks...)
	s.cut("a", true)  // dead
	s.cut("e", false) // isolated, reaching the catalog
	run(s, time.Minute, ks...)
	if err := ks[4].MayTakeOver("a"); err == nil {
		t.Fatal("isolated e (1 of 5) may take over dead a")
	}
	if err := ks[1].MayTakeOver("a"); err != nil {
		t.Fatalf("b, c, d (3 of 5) may not take over dead a: %v", err)
	}
	if err := ks[4].MayWrite(); err != nil {
		t.Fatalf("e renews its lease and keeps its own partitions: %v", err)
	}
}
