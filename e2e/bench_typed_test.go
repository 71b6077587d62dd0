//go:build bench

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/tributary-io/tributary"
	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/typed"
)

// TestBenchTyped (issue 17): on firmware-sim's realistic JSON telemetry,
//
//  1. QoS 1 ingest, 100 closed-loop devices, into a raw and into an infer
//     stream (two dev nodes, one after the other): the ratio infer/raw;
//
//  2. bytes stored per message for raw and infer (one Parquet file of the
//     infer run's records, as compaction would write them), with the infer
//     file's bytes split into value, typed columns and the rest of the
//     envelope, each against the raw JSON bytes;
//
//  3. CPU per message of encoding raw, and of inference + typed encoding;
//
//  4. DuckDB over 1M such rows: a typed column against json_extract over
//     value, for SELECT device, avg(temp_c) … GROUP BY device.
//
//     go test -tags bench -run TestBenchTyped -v ./e2e/
func TestBenchTyped(t *testing.T) {
	d := benchSeconds()
	load0 := loadAvg()
	ingest := map[string]firmwaresim.Summary{}
	var inferDir string
	for _, mode := range []string{"raw", "infer"} {
		dir := t.TempDir()
		p := startDev(t, dir, "--payload", mode, "--commit-interval", "1s")
		ctx, cancel := context.WithTimeout(context.Background(), d+60*time.Second)
		sum, err := firmwaresim.Run(ctx, firmwaresim.Config{Broker: "tcp://" + p.MQTT, Devices: 100, QoS: 1, Duration: d,
			ClientIDPrefix: "typed-" + mode})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		ingest[mode] = sum
		waitFor(t, 120*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
		p.stop()
		if mode == "infer" {
			inferDir = dir
		}
	}

	// The infer run's records, renumbered as one partition's offsets.
	recs := readTable(t, inferDir, "factory.telemetry")
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	if len(recs) > 200_000 {
		recs = recs[:200_000]
	}
	var jsonBytes int64
	for i, r := range recs {
		r.Partition, r.Offset = 0, int64(i)
		jsonBytes += int64(len(r.Value))
	}
	n := float64(len(recs))
	ctx := context.Background()
	dir := t.TempDir()
	cat, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	pol := typed.Policy{Mode: typed.Infer, Timestamps: true}
	if _, err := cat.Shape(ctx, "bench.typed", pol, recs[:1000]); err != nil { // the columns exist before the timed run
		t.Fatal(err)
	}

	var rawBuf, inferBuf bytes.Buffer
	rawCPU := cpuOf(func() {
		if _, err := tables.WriteParquet(&rawBuf, recs); err != nil {
			t.Fatal(err)
		}
	})
	var shapeCPU time.Duration
	inferCPU := cpuOf(func() {
		var sh *tables.Shaped
		shapeCPU = cpuOf(func() {
			if sh, err = cat.Shape(ctx, "bench.typed", pol, recs); err != nil {
				t.Fatal(err)
			}
		})
		if _, err := tables.WriteParquetShaped(&inferBuf, recs, sh); err != nil {
			t.Fatal(err)
		}
	})
	cols := columnBytes(t, inferBuf.Bytes())
	// The other zstd speeds of uplink.zstd_level on the same records.
	type levelCost struct {
		bytes int
		cpu   time.Duration
	}
	levels := map[int]levelCost{}
	for _, l := range []int{3, 7} {
		var buf bytes.Buffer
		cpu := cpuOf(func() {
			if _, err := (tables.ParquetOptions{ZstdLevel: l}).WriteParquet(&buf, recs); err != nil {
				t.Fatal(err)
			}
		})
		levels[l] = levelCost{buf.Len(), cpu}
	}

	// DuckDB over 1M rows (the records repeated, 8 files of 125k).
	const rows, perFile = 1_000_000, 125_000
	duckDir := t.TempDir()
	var files []string
	for f := 0; f < rows/perFile; f++ {
		batch := make([]*tributary.Record, perFile)
		for i := range batch {
			r := *recs[(f*perFile+i)%len(recs)]
			r.Offset = int64(f*perFile + i)
			batch[i] = &r
		}
		sh, err := cat.Shape(ctx, "bench.typed", pol, batch)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := tables.WriteParquetShaped(&buf, batch, sh); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(duckDir, fmt.Sprintf("f%d.parquet", f))
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	typedMS := duckTime(t, `SELECT device, avg(temp_c) AS t FROM FILES GROUP BY device`, files)
	jsonMS := duckTime(t, `SELECT json_extract_string(decode(value), '$.device') AS device, avg(CAST(json_extract(decode(value), '$.temp_c') AS DOUBLE)) AS t FROM FILES GROUP BY 1`, files)
	load1 := loadAvg()

	var b strings.Builder
	fmt.Fprintf(&b, "\nTyped columns on firmware-sim telemetry (load average %s before, %s after; 2 cores shared)\n", load0, load1)
	fmt.Fprintf(&b, "QoS 1 ingest, 100 closed-loop devices, %s per run:\n", d)
	for _, m := range []string{"raw", "infer"} {
		s := ingest[m]
		fmt.Fprintf(&b, "  %-6s %9.0f msgs/s  p50 %v  p99 %v  acked %d failed %d\n", m, s.MsgsPerSec(), s.Latency.P50, s.Latency.P99, s.Acked, s.Failed)
	}
	fmt.Fprintf(&b, "  infer/raw ingest ratio: %.2f (goal ≥ 0.9)\n", ingest["infer"].MsgsPerSec()/ingest["raw"].MsgsPerSec())
	fmt.Fprintf(&b, "Bytes stored per message, %d messages in one file, %.1f JSON bytes per message:\n", len(recs), float64(jsonBytes)/n)
	fmt.Fprintf(&b, "  raw    %6.1f B/msg  %.3f of the JSON bytes\n", float64(rawBuf.Len())/n, float64(rawBuf.Len())/float64(jsonBytes))
	fmt.Fprintf(&b, "  infer  %6.1f B/msg  %.3f of the JSON bytes; of which value %.1f (%.3f), typed columns %.1f (%.3f, goal ≤ 0.25), other envelope %.1f\n",
		float64(inferBuf.Len())/n, float64(inferBuf.Len())/float64(jsonBytes),
		float64(cols["value"])/n, float64(cols["value"])/float64(jsonBytes), float64(cols["typed"])/n, float64(cols["typed"])/float64(jsonBytes), float64(cols["envelope"])/n)
	fmt.Fprintf(&b, "  raw at zstd level 1 (default) %.1f B/msg %.2f µs/msg; level 3: %.1f B/msg %.2f µs/msg; level 7: %.1f B/msg %.2f µs/msg\n",
		float64(rawBuf.Len())/n, us(rawCPU, n), float64(levels[3].bytes)/n, us(levels[3].cpu, n), float64(levels[7].bytes)/n, us(levels[7].cpu, n))
	fmt.Fprintf(&b, "CPU per message (one goroutine): raw encoding %.2f µs; infer %.2f µs (decode + check %.2f µs, encoding with typed columns %.2f µs); added by infer %.2f µs\n",
		us(rawCPU, n), us(inferCPU, n), us(shapeCPU, n), us(inferCPU-shapeCPU, n), us(inferCPU-rawCPU, n))
	fmt.Fprintf(&b, "DuckDB, %d rows in %d files, SELECT device, avg(temp_c) … GROUP BY device (best of 3): typed column %.0f ms, json_extract over value %.0f ms (%.1fx)\n",
		rows, len(files), typedMS, jsonMS, jsonMS/typedMS)
	t.Log(b.String())
}

func us(d time.Duration, n float64) float64 { return float64(d.Microseconds()) / n }

// cpuOf is the user+system CPU time this process spent in fn.
func cpuOf(fn func()) time.Duration {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	fn()
	return cpu() - start
}

// columnBytes sums a Parquet file's compressed column chunk sizes into
// "value", "typed" (columns beyond the envelope) and "envelope" (the rest).
func columnBytes(t *testing.T, b []byte) map[string]int64 {
	t.Helper()
	pr, err := file.NewParquetReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	envelope := map[string]bool{}
	for _, f := range tables.ArrowSchema().Fields() {
		envelope[f.Name] = true
	}
	out := map[string]int64{}
	md := pr.MetaData()
	for rg := 0; rg < md.NumRowGroups(); rg++ {
		g := md.RowGroup(rg)
		for c := 0; c < g.NumColumns(); c++ {
			cc, err := g.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			top := strings.Split(cc.PathInSchema().String(), ".")[0]
			switch {
			case top == tables.ColValue:
				out["value"] += cc.TotalCompressedSize()
			case envelope[top]:
				out["envelope"] += cc.TotalCompressedSize()
			default:
				out["typed"] += cc.TotalCompressedSize()
			}
		}
	}
	return out
}

// duckTime is the best of three DuckDB runs of sql over files, in ms.
func duckTime(t *testing.T, sql string, files []string) float64 {
	t.Helper()
	out := duckScript(t, "timeq.mjs", append([]string{"3", sql}, files...)...)
	var r struct {
		MS   float64 `json:"ms"`
		Rows int     `json:"rows"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil || r.Rows == 0 {
		t.Fatalf("duckdb output %q: %v", out, err)
	}
	return r.MS
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
