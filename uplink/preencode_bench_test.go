package uplink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/tables/typed"
	"github.com/tributary-io/tributary/wal"
)

// BenchmarkSyncPass: the time of one pass committing 20,000 records (the
// burst on the uplink's goroutine at commit time) of a raw stream
// (256-byte payloads) or an infer stream (telemetry JSON of ~100 bytes,
// typedJSON, its columns already in the table), with the records encoded
// at the pass (off) or pre-encoded as they landed (on: the pre-encoding
// not timed — it ran spread out before; pre-ms/pass is what it took).
func BenchmarkSyncPass(b *testing.B) {
	for _, mode := range []string{"raw", "infer"} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/continuous=%v", mode, on), func(b *testing.B) { benchSyncPass(b, mode, on) })
		}
	}
}

func benchSyncPass(b *testing.B, mode string, on bool) {
	ctx := context.Background()
	var total, preTotal time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := openEnv(b, wal.Options{}, "")
		cfg := Config{Node: "n1", ContinuousEncoding: on, Logger: quietLogger(), QuarantineDir: b.TempDir()}
		if mode == "infer" {
			cfg.Payloads = map[string]typed.Policy{"b.pass": typedPolicies["infer"]}
		}
		u := New(cfg, e.wal, e.cat, e.bucket)
		if _, err := e.cat.EnsureTable(ctx, "b.pass"); err != nil {
			b.Fatal(err)
		}
		if mode == "infer" {
			appendPayloads(b, e, "b.pass", 0, payloads(0, 5, typedJSON))
			if err := u.SyncAll(ctx); err != nil { // the columns
				b.Fatal(err)
			}
			appendPayloads(b, e, "b.pass", 0, payloads(5, 20000, typedJSON))
		} else {
			appendMany(b, e, "b.pass", 0, 0, strings.Repeat("x", 250), 20000)
		}
		if on {
			start := time.Now()
			preencodeAll(ctx, u)
			preTotal += time.Since(start)
		}
		b.StartTimer()
		start := time.Now()
		if err := u.SyncAll(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		if on && preCount(u, "used") != 1 {
			b.Fatal("the pre-encoded file was not used")
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/pass")
	b.ReportMetric(float64(preTotal.Microseconds())/float64(b.N)/1000, "pre-ms/pass")
}
