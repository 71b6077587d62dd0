package wal

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tributary-io/tributary"
)

// closedLoop runs writers goroutines, each with one Append in flight and
// pause(writer) between its acknowledgement and its next Append (the
// network and the front door of an MQTT QoS 1 client), until n appends
// were made or stop is closed; it returns the appends made.
func closedLoop(w *WAL, writers int, pause func(int), n int64, stop <-chan struct{}) (int64, error) {
	var wg sync.WaitGroup
	var count atomic.Int64
	var firstErr atomic.Value
	value := make([]byte, 256)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n <= 0 || count.Load() < n {
				select {
				case <-stop:
					return
				default:
				}
				if n > 0 && count.Add(1) > n {
					return
				}
				r := &tributary.Record{Stream: "bench.s", Topic: "t", Value: value, Source: "mqtt"}
				if err := w.Apply(context.Background(), Op{Kind: OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if n <= 0 {
					count.Add(1)
				}
				if pause != nil {
					pause(i)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return count.Load(), err
	}
	return min(count.Load(), max(n, count.Load())), nil
}

// fdatasyncLatency is the mean latency of one 4 KiB write + fdatasync in
// dir, the single-sync bound's denominator.
func fdatasyncLatency(tb testing.TB, dir string, d time.Duration) time.Duration {
	f, err := os.Create(filepath.Join(dir, "sync.probe"))
	if err != nil {
		tb.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	start := time.Now()
	n := 0
	for time.Since(start) < d || n < 10 {
		if _, err := f.WriteAt(buf, int64(n%256)*4096); err != nil {
			tb.Fatal(err)
		}
		if err := f.Sync(); err != nil { // fdatasync on Linux (os.File.Sync is fsync; close enough on ext4 for an overwrite)
			tb.Fatal(err)
		}
		n++
	}
	return time.Since(start) / time.Duration(n)
}

// BenchmarkClosedLoopWriters is 1, 10 and 100 writers with one append in
// flight each (MQTT QoS 1 devices publishing one at a time), with and
// without a round trip between acknowledgement and next append (loopback
// TCP, or a timer's sleep). It
// reports records/s against the single-sync bound (writers ÷ one 4 KiB
// write + fsync, the mean of probes just before and after the run) and the commit bound (writers ÷
// the mean group commit), and the records per commit.
func BenchmarkClosedLoopWriters(b *testing.B) {
	for _, c := range []struct {
		name    string
		writers int
		rtt     time.Duration // a timer's sleep (its slack on a busy machine may exceed a commit)
		tcp     bool          // a loopback TCP round trip, as an MQTT client's PUBACK and next PUBLISH
	}{
		{"w1", 1, 0, false}, {"w10", 10, 0, false}, {"w100", 100, 0, false},
		{"w1-tcp", 1, 0, true}, {"w10-tcp", 10, 0, true}, {"w100-tcp", 100, 0, true},
		{"w10-rtt300us", 10, 300 * time.Microsecond, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			sync := fdatasyncLatency(b, dir, 300*time.Millisecond)
			w, err := Open(Options{Path: filepath.Join(dir, "wal.db")})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			var pause func(int)
			switch {
			case c.tcp:
				pause = echoRoundTrips(b, c.writers)
			case c.rtt > 0:
				pause = func(int) { time.Sleep(c.rtt) }
			}
			b.ResetTimer()
			if _, err := closedLoop(w, c.writers, pause, int64(b.N), nil); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			// The disk is shared: the bound is the mean of a probe before
			// and one after the run.
			sync = (sync + fdatasyncLatency(b, dir, 300*time.Millisecond)) / 2
			st := w.Stats()
			var m dto.Metric
			if err := w.metrics.fsync.Write(&m); err != nil {
				b.Fatal(err)
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "records/s")
			b.ReportMetric(float64(sync.Microseconds()), "sync-µs")
			b.ReportMetric(rate/(float64(c.writers)/sync.Seconds()), "x-sync-bound")
			if n := m.GetHistogram().GetSampleCount(); n > 0 {
				mean := m.GetHistogram().GetSampleSum() / float64(n)
				b.ReportMetric(mean*1e6, "commit-µs")
				b.ReportMetric(rate/(float64(c.writers)/mean), "x-commit-bound")
				b.ReportMetric(float64(st.AppendedRecords)/float64(st.Commits), "records/commit")
			}
		})
	}
}

// echoRoundTrips returns a pause that makes one loopback TCP round trip of
// one byte on writer i's own connection to an echo server.
func echoRoundTrips(tb testing.TB, writers int) func(int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c)
		}
	}()
	conns := make([]net.Conn, writers)
	for i := range conns {
		if conns[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			tb.Fatal(err)
		}
		c := conns[i]
		tb.Cleanup(func() { c.Close() })
	}
	return func(i int) {
		b := []byte{0}
		if _, err := conns[i].Write(b); err != nil {
			tb.Error(err)
			return
		}
		if _, err := io.ReadFull(conns[i], b); err != nil {
			tb.Error(err)
		}
	}
}
