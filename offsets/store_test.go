package offsets

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// TestStore runs the store's conformance suite over each database it
// opens (as litestream runs one suite over every replica client): SQLite
// and PostgreSQL must behave the same.
func TestStore(t *testing.T) { testkit.StateDBs(t, runStoreTests) }

// runStoreTests commits, fetches, refuses a commit beyond the limit whole,
// lists groups, expires one, and reopens the database to find what was
// committed.
func runStoreTests(t *testing.T, uri string) {
	ctx := context.Background()
	s, err := Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Commit(ctx, "g", []Offset{{Topic: "a.b", Partition: 1, Offset: 7, Metadata: "m"}, {Topic: "a.b", Partition: 0, Offset: 3}}, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, "g", []Offset{{Topic: "a.b", Partition: 0, Offset: 4}}, 2); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Commit(ctx, "g", []Offset{{Topic: "a.c", Partition: 0, Offset: 1}, {Topic: "a.b", Partition: 0, Offset: 99}}, 2); !errors.Is(err, ErrTooMany) || n != 3 {
		t.Fatalf("commit beyond the limit: %d %v", n, err)
	}
	got, err := s.Fetch(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	want := []Offset{{Topic: "a.b", Partition: 0, Offset: 4}, {Topic: "a.b", Partition: 1, Offset: 7, Metadata: "m"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("fetch %+v, want %+v (the refused commit changed nothing)", got, want)
	}
	gs, err := s.Groups(ctx)
	if err != nil || gs["g"].Offsets != 2 {
		t.Fatalf("groups %+v %v", gs, err)
	}
	all, err := s.All(ctx)
	if err != nil || len(all) != 2 || all[0].Group != "g" {
		t.Fatalf("all %+v %v", all, err)
	}
	if ok, err := s.Expire(ctx, "g", time.Now().Add(-time.Hour)); ok || err != nil {
		t.Fatalf("expire a fresh group: %v %v", ok, err)
	}
	if ok, err := s.Expire(ctx, "g", time.Now().Add(time.Hour)); !ok || err != nil {
		t.Fatalf("expire: %v %v", ok, err)
	}
	if got, _ := s.Fetch(ctx, "g"); len(got) != 0 {
		t.Fatalf("expired group still has %+v", got)
	}

	// Offsets survive a reopen (another cloud server on the same
	// database), and a later commit of a partition replaces the earlier.
	if _, err := s.Commit(ctx, "h", []Offset{{Topic: "a.b", Partition: 2, Offset: 1 << 40}}, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, "h", []Offset{{Topic: "a.b", Partition: 2, Offset: 1<<40 + 1, Metadata: "again"}}, -1); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(uri)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err = s2.Fetch(ctx, "h")
	if err != nil || len(got) != 1 || got[0] != (Offset{Topic: "a.b", Partition: 2, Offset: 1<<40 + 1, Metadata: "again"}) {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
}
