package wal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// breakingTap makes the group it sees fail to commit: it puts a read-only
// /dev/null in place of the journal segment's descriptor, so the group's
// journal write fails (EBADF) after the replicas would have had it.
type breakingTap struct {
	t    *testing.T
	path string
	arm  bool
}

func (b *breakingTap) Tapped(parts []TappedPartition) {
	if !b.arm {
		return
	}
	b.arm = false
	want, err := filepath.EvalSymlinks(b.path)
	if err != nil {
		b.t.Error(err)
		return
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		b.t.Error(err)
		return
	}
	defer null.Close()
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target == want {
			fd, _ := strconv.Atoi(e.Name())
			if err := syscall.Dup3(int(null.Fd()), fd, 0); err != nil {
				b.t.Error(err)
			}
			return
		}
	}
	b.t.Error("the WAL file's descriptor was not found")
}

// TestTappedCommitFailureBreaks: a group the tap saw that then fails to
// commit stops the WAL's writes (ErrBroken) until it is reopened, so that
// its offsets never go to other records in the same incarnation; the
// reopened WAL is a new incarnation without the group.
func TestTappedCommitFailureBreaks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	tap := &breakingTap{t: t, path: w.journal.curSeg.name}
	w.SetTap(tap)
	ctx := context.Background()
	appendRecs(t, w, "s", 0, 3)
	tap.arm = true
	if err := w.Append(ctx, rec("s", 0, "vvvv")); err == nil {
		t.Fatal("the broken commit succeeded")
	}
	if err := w.Append(ctx, rec("s", 0, "vvvv")); !errors.Is(err, ErrBroken) {
		t.Fatalf("append after a failed tapped commit: %v, want ErrBroken", err)
	}
	if err := w.Broken(); !errors.Is(err, ErrBroken) {
		t.Fatalf("Broken() = %v, want ErrBroken", err)
	}
	if err := w.Release("s", 0, 1); !errors.Is(err, ErrBroken) {
		t.Fatalf("release after a failed tapped commit: %v, want ErrBroken", err)
	}
	inc := w.Incarnation()
	w.Close()
	w, err = Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Broken(); err != nil {
		t.Fatalf("reopened WAL: Broken() = %v", err)
	}
	if w.Incarnation() <= inc {
		t.Fatalf("incarnation %d after reopening, want > %d", w.Incarnation(), inc)
	}
	if st, _ := w.Partition("s", 0); st.Next != 3 || st.Start != 3 {
		t.Fatalf("reopened: %+v, want next = start = 3", st)
	}
	if err := w.Append(ctx, rec("s", 0, "vvvv")); err != nil {
		t.Fatal(err)
	}
}
