package mqtt

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

func entries(es []interestEntry) map[string]uint32 {
	m := map[string]uint32{}
	for _, e := range es {
		m[e.Filter] = e.Count
	}
	return m
}

func TestLocalInterestCountsAndDeltas(t *testing.T) {
	changes := 0
	l := newLocalInterest(func() { changes++ })
	l.setClient("a", []string{"x/#", "$share/g/y/+"})
	l.setClient("b", []string{"x/#"})
	v1, full := l.full()
	if want := map[string]uint32{"x/#": 2, "$share/g/y/+": 1}; !maps.Equal(entries(full), want) {
		t.Fatalf("full = %v, want %v", entries(full), want)
	}
	if !l.hasShared() {
		t.Fatal("hasShared false with a shared subscriber")
	}
	// Re-stating the same set changes nothing.
	if l.setClient("b", []string{"x/#"}) || changes != 2 {
		t.Fatalf("same set reported a change (changes %d)", changes)
	}
	l.setClient("a", []string{"x/#"}) // drops the shared filter
	l.setClient("b", nil)             // disconnect of a clean session
	v2, delta, ok := l.delta(v1)
	if !ok || v2 <= v1 {
		t.Fatalf("delta(%d) = %d, ok %v", v1, v2, ok)
	}
	if want := map[string]uint32{"x/#": 1, "$share/g/y/+": 0}; !maps.Equal(entries(delta), want) {
		t.Fatalf("delta = %v, want %v (a removal is count 0)", entries(delta), want)
	}
	if l.hasShared() {
		t.Fatal("hasShared true after the last shared subscriber left")
	}
	if _, d, ok := l.delta(v2); !ok || len(d) != 0 {
		t.Fatalf("delta at current version = %v, %v; want empty, ok", d, ok)
	}
	if _, _, ok := l.delta(v2 + 1); ok {
		t.Fatal("delta from a future version accepted")
	}
}

func TestLocalInterestPrunesTombstones(t *testing.T) {
	l := newLocalInterest(nil)
	for i := range maxTombstones + 10 {
		f := fmt.Sprintf("t/%d", i)
		l.setClient("c", []string{f})
	}
	l.setClient("c", nil)
	if _, _, ok := l.delta(0); ok {
		t.Fatal("delta from version 0 accepted after tombstones were pruned")
	}
	v, full := l.full()
	if len(full) != 0 {
		t.Fatalf("full after everyone left = %v", full)
	}
	if _, d, ok := l.delta(v); !ok || len(d) != 0 {
		t.Fatalf("delta at current version: %v %v", d, ok)
	}
}

func TestRemoteInterestApplyAndMatch(t *testing.T) {
	r := newRemoteInterest()
	if !r.apply("n2", interestMsg{Epoch: 7, Base: 0, Version: 3}) {
		t.Fatal("delta for an unknown node accepted; want need-full")
	}
	r.apply("n2", interestMsg{Full: true, Epoch: 7, Version: 3, Entries: []interestEntry{
		{"plant/+/temp", 2}, {"$share/g/plant/#", 3}, {"#", 1}}})
	r.apply("n3", interestMsg{Full: true, Epoch: 9, Version: 1, Entries: []interestEntry{{"$share/g/plant/#", 1}, {"other", 1}}})
	if got := r.count(); got != 8 {
		t.Fatalf("count = %d, want 8", got)
	}
	plain, shared := r.match("plant/a/temp")
	if !plain["n2"] || plain["n3"] || len(plain) != 1 {
		t.Fatalf("plain = %v, want n2 only", plain)
	}
	if want := map[string]int{"n2": 3, "n3": 1}; !maps.Equal(shared["$share/g/plant/#"], want) {
		t.Fatalf("shared = %v, want %v", shared, want)
	}
	// "#" does not match $-topics (MQTT-4.7.2-1): mochi's rule, kept.
	if plain, _ := r.match("$SYS/x"); len(plain) != 0 {
		t.Fatalf("$SYS/x matched %v", plain)
	}

	// Deltas: from another run, or from a version never seen: need full.
	if !r.apply("n2", interestMsg{Epoch: 8, Base: 3, Version: 4}) {
		t.Fatal("delta from another epoch accepted")
	}
	if !r.apply("n2", interestMsg{Epoch: 7, Base: 5, Version: 6}) {
		t.Fatal("delta from an unseen base accepted")
	}
	if r.apply("n2", interestMsg{Epoch: 7, Base: 3, Version: 5, Entries: []interestEntry{{"#", 0}, {"plant/+/temp", 0}}}) {
		t.Fatal("good delta refused")
	}
	// The same delta again (a re-send) is harmless.
	if r.apply("n2", interestMsg{Epoch: 7, Base: 3, Version: 5, Entries: []interestEntry{{"#", 0}, {"plant/+/temp", 0}}}) {
		t.Fatal("repeated delta refused")
	}
	if plain, _ := r.match("plant/a/temp"); len(plain) != 0 {
		t.Fatalf("after removal plain = %v", plain)
	}
	// A full set replaces: filters not in it go.
	r.apply("n3", interestMsg{Full: true, Epoch: 10, Version: 1, Entries: []interestEntry{{"new/x", 1}}})
	if _, shared := r.match("plant/a"); !maps.Equal(shared["$share/g/plant/#"], map[string]int{"n2": 3}) {
		t.Fatalf("after n3's new full set: shared %v", shared)
	}
	if r.epoch("n3") != 10 {
		t.Fatalf("epoch n3 = %d", r.epoch("n3"))
	}
	r.drop("n2")
	r.drop("n3")
	if got := r.count(); got != 0 {
		t.Fatalf("count after drop = %d", got)
	}
	if plain, shared := r.match("plant/a"); len(plain)+len(shared) != 0 {
		t.Fatalf("after drop: %v %v", plain, shared)
	}
	// Invalid filters from a peer are ignored, not indexed.
	r.apply("n4", interestMsg{Full: true, Epoch: 1, Entries: []interestEntry{{"a/#/b", 1}, {"", 1}}})
	if r.count() != 0 {
		t.Fatalf("invalid filters counted: %d", r.count())
	}
}

func TestBalancerRoutes(t *testing.T) {
	b := newBalancer("n1")
	live := []string{"n2", "n3"}

	r := b.route(false, map[string]bool{"n2": true, "n4": true}, nil, nil, live)
	if _, ok := r.remote["n2"]; len(r.local) != 0 || len(r.remote) != 1 || !ok {
		t.Fatalf("plain route = %+v, want n2 only (n4 not live)", r)
	}
	r = b.route(true, nil, nil, nil, live)
	if len(r.remote) != 2 {
		t.Fatalf("retained route = %+v, want every live peer", r)
	}
	if r = b.route(false, nil, nil, nil, live); r.remote != nil || r.local != nil {
		t.Fatalf("no interest: route %+v", r)
	}

	// A group with 1 subscriber here, 2 on n2, 1 on n3 (and some on n4,
	// which is not live): exactly one node per message, shares 1:2:1.
	g := "$share/g/t/#"
	shared := map[string]map[string]int{g: {"n2": 2, "n3": 1, "n4": 5}}
	counts := map[string]int{}
	for range 400 {
		r := b.route(false, nil, shared, map[string]int{g: 1}, live)
		chosen := []string{}
		if slices.Contains(r.local, g) {
			chosen = append(chosen, "n1")
		}
		for node, gs := range r.remote {
			if slices.Contains(gs, g) {
				chosen = append(chosen, node)
			}
		}
		if len(chosen) != 1 {
			t.Fatalf("group delivered by %v", chosen)
		}
		counts[chosen[0]]++
	}
	if want := map[string]int{"n1": 100, "n2": 200, "n3": 100}; !maps.Equal(counts, want) {
		t.Fatalf("shares %v, want %v", counts, want)
	}
}
