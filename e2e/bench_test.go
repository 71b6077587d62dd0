//go:build bench

package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/tables"
)

// The load runs of issue 2, measured in ONE run with the same load
// generator (firmware-sim) against Tributary and Debian's mosquitto:
//
//	go test -tags bench -run TestBench -v ./e2e/     (make bench)
//
// Durations can be stretched with TRIBUTARY_BENCH_SECONDS (default 10);
// TRIBUTARY_BENCH_PRODUCE_PROFILE names a file that keeps the Kafka
// produce run's CPU profile of the node.

func benchSeconds() time.Duration {
	if v := os.Getenv("TRIBUTARY_BENCH_SECONDS"); v != "" {
		var n int
		fmt.Sscan(v, &n)
		if n > 0 {
			return time.Duration(n) * time.Second
		}
	}
	return 10 * time.Second
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startMosquitto runs Debian's mosquitto 2 with its default settings
// (no persistence) on a loopback port.
func startMosquitto(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto"
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("mosquitto not installed (Debian package mosquitto; make bench installs it)")
		}
	}
	addr := freePort(t)
	host, port, _ := strings.Cut(addr, ":")
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listener %s %s\nallow_anonymous true\n", port, host)), 0o644)
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, 10*time.Second, "mosquitto listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr
}

func load(t *testing.T, addr string, qos byte, devices int, rate float64, d time.Duration, progress func(firmwaresim.Summary)) firmwaresim.Summary {
	t.Helper()
	return loadInFlight(t, addr, qos, devices, 1, rate, d, progress)
}

// loadInFlight is load with up to inFlight unacknowledged QoS 1/2
// publishes per device.
func loadInFlight(t *testing.T, addr string, qos byte, devices, inFlight int, rate float64, d time.Duration, progress func(firmwaresim.Summary)) firmwaresim.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+60*time.Second)
	defer cancel()
	sum, err := firmwaresim.Run(ctx, firmwaresim.Config{Broker: "tcp://" + addr, Devices: devices, InFlight: inFlight, Rate: rate, QoS: qos,
		PayloadSize: 256, Duration: d, ClientIDPrefix: fmt.Sprintf("bench%d", time.Now().UnixNano()%1e6),
		Progress: progress, ProgressEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("load against %s: %v", addr, err)
	}
	return sum
}

// TestBenchFreshness: at 10,000 msg/s (100 devices × 100 msg/s) the time
// from PUBACK to the row being visible in an Iceberg scan, and what the
// object store sees per message.
func TestBenchFreshness(t *testing.T) {
	d := benchSeconds()
	dir := t.TempDir()
	p := startDev(t, dir, "--commit-interval", "1s")
	ctx := context.Background()

	type sample struct {
		at time.Time
		n  int64
	}
	var mu sync.Mutex
	var acks, vis []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var cat *tables.Catalog
		for {
			select {
			case <-stop:
				if cat != nil {
					cat.Close()
				}
				return
			case <-time.After(50 * time.Millisecond):
			}
			if cat == nil {
				c, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")})
				if err != nil {
					continue
				}
				cat = c
			}
			tbl, err := cat.LoadTable(ctx, "factory.telemetry")
			if err != nil {
				continue
			}
			var n int64
			for _, hw := range tables.HighWaters(tbl) {
				n += hw
			}
			mu.Lock()
			vis = append(vis, sample{time.Now(), n})
			mu.Unlock()
		}
	}()
	// Open loop: up to 16 publishes in flight per device keep the schedule
	// when a PUBACK takes longer than the 10 ms between two messages (with
	// one in flight a device falls behind and the rate offered is not met).
	sum := loadInFlight(t, p.MQTT, 1, 100, 16, 100, d, func(s firmwaresim.Summary) {
		mu.Lock()
		acks = append(acks, sample{time.Now(), s.Acked})
		mu.Unlock()
	})
	// Wait for the last rows to become visible.
	waitFor(t, 30*time.Second, "all rows visible", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(vis) > 0 && vis[len(vis)-1].n >= sum.Acked
	})
	close(stop)
	wg.Wait()
	var delays []time.Duration
	first := func(ss []sample, k int64) (time.Time, bool) {
		i := sort.Search(len(ss), func(i int) bool { return ss[i].n >= k })
		if i == len(ss) {
			return time.Time{}, false
		}
		return ss[i].at, true
	}
	for k := int64(1); k <= sum.Acked; k += max(1, sum.Acked/2000) {
		ta, ok1 := first(acks, k)
		tv, ok2 := first(vis, k)
		if ok1 && ok2 {
			delays = append(delays, max(0, tv.Sub(ta)))
		}
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	pct := func(q float64) time.Duration { return delays[int(q*float64(len(delays)-1))] }
	p.stop()
	var files, bytes int64
	filepath.WalkDir(filepath.Join(dir, "warehouse"), func(path string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			if info, err := de.Info(); err == nil {
				files++
				bytes += info.Size()
			}
		}
		return nil
	})
	rows := readTable(t, dir, "factory.telemetry")
	var payload int64
	for _, r := range rows {
		payload += int64(len(r.Value))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nFreshness at %.0f msg/s offered (achieved %.0f msg/s, %d acked), commit interval 1s, %s\n", 100.0*100, sum.MsgsPerSec(), sum.Acked, d)
	fmt.Fprintf(&b, "PUBACK -> visible in Iceberg scan: p50 %s, p99 %s, max %s (sampling error ±50ms)\n",
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond))
	fmt.Fprintf(&b, "PUBACK latency at that rate: p50 %s, p99 %s\n", sum.Latency.P50.Round(10*time.Microsecond), sum.Latency.P99.Round(10*time.Microsecond))
	fmt.Fprintf(&b, "object store: %d objects, %d bytes for %d rows (%.1f bytes/message incl. metadata; payload %.0f bytes/message); %.1f object writes per committed payload MB\n",
		files, bytes, len(rows), float64(bytes)/float64(len(rows)), float64(payload)/float64(len(rows)), float64(files)/(float64(payload)/(1<<20)))
	t.Log(b.String())
	fmt.Print(b.String())
}

// TestBenchKafkaProduce: kgo with default batching, acks=all, 1 KiB
// records, against the edge node (fsync per batch) and franz-go's
// in-memory kfake broker, in the same run.
// produceResult is what produceLoad measured.
type produceResult struct {
	recs, bytes float64 // records/s, MiB/s
	p50, p99    time.Duration
}

// produceLoad produces 1 KiB records to factory.telemetry at addr for d
// with kgo's default batching and acks=all (opts add TLS, SASL, ...).
func produceLoad(t *testing.T, addr string, d time.Duration, opts ...kgo.Opt) produceResult {
	t.Helper()
	return produceLoadTo(t, addr, "factory.telemetry", d, opts...)
}

// produceLoadTo is produceLoad to topic.
func produceLoadTo(t *testing.T, addr, topic string, d time.Duration, opts ...kgo.Opt) produceResult {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
		kgo.AllowAutoTopicCreation(), kgo.RequiredAcks(kgo.AllISRAcks())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("warm-up")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1024)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var n int64
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for time.Now().Before(deadline) {
		sent := time.Now()
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Value: val}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				t.Error(err)
				return
			}
			l := time.Since(sent)
			mu.Lock()
			n++
			if n%16 == 0 {
				lat = append(lat, l)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return produceResult{recs: float64(n) / el.Seconds(), bytes: float64(n) * 1024 / el.Seconds() / (1 << 20),
		p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}
}

func TestBenchKafkaProduce(t *testing.T) {
	d := kafkaBenchSeconds()
	dir := t.TempDir()
	direct := measureDirectWrite(t, dir)
	sec := filepath.Join(dir, "security.yaml")
	if err := os.WriteFile(sec, []byte("debug: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, filepath.Join(dir, "node"), "--commit-interval", "1s", "--wal-budget", "8GiB", "--maintenance=false", "--security", sec)
	// Not factory.telemetry: dev types that stream (firmware-sim's JSON),
	// so 1 KiB of letters would all go to its dead-letter table.
	const topic = "factory.kafka_bench"
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()

	// The WAL's depth, sampled every 5 s while tributary is loaded: the
	// uplink keeps pace when it stays bounded.
	stopSampling := make(chan struct{})
	var depth []string
	var maxDepth float64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		start := time.Now()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			v, _ := scrapeMetrics(t, p)
			maxDepth = max(maxDepth, v["tributary_wal_bytes"])
			depth = append(depth, fmt.Sprintf("%3.0fs %8.0f rec %7.1f MB", time.Since(start).Seconds(),
				v["tributary_wal_records"], v["tributary_wal_bytes"]/1e6))
		}
	}()
	profDone := make(chan string, 1)
	go func() {
		time.Sleep(5 * time.Second)
		out := filepath.Join(dir, "cpu.pprof")
		if f := os.Getenv("TRIBUTARY_BENCH_PRODUCE_PROFILE"); f != "" {
			out = f // kept for go tool pprof
		}
		profDone <- profileTop(t, p, 10, out)
	}()
	trib := produceLoadTo(t, p.Kafka, topic, d)
	close(stopSampling)
	<-sampled
	prof := <-profDone
	kf := produceLoadTo(t, fake.ListenAddrs()[0], topic, min(d, 15*time.Second))
	after := measureDirectWrite(t, dir) // the disk is shared: its bandwidth moves during the run
	load, _ := os.ReadFile("/proc/loadavg")

	var b strings.Builder
	fmt.Fprintf(&b, "\nKafka produce, kgo default batching, acks=all, 1 KiB records, %s against tributary (kfake %s)\n", d, min(d, 15*time.Second))
	fmt.Fprintf(&b, "disk: direct sequential write (O_DIRECT, 4 MiB writes) %.0f MB/s before, %.0f MB/s after the runs\n", direct, after)
	disk := (direct + after) / 2
	fmt.Fprintf(&b, "%-22s %12s %10s %10s %10s %8s\n", "broker", "records/s", "MB/s", "p50", "p99", "x disk")
	fmt.Fprintf(&b, "%-22s %12.0f %10.1f %10s %10s %8.2f\n", "tributary (fsync)", trib.recs, trib.bytes*1.048576, trib.p50.Round(10*time.Microsecond), trib.p99.Round(10*time.Microsecond), trib.bytes*1.048576/disk)
	fmt.Fprintf(&b, "%-22s %12.0f %10.1f %10s %10s %8.2f\n", "kfake (memory)", kf.recs, kf.bytes*1.048576, kf.p50.Round(10*time.Microsecond), kf.p99.Round(10*time.Microsecond), kf.bytes*1.048576/disk)
	fmt.Fprintf(&b, "tributary/disk: %.2f (target >= 0.5, sustained 60 s); tributary/kfake: %.2f\n", trib.bytes*1.048576/disk, trib.recs/kf.recs)
	fmt.Fprintf(&b, "WAL depth during the tributary run (max %.1f MB):\n  %s\n", maxDepth/1e6, strings.Join(depth, "\n  "))
	fmt.Fprintf(&b, "load average at the end: %s", load)
	fmt.Fprintf(&b, "CPU profile of the node (10 s at saturation):\n%s\n", prof)
	t.Log(b.String())
	fmt.Print(b.String())
	p.stop()
}

// kafkaBenchSeconds is the Kafka produce run's duration: 60 s (the
// target is sustained throughput), or TRIBUTARY_BENCH_SECONDS when set.
func kafkaBenchSeconds() time.Duration {
	if os.Getenv("TRIBUTARY_BENCH_SECONDS") != "" {
		return benchSeconds()
	}
	return 60 * time.Second
}

// measureDirectWrite returns dir's direct sequential write bandwidth in
// MB/s: 512 MiB in 4 MiB O_DIRECT writes (page cache bypassed), fsynced.
func measureDirectWrite(t *testing.T, dir string) float64 {
	t.Helper()
	name := filepath.Join(dir, "direct.bin")
	defer os.Remove(name)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_DIRECT, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const block = 4 << 20
	raw := make([]byte, block+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&raw[0]))&4095)
	buf := raw[off : off+block]
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	var n int64
	for n < 512<<20 {
		m, err := f.Write(buf)
		if err != nil {
			t.Fatal(err)
		}
		n += int64(m)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return float64(n) / 1e6 / time.Since(start).Seconds()
}
