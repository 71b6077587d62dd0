package wal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// fencedRecs appends n records of epoch to (stream, part), values
// prefix-0.., with producer info, and returns them as stored.
func fencedRecs(t *testing.T, w *WAL, stream string, part int32, epoch int64, prefix string, n int) []*tributary.Record {
	t.Helper()
	var out []*tributary.Record
	for i := range n {
		r := &tributary.Record{Stream: stream, Partition: part, Epoch: epoch, Topic: "t", Source: "kafka",
			Key: []byte("k"), Value: []byte(fmt.Sprintf("%s-%d", prefix, i)), Headers: []tributary.Header{{Key: "h", Value: []byte{byte(i)}}},
			ClientID: "c", Node: "n1", Principal: "p", ProducerID: 7, ProducerEpoch: 1, Sequence: int32(i), ProducerTimestamp: int64(1000 + i)}
		if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// sameButPlace says whether got is want moved to (part, off, epoch).
func sameButPlace(got, want *tributary.Record, part int32, off, epoch int64) bool {
	w := *want
	w.Partition, w.Offset, w.Epoch = part, off, epoch
	return fmt.Sprint(*got) == fmt.Sprint(w)
}

// TestReadmitPartition: the fenced partition's records at Start or above
// move to the owned partition with its next offsets and epoch and every
// other field kept (a Kafka batch entry's records too); those below Start
// are dropped; the partition is gone and sealed, so an append of the old
// epoch is refused with ErrFenced (not a new partition at offset 0) while
// one of the new owner's epoch is taken. All of it survives a reopen.
func TestReadmitPartition(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w, err := Open(Options{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	const s = "r.s"
	fenced := fencedRecs(t, w, s, 0, 2, "f", 6)
	b, brecs := testBatch(s, 0, 3, 9, 0, 0, 42)
	b.Epoch = 2
	if err := appendBatch(t, w, b); err != nil {
		t.Fatal(err)
	}
	for _, r := range brecs {
		r.Epoch = 2
	}
	fenced = append(fenced, brecs...) // offsets 0-8
	own := fencedRecs(t, w, s, 5, 0, "own", 3)
	if err := w.Apply(context.Background(), Op{Kind: OpRelease, Stream: s, Partition: 0, Offset: 2}).Err; err != nil {
		t.Fatal(err)
	}
	wr := w.Apply(context.Background(), Op{Kind: OpReadmit, Readmit: &Readmit{Stream: s, From: 0, Floor: 3, Start: 4, To: 5, Epoch: 0}})
	res, err := wr.Readmission, wr.Err
	if err != nil {
		t.Fatal(err)
	}
	if res != (Readmission{Moved: 5, Dropped: 2, First: 3, Next: 8}) {
		t.Fatalf("readmission %+v", res)
	}
	for round := range 2 {
		if _, ok := w.Partition(s, 0); ok {
			t.Fatalf("round %d: fenced partition still there", round)
		}
		if ps, _ := w.Partition(s, 0); ps.Floor != 3 {
			t.Fatalf("round %d: floor %d", round, ps.Floor)
		}
		got := readPartition(t, w, s, 5)
		if len(got) != 8 {
			t.Fatalf("round %d: %d records in the owned partition", round, len(got))
		}
		for i, r := range got[:3] {
			if !sameButPlace(r, own[i], 5, int64(i), 0) {
				t.Fatalf("round %d: own record %d changed: %+v", round, i, r)
			}
		}
		for i, r := range got[3:] {
			if !sameButPlace(r, fenced[4+i], 5, int64(3+i), 0) {
				t.Fatalf("round %d: readmitted record %d is %+v, want %+v", round, i, r, fenced[4+i])
			}
		}
		if st := w.Stats(); st.Records != 8 {
			t.Fatalf("round %d: %d records counted", round, st.Records)
		}
		if round == 0 {
			w.Close()
			if w, err = Open(Options{Path: path, NoSync: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer w.Close()
	err = w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{{Stream: s, Partition: 0, Epoch: 2, Value: []byte("late")}}}).Err
	if !errors.Is(err, ErrFenced) || !errors.Is(err, tributary.ErrFenced) {
		t.Fatalf("append of the old epoch: %v", err)
	}
	b, _ = testBatch(s, 0, 2, -1, 0, 0, 1)
	b.Epoch = 2
	if err := appendBatch(t, w, b); !errors.Is(err, ErrFenced) {
		t.Fatalf("batch of the old epoch: %v", err)
	}
	if _, ok := w.Partition(s, 0); ok {
		t.Fatal("a refused append created the partition")
	}
	r := &tributary.Record{Stream: s, Partition: 0, Epoch: 3, Value: []byte("ours again")}
	if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
		t.Fatalf("append of the floor's epoch: %v", err)
	}
}

// TestReadmitKept: a partition holding records of the floor's epoch (this
// node owns it again) is left alone, and not sealed.
func TestReadmitKept(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	const s = "r.s"
	fencedRecs(t, w, s, 0, 0, "old", 2)
	fencedRecs(t, w, s, 0, 3, "new", 2)
	wr := w.Apply(context.Background(), Op{Kind: OpReadmit, Readmit: &Readmit{Stream: s, From: 0, Floor: 3, Start: 0, To: 1, Epoch: 0}})
	res, err := wr.Readmission, wr.Err
	if err != nil || !res.Kept {
		t.Fatalf("readmission %+v, %v", res, err)
	}
	if ps, _ := w.Partition(s, 0); ps.Next != 4 {
		t.Fatalf("partition %+v", ps)
	}
	if ps, _ := w.Partition(s, 0); ps.Floor != 0 {
		t.Fatal("sealed")
	}
	if wr := w.Apply(context.Background(), Op{Kind: OpSeal, Stream: s, Partition: 0, Epoch: 3}); wr.Err != nil || !wr.Kept {
		t.Fatalf("seal: kept %v, %v", wr.Kept, wr.Err)
	}
}

// gateTap blocks the committer in its first tapped group until opened.
type gateTap struct {
	in, open chan struct{}
	once     bool
}

func (g *gateTap) Tapped([]TappedPartition) {
	if !g.once {
		g.once = true
		close(g.in)
		<-g.open
	}
}

// TestReadmitRace: appends to the fenced partition racing the
// re-admission, driven into one group with it: the one queued before it
// is moved by it, the one after it is refused (ErrFenced); none is lost,
// none stored twice.
func TestReadmitRace(t *testing.T) {
	w := openTest(t, Options{NoSync: true})
	const s = "r.s"
	fencedRecs(t, w, s, 0, 1, "f", 3)
	fencedRecs(t, w, s, 1, 0, "own", 1)
	gate := &gateTap{in: make(chan struct{}), open: make(chan struct{})}
	w.SetTap(gate)
	first := make(chan error, 1)
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{{Stream: s, Partition: 0, Epoch: 1, Value: []byte("f-3")}}, Done: func(wr Result) { first <- wr.Err }})
	<-gate.in // the committer holds that group
	before := make(chan error, 1)
	after := make(chan error, 1)
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{{Stream: s, Partition: 0, Epoch: 1, Value: []byte("f-4")}}, Done: func(wr Result) { before <- wr.Err }})
	readmitted := make(chan Readmission, 1)
	go func() {
		wr := w.Apply(context.Background(), Op{Kind: OpReadmit, Readmit: &Readmit{Stream: s, From: 0, Floor: 2, Start: 2, To: 1, Epoch: 0}})
		res, err := wr.Readmission, wr.Err
		if err != nil {
			t.Error(err)
		}
		readmitted <- res
	}()
	waitQueued(t, w, 2)
	w.Submit(Op{Kind: OpAppend, Records: []*tributary.Record{{Stream: s, Partition: 0, Epoch: 1, Value: []byte("f-5")}}, Done: func(wr Result) { after <- wr.Err }})
	waitQueued(t, w, 3)
	close(gate.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-before; err != nil {
		t.Fatalf("append queued before the re-admission: %v", err)
	}
	if err := <-after; !errors.Is(err, ErrFenced) {
		t.Fatalf("append queued after the re-admission: %v", err)
	}
	res := <-readmitted
	if res != (Readmission{Moved: 3, Dropped: 2, First: 1, Next: 4}) {
		t.Fatalf("readmission %+v", res)
	}
	var vals []string
	for _, r := range readPartition(t, w, s, 1) {
		vals = append(vals, string(r.Value))
	}
	if fmt.Sprint(vals) != "[own-0 f-2 f-3 f-4]" {
		t.Fatalf("owned partition holds %v", vals)
	}
}

// waitQueued waits until n ops wait for the committer.
func waitQueued(t *testing.T, w *WAL, n int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%d ops queued", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.queue) >= n
	})
}

// TestReadmitTornCommit: power fails while the re-admission's commit is
// written (its meta page torn): the WAL opens in the state before it —
// the fenced partition whole, the owned one without the moved records, no
// seal — so the fence is redone, nothing is lost or doubled. Redone, it
// gives the same result.
func TestReadmitTornCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	w, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	const s = "r.s"
	fencedRecs(t, w, s, 0, 0, "f", 5)
	fencedRecs(t, w, s, 1, 1, "own", 2)
	rm := Readmit{Stream: s, From: 0, Floor: 1, Start: 3, To: 1, Epoch: 1}
	if wr := w.Apply(context.Background(), Op{Kind: OpReadmit, Readmit: &rm}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	w.Close()
	tearLatestMeta(t, path)
	if w, err = Open(Options{Path: path}); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := readPartition(t, w, s, 0); len(got) != 5 {
		t.Fatalf("fenced partition holds %d records after the torn commit, want 5", len(got))
	}
	if got := readPartition(t, w, s, 1); len(got) != 2 {
		t.Fatalf("owned partition holds %d records after the torn commit, want 2", len(got))
	}
	if ps, _ := w.Partition(s, 0); ps.Floor != 0 {
		t.Fatal("sealed after the torn commit")
	}
	wr := w.Apply(context.Background(), Op{Kind: OpReadmit, Readmit: &rm})
	res, err := wr.Readmission, wr.Err
	if err != nil || res != (Readmission{Moved: 2, Dropped: 3, First: 2, Next: 4}) {
		t.Fatalf("redone: %+v, %v", res, err)
	}
	var vals []string
	for _, r := range readPartition(t, w, s, 1) {
		vals = append(vals, string(r.Value))
	}
	if fmt.Sprint(vals) != "[own-0 own-1 f-3 f-4]" {
		t.Fatalf("owned partition holds %v", vals)
	}
}

const readmitCrashEnv = "TRIBUTARY_WAL_READMIT_CRASH_PATH"

// TestReadmitHelperProcess is not a test: run by TestReadmitCrash with
// readmitCrashEnv set, it appends to a fenced partition (c.rm/10+round,
// epoch 0) and to the node's own one (c.rm/0) from two goroutines,
// re-admits the fenced one (from offset 50, floor 1) once it holds 100
// records while both keep appending, and prints every acknowledged record
// ("ack <partition> <offset> <value>") and the re-admission
// ("readmitting", "readmitted").
func TestReadmitHelperProcess(t *testing.T) {
	path := os.Getenv(readmitCrashEnv)
	if path == "" {
		t.Skip("helper process for TestReadmitCrash")
	}
	round, _ := strconv.Atoi(os.Getenv(readmitCrashEnv + "_ROUND"))
	w, err := Open(Options{Path: path})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var out sync.Mutex
	say := func(format string, a ...any) {
		out.Lock()
		fmt.Printf(format+"\n", a...)
		out.Unlock()
	}
	p := int32(10 + round)
	for _, part := range []int32{0, p} {
		go func() {
			for i := 0; ; i++ {
				r := &tributary.Record{Stream: "c.rm", Partition: part, Value: []byte(fmt.Sprintf("r%d-%d-%d", round, part, i)), Source: "mqtt"}
				if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; errors.Is(err, ErrFenced) && part == p {
					return
				} else if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(3)
				}
				say("ack %d %d %s", part, r.Offset, r.Value)
			}
		}()
	}
	for {
		if ps, _ := w.Partition("c.rm", p); ps.Next >= 100 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	say("readmitting")
	wr := w.Apply(context.Background(), Op{Kind: OpReadmit, Readmit: &Readmit{Stream: "c.rm", From: p, Floor: 1, Start: 50, To: 0, Epoch: 0}})
	res, err := wr.Readmission, wr.Err
	if err != nil {
		fmt.Fprintln(os.Stderr, "readmit:", err)
		os.Exit(3)
	}
	say("readmitted %d %d", res.First, res.Next)
	select {}
}

// TestReadmitCrash kills a process re-admitting a fenced partition while
// it appends to it and to the partition it re-admits into, with SIGKILL
// at a random moment (before, during or after the re-admission), and
// checks the WAL it leaves: either the fenced partition is whole (every
// acknowledged record at its offset) and none of it is in the own
// partition, or it is gone and sealed and the own partition holds each
// acknowledged record of it at or above the start exactly once and none
// below; the own partition's acknowledged records are all there, dense.
func TestReadmitCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "wal.db")
	rng := testkit.Rand(t, 3, 4)
	own := map[int64]string{}
	for round := range 6 {
		// Even rounds are killed before the re-admission (at the k-th
		// acknowledged record of the fenced partition), odd ones the k-th
		// acknowledgement after it began (while or after it commits).
		k := 60 + rng.IntN(40)
		if round%2 == 1 {
			k = rng.IntN(30)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestReadmitHelperProcess$")
		cmd.Env = append(os.Environ(), readmitCrashEnv+"="+path, fmt.Sprintf("%s_ROUND=%d", readmitCrashEnv, round))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := int32(10 + round)
		fenced := map[int64]string{}
		n, killed, readmitting, readmitted := 0, false, false, false
		kill := func() {
			if !killed {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "readmitting":
				readmitting = true
				if round%2 == 1 && k == 0 {
					kill()
				}
				continue
			case strings.HasPrefix(line, "readmitted"):
				readmitted = true
				continue
			}
			var part int32
			var off int64
			var v string
			if _, err := fmt.Sscanf(line, "ack %d %d %s", &part, &off, &v); err != nil {
				t.Fatalf("round %d: bad helper line %q: %v", round, line, err)
			}
			if part == p {
				fenced[off] = v
			} else {
				own[off] = v
			}
			switch {
			case round%2 == 0 && len(fenced) >= k:
				kill()
			case round%2 == 1 && readmitting:
				if n++; n >= k {
					kill()
				}
			}
		}
		cmd.Wait()
		if !killed {
			t.Fatalf("round %d: helper exited early", round)
		}
		w, err := Open(Options{Path: path})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		got := map[string]int64{}
		for _, r := range readPartition(t, w, "c.rm", 0) {
			if _, dup := got[string(r.Value)]; dup {
				t.Fatalf("round %d: %s twice in the own partition", round, r.Value)
			}
			got[string(r.Value)] = r.Offset
		}
		for off, v := range own {
			if o, ok := got[v]; !ok || o != off {
				t.Fatalf("round %d: acknowledged %s at %d of the own partition: at %d, %v", round, v, off, o, ok)
			}
		}
		ps, whole := w.Partition("c.rm", p)
		sealed := ps.Floor != 0
		switch {
		case whole == sealed:
			t.Fatalf("round %d: fenced partition present %v, sealed %v", round, whole, sealed)
		case whole && readmitted:
			t.Fatalf("round %d: re-admission returned but the partition is whole", round)
		case whole:
			recs := readPartition(t, w, "c.rm", p)
			for off, v := range fenced {
				if off >= int64(len(recs)) || string(recs[off].Value) != v {
					t.Fatalf("round %d: acknowledged %s at %d of the fenced partition lost", round, v, off)
				}
			}
			for v := range got {
				if strings.HasPrefix(v, fmt.Sprintf("r%d-%d-", round, p)) {
					t.Fatalf("round %d: %s in the own partition and the fenced one is whole", round, v)
				}
			}
		default:
			for off, v := range fenced {
				if _, in := got[v]; in != (off >= 50) {
					t.Fatalf("round %d: fenced record %s at %d in the own partition: %v", round, v, off, in)
				}
			}
		}
		t.Logf("round %d: killed (k %d), %d acknowledged of the fenced partition; re-admitted: %v", round, k, len(fenced), !whole)
		for v, off := range got { // the own partition's content, for the next round
			own[off] = v
		}
		w.Close()
	}
}
