package wal

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
)

// Ten closed-loop writers split into two halves: the half that queued
// during the commit waits for the half just acknowledged.
func TestGrouperJoinsHalfGroups(t *testing.T) {
	var gr grouper
	gr.ended(10, 0, time.Millisecond)
	gr.ended(5, 5, time.Millisecond)
	n, wait := gr.target()
	if n != 10 || wait != time.Millisecond {
		t.Fatalf("target %d, wait %s; want 10 (5 queued + 5 coming back), 1ms", n, wait)
	}
}

func TestGrouperLoneWriterNeverWaits(t *testing.T) {
	var gr grouper
	for range 5 {
		gr.ended(1, 0, time.Millisecond)
		if n, _ := gr.target(); n > 1 {
			t.Fatalf("a lone writer's group waits for %d ops", n)
		}
	}
	// Many writers, then one left: it does not wait for the others.
	gr = grouper{}
	gr.ended(50, 0, time.Millisecond)
	gr.ended(1, 0, time.Millisecond)
	if n, _ := gr.target(); n > 1 {
		t.Fatalf("the last writer's group waits for %d ops", n)
	}
}

func TestGrouperWaitIsBounded(t *testing.T) {
	var gr grouper
	gr.ended(10, 0, time.Second)
	if _, wait := gr.target(); wait != maxGatherWait {
		t.Fatalf("wait %s after a 1s commit, want %s", wait, maxGatherWait)
	}
	gr = grouper{}
	gr.ended(10, 0, 400*time.Microsecond)
	if _, wait := gr.target(); wait != 400*time.Microsecond {
		t.Fatalf("wait %s after a 400µs commit, want 400µs", wait)
	}
}

// A flood: the queue already holds every writer seen; nothing to wait for.
func TestGrouperFloodGoesAtOnce(t *testing.T) {
	var gr grouper
	gr.ended(10, 0, time.Millisecond)
	gr.ended(10, 40, time.Millisecond)
	if n, _ := gr.target(); n != 0 {
		t.Fatalf("target %d with 40 queued of 10 writers seen, want 0", n)
	}
}

// TestLoneWriterNeverWaits: one closed-loop writer, acknowledged and back
// at once (often before the committer looked at the queue again), is never
// held back for a second writer that does not exist.
func TestLoneWriterNeverWaits(t *testing.T) {
	w, err := Open(Options{Path: filepath.Join(t.TempDir(), "wal.db")})
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 256)
	for range 300 {
		r := &tributary.Record{Stream: "s", Topic: "t", Value: value, Source: "mqtt"}
		if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil { // the committer has exited: its grouper is ours to read
		t.Fatal(err)
	}
	if n := w.grouper.late; n > 0 {
		t.Fatalf("a lone writer's group was held back to the deadline %d times in 300 appends", n)
	}
}

// TestClosedLoopWritersShareGroups drives ten closed-loop writers against
// the real WAL, each making a loopback TCP round trip between its
// acknowledgement and its next append (an MQTT QoS 1 client with one
// publish in flight: PUBACK out, PUBLISH back), and checks that they share
// groups rather than split into halves taking turns (5 records per commit).
func TestClosedLoopWritersShareGroups(t *testing.T) {
	w, err := Open(Options{Path: filepath.Join(t.TempDir(), "wal.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) // echo
		}
	}()
	const writers, rounds, warmup = 10, 100, 5
	conns := make([]net.Conn, writers)
	for i := range conns {
		if conns[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	value := make([]byte, 256)
	run := func(rounds int) {
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := []byte{0}
				for range rounds {
					r := &tributary.Record{Stream: "s", Topic: "t", Value: value, Source: "mqtt"}
					if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
						t.Error(err)
						return
					}
					if _, err := c.Write(b); err != nil {
						t.Error(err)
						return
					}
					if _, err := io.ReadFull(c, b); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	run(warmup)
	before := w.Stats()
	run(rounds)
	st := w.Stats()
	recs, commits := st.AppendedRecords-before.AppendedRecords, st.Commits-before.Commits
	perCommit := float64(recs) / float64(commits)
	t.Logf("%d records in %d commits: %.1f per commit", recs, commits, perCommit)
	if perCommit < 7.5 {
		t.Fatalf("%.1f records per commit for %d closed-loop writers, want >= 7.5 (half groups take turns)", perCommit, writers)
	}
}
