package uplink

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/wal"
)

// BenchmarkSyncPass: the time of one pass committing 20,000 records of
// 256-byte payloads (the burst on the uplink's goroutine at commit time),
// with the records encoded at the pass (off) or pre-encoded as they
// landed (on: the pre-encoding not timed — it ran spread out before).
func BenchmarkSyncPass(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("continuous=%v", on), func(b *testing.B) {
			ctx := context.Background()
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e := openEnv(b, wal.Options{}, "")
				u := New(Config{Node: "n1", ContinuousEncoding: on, Logger: quietLogger()}, e.wal, e.cat, e.bucket)
				if _, err := e.cat.EnsureTable(ctx, "b.pass"); err != nil {
					b.Fatal(err)
				}
				appendMany(b, e, "b.pass", 0, 0, strings.Repeat("x", 250), 20000)
				if on {
					preencodeAll(ctx, u)
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
		})
	}
}
