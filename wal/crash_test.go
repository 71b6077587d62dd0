package wal

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

const crashEnv = "TRIBUTARY_WAL_CRASH_PATH"

// TestHelperProcess is not a test: run by TestCrashRecovery with crashEnv
// set, it appends from several goroutines forever (and one AppendAt writer
// of preassigned offsets with resends, one writer that drops its
// partition now and then, and one appending Kafka record batches) and prints every acknowledged record as
// "ack <stream> <partition> <offset> <value>".
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("helper process for TestCrashRecovery")
	}
	w, err := Open(Options{Path: path})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	round := os.Getenv(crashEnv + "_ROUND")
	var out sync.Mutex
	print := func(recs []*tributary.Record) {
		var b strings.Builder
		for _, r := range recs {
			fmt.Fprintf(&b, "ack %s %d %d %s\n", r.Stream, r.Partition, r.Offset, r.Value)
		}
		out.Lock()
		os.Stdout.WriteString(b.String())
		out.Unlock()
	}
	var wg sync.WaitGroup
	// A replica-style writer: AppendAt of preassigned offsets, each call
	// resending up to two records already stored (skipped).
	wg.Add(1)
	go func() {
		defer wg.Done()
		ps, _ := w.Partition("c.at", 0)
		next := ps.Next
		for i := 0; ; i++ {
			from := max(0, next-int64(i%3))
			var recs []*tributary.Record
			for off := from; off < next+1+int64(i%4); off++ {
				recs = append(recs, &tributary.Record{Stream: "c.at", Offset: off, Epoch: int64(round[0]),
					Value: []byte(fmt.Sprintf("r%s-at-%d", round, off)), Source: "mqtt"})
			}
			wr := w.Apply(context.Background(), Op{Kind: OpAppendAt, Records: recs})
			skipped, err := int(wr.Skipped), wr.Err
			if err != nil || int64(skipped) != next-from {
				fmt.Fprintln(os.Stderr, "append at:", skipped, err)
				os.Exit(3)
			}
			print(recs[skipped:])
			next = recs[len(recs)-1].Offset + 1
		}
	}()
	// A fenced-partition writer: appends to c.drop and every 40 records
	// drops the partition, announcing the drop before and after.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			if i%40 == 39 {
				out.Lock()
				os.Stdout.WriteString("dropping c.drop\n")
				out.Unlock()
				if wr := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: "c.drop", Partition: 0, Epoch: math.MaxInt64}); wr.Err != nil {
					fmt.Fprintln(os.Stderr, "drop:", wr.Err)
					os.Exit(3)
				}
				out.Lock()
				os.Stdout.WriteString("dropped c.drop\n")
				out.Unlock()
				continue
			}
			r := &tributary.Record{Stream: "c.drop", Value: []byte(fmt.Sprintf("r%s-drop-%d", round, i)), Source: "mqtt"}
			if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
			print([]*tributary.Record{r})
		}
	}()
	// A Kafka producer: record batches of 1–5 records stored as one
	// entry each (chunks of version 2), interleaved in groups with the
	// records of the other writers.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			var rs []kafkatest.Rec
			for j := 0; j <= i%5; j++ {
				rs = append(rs, kafkatest.Rec{Value: []byte(fmt.Sprintf("r%s-kb-%d-%d", round, i, j))})
			}
			b := &Batch{Stream: "k.batch", Topic: "k.batch", Source: "kafka",
				Records: kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, rs...)}
			done := make(chan error, 1)
			w.Submit(Op{Kind: OpAppend, Batch: b, Done: func(wr Result) { done <- wr.Err }})
			if err := <-done; err != nil {
				fmt.Fprintln(os.Stderr, "append batch:", err)
				os.Exit(3)
			}
			recs := make([]*tributary.Record, len(rs))
			for j := range rs {
				recs[j] = &tributary.Record{Stream: b.Stream, Offset: b.Offset + int64(j), Value: rs[j].Value}
			}
			print(recs)
		}
	}()
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				// Batches of 1–3 records spread over two streams and
				// three partitions.
				var recs []*tributary.Record
				for j := 0; j <= (g+i)%3; j++ {
					stream := []string{"a.x", "b.y"}[(g+j)%2]
					recs = append(recs, &tributary.Record{Stream: stream, Partition: int32((i + j) % 3),
						Value: []byte(fmt.Sprintf("r%s-g%d-i%d-j%d", round, g, i, j)), Source: "kafka"})
				}
				if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: recs}).Err; err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				print(recs)
			}
		}()
	}
	wg.Wait()
}

type ackKey struct {
	stream string
	part   int32
	off    int64
}

// TestCrashRecovery kills an appending process with SIGKILL at a random
// moment, several times, and checks after each crash that every
// acknowledged record is present with its offset and value (those of a
// dropped partition: exactly since the last drop), that offsets are dense,
// and that appending continues at the next offset.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	path := filepath.Join(t.TempDir(), "wal.db")
	acked := make(map[ackKey]string)
	rng := testkit.Rand(t, 0, 1) // seeded from the clock unless TRIBUTARY_TEST_SEED is set
	const rounds = 6
	for round := 0; round < rounds; round++ {
		killAfter := 1 + rng.IntN(3000) // acknowledged records before the kill
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), crashEnv+"="+path, fmt.Sprintf("%s_ROUND=%d", crashEnv, round))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		n, killed, dropping := 0, false, false
		forgetDropped := func() {
			for k := range acked {
				if k.stream == "c.drop" {
					delete(acked, k)
				}
			}
		}
		for sc.Scan() {
			switch sc.Text() {
			case "dropping c.drop":
				dropping = true
				continue
			case "dropped c.drop":
				dropping = false
				forgetDropped()
				continue
			}
			var k ackKey
			var value string
			if _, err := fmt.Sscanf(sc.Text(), "ack %s %d %d %s", &k.stream, &k.part, &k.off, &value); err != nil {
				t.Fatalf("round %d: bad helper line %q: %v", round, sc.Text(), err)
			}
			if prev, dup := acked[k]; dup {
				t.Fatalf("round %d: offset %v acknowledged twice: %q and %q", round, k, prev, value)
			}
			acked[k] = value
			if n++; n == killAfter && !killed {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		err = cmd.Wait()
		if !killed {
			t.Fatalf("round %d: helper exited early: %v", round, err)
		}
		t.Logf("round %d: killed after %d acks (%d read), %d acked in total", round, killAfter, n, len(acked))
		if dropping && !hasPartition(t, path, "c.drop", 0) {
			forgetDropped() // killed after the drop committed, before it was announced
		}
		checkRecovered(t, path, acked, round)
	}
	batched := 0
	for k := range acked {
		if k.stream == "k.batch" {
			batched++
		}
	}
	if batched == 0 {
		t.Fatal("no record of a Kafka batch entry was acknowledged: the crash rounds did not cover them")
	}
	t.Logf("%d acknowledged records of Kafka batch entries", batched)
}

// hasPartition reports whether the WAL at path knows (stream, partition).
func hasPartition(t *testing.T, path, stream string, part int32) bool {
	t.Helper()
	w, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, ok := w.Partition(stream, part)
	return ok
}

func checkRecovered(t *testing.T, path string, acked map[ackKey]string, round int) {
	t.Helper()
	w, err := Open(Options{Path: path})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer w.Close()
	stored := make(map[ackKey]string)
	for _, ps := range w.Partitions() {
		recs, err := w.Read(ps.Stream, ps.Partition, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ps.Released != 0 || int64(len(recs)) != ps.Next {
			t.Fatalf("round %d: %+v holds %d records", round, ps, len(recs))
		}
		var bytes int64
		for i, r := range recs {
			if r.Offset != int64(i) || r.Stream != ps.Stream || r.Partition != ps.Partition {
				t.Fatalf("round %d: %s/%d: record %d is %s/%d@%d: not dense", round, ps.Stream, ps.Partition, i, r.Stream, r.Partition, r.Offset)
			}
			bytes += int64(len(EncodeRecord(nil, r)))
			stored[ackKey{r.Stream, r.Partition, r.Offset}] = string(r.Value)
		}
		if bytes != ps.Bytes && !strings.HasPrefix(ps.Stream, "k.") { // batch entries count as stored (batch_test.go checks them)
			t.Fatalf("round %d: %s/%d: meta says %d bytes, records hold %d", round, ps.Stream, ps.Partition, ps.Bytes, bytes)
		}
	}
	for k, v := range acked {
		if got, ok := stored[k]; !ok || got != v {
			t.Fatalf("round %d: acknowledged %v = %q lost (stored %q, %v)", round, k, v, got, ok)
		}
	}
	// Appending continues right after the last stored offset.
	for _, ps := range w.Partitions() {
		r := &tributary.Record{Stream: ps.Stream, Partition: ps.Partition, Value: []byte(fmt.Sprintf("after-crash-%d", round))}
		if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
			t.Fatal(err)
		}
		if r.Offset != ps.Next {
			t.Fatalf("round %d: append after crash got offset %d, want %d", round, r.Offset, ps.Next)
		}
		acked[ackKey{r.Stream, r.Partition, r.Offset}] = string(r.Value)
	}
}
