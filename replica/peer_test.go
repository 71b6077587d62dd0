package replica

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/peer"
	"github.com/tributary-io/tributary/wal"
)

// TestOverPeer replicates over real peer links on loopback: pipelined
// appends from many goroutines, then the replica's process goes away (the
// owner degrades) and comes back on a new port (the owner catches it up).
func TestOverPeer(t *testing.T) {
	var mu sync.Mutex
	members := map[string]Member{}
	list := func() []Member {
		mu.Lock()
		defer mu.Unlock()
		var out []Member
		for _, m := range members {
			out = append(out, m)
		}
		return out
	}
	open := func(id, dir string) (*peer.Peer, *Replicas, *wal.WAL) {
		p, err := peer.Listen(peer.Config{NodeID: id, Addr: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		w, err := wal.Open(wal.Options{Path: filepath.Join(dir, "wal.db"), NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Open(Config{NodeID: id, Dir: filepath.Join(dir, "replicas"), Factor: 2, Timeout: time.Second,
			Transport: PeerTransport(p), Members: memberFunc(list), Log: w, Owner: &testOwner{cat: newFakeCatalog(), node: id}, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		members[id] = Member{ID: id, Peer: p.Addr(), State: cluster.Alive}
		mu.Unlock()
		return p, r, w
	}
	closeAll := func(p *peer.Peer, r *Replicas, w *wal.WAL) {
		r.Close(context.Background())
		p.Close(context.Background())
		w.Close()
	}
	pa, ra, wa := open("a", t.TempDir())
	defer func() { closeAll(pa, ra, wa) }()
	bdir := t.TempDir()
	pb, rb, wb := open("b", bdir)

	appendSome := func(n int) error {
		recs := make([]*tributary.Record, n)
		for i := range recs {
			recs[i] = &tributary.Record{Stream: "s.t", Partition: 1, Topic: "t", Value: []byte(fmt.Sprint(i)), Source: "mqtt"}
		}
		if err := wa.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: recs}).Err; err != nil {
			return err
		}
		return ra.Replicate(context.Background(), recs)
	}
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				if err := appendSome(5); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	s, _ := rb.storeOf("a")
	w, _ := s.wal()
	if ps, _ := w.Partition("s.t", 1); ps.Next != 1600 {
		t.Fatalf("replica next %d, want 1600", ps.Next)
	}
	if st := ra.Stats(); st.Degraded || st.ReplicatedRecords != 1600 {
		t.Fatalf("owner stats %+v", st)
	}

	closeAll(pb, rb, wb)
	if err := appendSome(3); err != nil {
		t.Fatal(err)
	}
	if !ra.Stats().Degraded {
		t.Fatal("not degraded with the replica gone")
	}
	pb, rb, wb = open("b", bdir) // back, on a new port
	defer func() { closeAll(pb, rb, wb) }()
	testkit.Eventually(t, 10*time.Second, "the owner to see the replica back", func() bool { return appendSome(1) == nil && !ra.Stats().Degraded })
	s, _ = rb.storeOf("a")
	w, _ = s.wal()
	own, _ := wa.Partition("s.t", 1)
	if ps, _ := w.Partition("s.t", 1); ps.Next != own.Next {
		t.Fatalf("replica next %d, owner %d", ps.Next, own.Next)
	}
}
