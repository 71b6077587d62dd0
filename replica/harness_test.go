package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/internal/fault"
	"github.com/tributary-io/tributary/wal"
)

// fakeNet is an in-process stand-in for package peer in this package's
// unit tests: ordered, pipelined delivery per (from, to) link, links that
// can be cut, handlers invoked in arrival order.
type fakeNet struct {
	mu    sync.Mutex
	nodes map[string]*fakePeer // by address
	cut   map[string]bool      // addresses unreachable
}

var errFakeDown = errors.New("fake link down")

type fakePeer struct {
	net      *fakeNet
	id, addr string
	mu       sync.Mutex
	handlers map[uint8]func(string, []byte, func([]byte, error))
	links    map[string]chan func()
}

func (n *fakeNet) peer(id string) *fakePeer {
	p := &fakePeer{net: n, id: id, addr: "addr-" + id, handlers: map[uint8]func(string, []byte, func([]byte, error)){},
		links: map[string]chan func(){}}
	n.mu.Lock()
	n.nodes[p.addr] = p
	n.mu.Unlock()
	return p
}

func (n *fakeNet) setCut(addr string, on bool) {
	n.mu.Lock()
	n.cut[addr] = on
	n.mu.Unlock()
}

func (p *fakePeer) Handle(typ uint8, h func(string, []byte, func([]byte, error))) {
	p.mu.Lock()
	p.handlers[typ] = h
	p.mu.Unlock()
}

func (p *fakePeer) Go(id, addr string, typ uint8, payload []byte, done func([]byte, error)) {
	p.net.mu.Lock()
	dst, cut := p.net.nodes[addr], p.net.cut[addr] || p.net.cut[p.addr]
	p.net.mu.Unlock()
	if dst == nil || cut || dst.id != id {
		done(nil, errFakeDown) // synchronously, as a link may
		return
	}
	p.mu.Lock()
	ch := p.links[addr]
	if ch == nil {
		ch = make(chan func(), 1024)
		p.links[addr] = ch
		go func() {
			for f := range ch {
				f()
			}
		}()
	}
	p.mu.Unlock()
	body := append([]byte(nil), payload...)
	ch <- func() {
		dst.mu.Lock()
		h := dst.handlers[typ]
		dst.mu.Unlock()
		if typ == 0 { // ping
			done(nil, nil)
			return
		}
		if h == nil {
			done(nil, fmt.Errorf("no handler for %d", typ))
			return
		}
		var once sync.Once
		h(p.id, body, func(resp []byte, err error) { once.Do(func() { done(resp, err) }) })
	}
}

func (p *fakePeer) Ping(ctx context.Context, id, addr string) error {
	_, err := p.Call(ctx, id, addr, 0, nil)
	return err
}

func (p *fakePeer) Call(ctx context.Context, id, addr string, typ uint8, payload []byte) ([]byte, error) {
	type res struct {
		b   []byte
		err error
	}
	ch := make(chan res, 1)
	p.Go(id, addr, typ, payload, func(b []byte, err error) { ch <- res{b, err} })
	select {
	case r := <-ch:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fakeCatalog is the ownership part of the catalog in memory.
type fakeCatalog struct {
	mu        sync.Mutex
	failMarks fault.Faults // scripts HighWaters' failures
	owner     map[pkey]string
	epoch     map[pkey]int64
	marks     map[pkey]int64
	takers    []string
	starts    []int64 // the start of every take-over tried
}

func newFakeCatalog() *fakeCatalog {
	return &fakeCatalog{owner: map[pkey]string{}, epoch: map[pkey]int64{}, marks: map[pkey]int64{}}
}

func (c *fakeCatalog) TakeOver(ctx context.Context, stream string, p int32, from, to string) (int64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pk := pkey{stream, p}
	if c.owner[pk] != from {
		return 0, false, nil
	}
	c.owner[pk] = to
	c.epoch[pk]++
	c.takers = append(c.takers, to)
	return c.epoch[pk], true, nil
}

func (c *fakeCatalog) Owner(ctx context.Context, stream string, p int32) (string, int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owner[pkey{stream, p}], c.epoch[pkey{stream, p}], nil
}

func (c *fakeCatalog) HighWaters(ctx context.Context, stream string) (map[int32]int64, error) {
	if err := c.failMarks.Do(ctx, func() error { return nil }); err != nil {
		return nil, fmt.Errorf("catalog unreachable (test): %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int32]int64{}
	for pk, m := range c.marks {
		if pk.stream == stream {
			out[pk.partition] = m
		}
	}
	return out, nil
}

// testOwner is the node's ownership book for the tests: the catalog's
// decisions from fakeCatalog, the node's side from hooks a test may set.
type testOwner struct {
	cat  *fakeCatalog
	node string

	mu     sync.Mutex
	claim  func(stream string, p int32) func()
	adopt  func(stream string, p int32, epoch, next int64) error
	epoch  func(stream string, p int32) (int64, bool)
	fenced func(stream string, p int32)
}

func (o *testOwner) set(f func(o *testOwner)) {
	o.mu.Lock()
	f(o)
	o.mu.Unlock()
}

func (o *testOwner) Claim(stream string, p int32) func() {
	o.mu.Lock()
	f := o.claim
	o.mu.Unlock()
	if f == nil {
		return func() {}
	}
	return f(stream, p)
}

func (o *testOwner) TakeOver(ctx context.Context, stream string, p int32, from string, start int64) (int64, bool, error) {
	o.cat.mu.Lock()
	o.cat.starts = append(o.cat.starts, start)
	o.cat.mu.Unlock()
	return o.cat.TakeOver(ctx, stream, p, from, o.node)
}

func (o *testOwner) Owner(ctx context.Context, stream string, p int32) (string, int64, error) {
	return o.cat.Owner(ctx, stream, p)
}

func (o *testOwner) HighWaters(ctx context.Context, stream string) (map[int32]int64, error) {
	return o.cat.HighWaters(ctx, stream)
}

func (o *testOwner) Adopt(stream string, p int32, epoch, next int64) error {
	o.mu.Lock()
	f := o.adopt
	o.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(stream, p, epoch, next)
}

func (o *testOwner) Epoch(stream string, p int32) (int64, bool) {
	o.mu.Lock()
	f := o.epoch
	o.mu.Unlock()
	if f == nil {
		return 0, false
	}
	return f(stream, p)
}

func (o *testOwner) Fenced(stream string, p int32) {
	o.mu.Lock()
	f := o.fenced
	o.mu.Unlock()
	if f != nil {
		f(stream, p)
	}
}

// memberFunc lists members for Config.Members.
type memberFunc func() []Member

func (f memberFunc) Members() []Member { return f() }

func (c *fakeCatalog) setMark(stream string, p int32, mark int64) {
	c.mu.Lock()
	c.marks[pkey{stream, p}] = mark
	c.mu.Unlock()
}

// testNode is one node of an in-process cluster.
type testNode struct {
	id      string
	peer    *fakePeer
	main    *wal.WAL
	r       *Replicas
	owner   *testOwner
	adopted chan pkey
	fenced  chan pkey
}

type testCluster struct {
	t       *testing.T
	net     *fakeNet
	cat     *fakeCatalog
	mu      sync.Mutex
	members map[string]Member
	nodes   map[string]*testNode
	// tapDelay is the main WALs' TestTapDelay for nodes started from now.
	tapDelay time.Duration
}

func newTestCluster(t *testing.T, factor int, policy Policy, ids ...string) *testCluster {
	tc := &testCluster{t: t, net: &fakeNet{nodes: map[string]*fakePeer{}, cut: map[string]bool{}}, cat: newFakeCatalog(),
		members: map[string]Member{}, nodes: map[string]*testNode{}}
	for _, id := range ids {
		tc.members[id] = Member{ID: id, Peer: "addr-" + id, State: cluster.Alive}
	}
	for _, id := range ids {
		tc.start(id, factor, policy, t.TempDir())
	}
	return tc
}

func (tc *testCluster) start(id string, factor int, policy Policy, dir string) *testNode {
	t := tc.t
	main, err := wal.Open(wal.Options{Path: filepath.Join(dir, "wal", "wal.db"), NoSync: true, TestTapDelay: tc.tapDelay})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{id: id, peer: tc.net.peer(id), main: main, adopted: make(chan pkey, 16), fenced: make(chan pkey, 16)}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
	n.owner = &testOwner{cat: tc.cat, node: id,
		adopt:  func(s string, p int32, e, next int64) error { n.adopted <- pkey{s, p}; return nil },
		fenced: func(s string, p int32) { n.fenced <- pkey{s, p} }}
	n.r, err = Open(Config{NodeID: id, Dir: filepath.Join(dir, "replicas"), Factor: factor, Policy: policy,
		Timeout: 500 * time.Millisecond, Grace: 300 * time.Millisecond, Transport: n.peer, Members: memberFunc(tc.memberList),
		Log: main, Owner: n.owner, Logger: logger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	tc.mu.Lock()
	tc.nodes[id] = n
	tc.mu.Unlock()
	t.Cleanup(func() { n.close() })
	return n
}

func (n *testNode) close() {
	n.r.Close(context.Background())
	n.main.Close()
}

func (tc *testCluster) memberList() []Member {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	out := make([]Member, 0, len(tc.members))
	for _, m := range tc.members {
		out = append(out, m)
	}
	return out
}

func (tc *testCluster) setState(id string, st cluster.State) {
	tc.mu.Lock()
	m := tc.members[id]
	m.State = st
	tc.members[id] = m
	tc.mu.Unlock()
	for _, n := range tc.nodes { // forget the cached ring
		n.r.ringMu.Lock()
		n.r.ringAt = time.Time{}
		n.r.ringMu.Unlock()
	}
}

// ingest appends n records to the node's partition p of stream "s.t"
// and replicates them, as the node's ingest does.
func (n *testNode) ingest(t *testing.T, p int32, count int, epoch int64) error {
	t.Helper()
	recs := make([]*tributary.Record, count)
	for i := range recs {
		recs[i] = &tributary.Record{Stream: "s.t", Partition: p, Epoch: epoch, Topic: "t", Value: []byte(fmt.Sprintf("%s-%d", n.id, i)), Source: "mqtt", Node: n.id}
	}
	if err := n.main.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: recs}).Err; err != nil {
		t.Fatal(err)
	}
	return n.r.Replicate(context.Background(), recs)
}

// stored lists the offsets a node holds as replica of origin for (s.t, p).
func (n *testNode) stored(t *testing.T, origin string, p int32) (released, next int64) {
	t.Helper()
	s, err := n.r.storeOf(origin)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.wal()
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range w.Partitions() {
		if ps.Stream == "s.t" && ps.Partition == p {
			return ps.Released, ps.Next
		}
	}
	return 0, 0
}
