package cloudmqtt

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// TestSessionStore runs the session store's conformance suite over SQLite
// and PostgreSQL: a client that reconnects to any cloud server, on either
// database, finds the same session.
func TestSessionStore(t *testing.T) { testkit.StateDBs(t, runSessionStoreTests) }

// runSessionStoreTests saves and loads a session with its positions
// through two stores on one database (two cloud servers), drops a
// subscription's and a stream's positions, expires a session by its
// interval, sweeps, and deletes.
func runSessionStoreTests(t *testing.T, uri string) {
	ctx := context.Background()
	open := func() *store {
		s, err := openStore(uri, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.close(ctx) })
		return s
	}
	a, b := open(), open()

	if ss, pos, err := a.Load(ctx, "c1"); ss != nil || pos != nil || err != nil {
		t.Fatalf("load of nothing: %+v %v %v", ss, pos, err)
	}
	now := time.Now().UnixMilli()
	ss := storedSession{Principal: "alice", Subs: []storedSub{{Filter: "f/#", QoS: 1, SubID: 7}, {Filter: "g/+", QoS: 0}}, Expiry: 3600, Seen: now}
	if err := a.Save(ctx, "c1", ss); err != nil {
		t.Fatal(err)
	}
	if err := a.SavePositions(ctx, "c1", "f/#", "f.s", map[int32]int64{0: 5, 1: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	<-a.Set("c1", "g/+", "g.s", 3, 9) // the group-commit loop writes it
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	got, pos, err := b.Load(ctx, "c1")
	if err != nil || got == nil || !reflect.DeepEqual(*got, ss) {
		t.Fatalf("load through another store: %+v %v, want %+v", got, err, ss)
	}
	want := positions{"f/#": {"f.s": {0: 5, 1: 1 << 40}}, "g/+": {"g.s": {3: 9}}}
	if !reflect.DeepEqual(pos, want) {
		t.Fatalf("positions %v, want %v", pos, want)
	}
	if o, err := b.Owner(ctx, "c1"); o != "alice" || err != nil {
		t.Fatalf("owner %q %v", o, err)
	}

	// A replaced session keeps its positions; dropping one subscription
	// or one stream deletes only those.
	ss.Subs = ss.Subs[:1]
	if err := b.Save(ctx, "c1", ss); err != nil {
		t.Fatal(err)
	}
	if err := a.SavePositions(ctx, "c1", "f/#", "f.t", map[int32]int64{0: 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.DropFilter(ctx, "c1", "g/+"); err != nil {
		t.Fatal(err)
	}
	if err := b.DropStream(ctx, "c1", "f/#", "f.t"); err != nil {
		t.Fatal(err)
	}
	if _, pos, _ := a.Load(ctx, "c1"); !reflect.DeepEqual(pos, positions{"f/#": {"f.s": {0: 5, 1: 1 << 40}}}) {
		t.Fatalf("after dropping a filter and a stream: %v", pos)
	}

	// A session whose interval has passed is gone for Owner and Load;
	// Sweep deletes it and the positions of sessions that no longer exist.
	if err := a.Save(ctx, "old", storedSession{Principal: "bob", Expiry: 1, Seen: now - 60_000}); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, "forever", storedSession{Principal: "carol", Expiry: -1, Seen: now - 86_400_000}); err != nil {
		t.Fatal(err)
	}
	if o, err := b.Owner(ctx, "old"); o != "" || err != nil {
		t.Fatalf("owner of an expired session: %q %v", o, err)
	}
	if n, err := b.Sweep(ctx, time.Second); n != 2 || err != nil {
		t.Fatalf("sweep left %d sessions (%v), want c1 and forever", n, err)
	}
	if err := b.Touch(ctx, []string{"c1"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if ss, _, err := b.Load(ctx, "c1"); ss != nil || err != nil {
		t.Fatalf("deleted session loads as %+v %v", ss, err)
	}
	if n, err := b.Sweep(ctx, time.Second); n != 1 || err != nil {
		t.Fatalf("after delete %d sessions (%v), want forever", n, err)
	}
}
