package tables

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
)

// benchRecords are the two payload shapes issue 16 measures encoding on:
// firmware-sim's JSON telemetry (100 devices, the simulator's format and
// random walks) and 1 KiB random bytes. n consecutive offsets of one
// partition, accepted one millisecond apart.
func benchRecords(kind string, n int) []*tributary.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	const devices = 100
	temps := make([]float64, devices)
	for i := range temps {
		temps[i] = 18 + 8*rng.Float64()
	}
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	out := make([]*tributary.Record, n)
	for i := range out {
		d := i % devices
		ts := base.Add(time.Duration(i) * time.Millisecond)
		var v []byte
		switch kind {
		case "random1k":
			v = make([]byte, 1024)
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
		default:
			temps[d] += 0.02*(22-temps[d]) + 0.05*rng.NormFloat64()
			status := "ok"
			if rng.Float64() < 0.01 {
				status = "warn"
			}
			v = fmt.Appendf(nil, `{"device":"dev-%04d","line":"line-%d","seq":%d,"ts":"%s","temp_c":%s,"humidity":%s,"vibration_mm_s":%s,"status":"%s"}`,
				d, d%4, i/devices, ts.Format(time.RFC3339Nano),
				strconv.FormatFloat(temps[d], 'f', 2, 64), strconv.FormatFloat(40+5*rng.NormFloat64(), 'f', 1, 64),
				strconv.FormatFloat(math.Abs(1+0.3*rng.NormFloat64()), 'f', 2, 64), status)
		}
		out[i] = &tributary.Record{Stream: "bench.enc", Partition: 0, Offset: int64(i), Timestamp: ts.UnixMicro(),
			Topic: fmt.Sprintf("factory/line-%d/dev-%04d/telemetry", d%4, d), Value: v,
			Source: "mqtt", ClientID: fmt.Sprintf("dev-%04d", d), Node: "edge-1"}
	}
	return out
}

// BenchmarkWriteParquet measures the uplink's encoding: one op encodes
// 65,536 records as one file. Reported per record: bytes stored (B/rec),
// encoding time on one goroutine (ns/rec, wall; cpu-ns/rec, the process's
// CPU time, which includes the garbage collector's), and the payload bytes
// (in/rec).
//
//	go test -run XXX -bench WriteParquet -benchtime 5x ./tables/
func BenchmarkWriteParquet(b *testing.B) {
	const n = 65536
	for _, kind := range []string{"firmware", "random1k"} {
		recs := benchRecords(kind, n)
		var in int64
		for _, r := range recs {
			in += int64(len(r.Value))
		}
		b.Run(kind+"/raw", func(b *testing.B) {
			benchWrite(b, recs, in, func(w *bytes.Buffer) error { _, err := WriteParquet(w, recs); return err })
		})
		// The other zstd speeds (uplink.zstd_level), against the default.
		for _, l := range []int{3, 7} {
			o := ParquetOptions{ZstdLevel: l}
			b.Run(fmt.Sprintf("%s/raw-zstd%d", kind, l), func(b *testing.B) {
				benchWrite(b, recs, in, func(w *bytes.Buffer) error { _, err := o.WriteParquet(w, recs); return err })
			})
		}
		if kind != "firmware" {
			continue
		}
		b.Run(kind+"/infer", func(b *testing.B) {
			c, _ := openTestCatalog(b)
			sh, err := c.Shape(context.Background(), "bench.enc", inferPolicy, recs)
			if err != nil {
				b.Fatal(err)
			}
			benchWrite(b, recs, in, func(w *bytes.Buffer) error { _, err := WriteParquetShaped(w, recs, sh); return err })
		})
	}
}

func benchWrite(b *testing.B, recs []*tributary.Record, in int64, write func(*bytes.Buffer) error) {
	var buf bytes.Buffer
	cpu0 := processCPU()
	b.ResetTimer()
	for range b.N {
		buf.Reset()
		if err := write(&buf); err != nil {
			b.Fatal(err)
		}
	}
	cpu := processCPU() - cpu0
	n := float64(len(recs))
	// CPU time as well as wall time: on a shared machine the wall time
	// includes waiting for a core.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/n, "cpu-ns/rec")
	b.ReportMetric(float64(buf.Len())/n, "B/rec")
	b.ReportMetric(float64(in)/n, "in/rec")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/rec")
}

// processCPU is the user+system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
