package testkit

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf and Logf instead of
// stopping the test.
type recorder struct {
	testing.TB
	fatal, logs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = append(r.fatal, fmt.Sprintf(format, args...))
}
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func TestEventually(t *testing.T) {
	var n atomic.Int32
	Eventually(t, time.Second, "the third poll", func() bool { return n.Add(1) >= 3 })
	r := &recorder{TB: t}
	Eventually(r, 20*time.Millisecond, "never", func() bool { return false })
	if len(r.fatal) != 1 || !strings.Contains(r.fatal[0], "waiting for never") {
		t.Fatalf("fatal %q", r.fatal)
	}
}

func TestSeed(t *testing.T) {
	for _, tc := range []struct {
		env  string
		def  uint64
		want uint64 // 0: from the clock
	}{
		{"", 7, 7},
		{"42", 7, 42},
		{"42", 0, 42},
		{"", 0, 0},
	} {
		t.Setenv(SeedEnv, tc.env)
		r := &recorder{TB: t}
		got := Seed(r, tc.def)
		if tc.want != 0 && got != tc.want || tc.want == 0 && got == 0 {
			t.Fatalf("env %q def %d: seed %d, want %d", tc.env, tc.def, got, tc.want)
		}
		if len(r.logs) != 1 || !strings.Contains(r.logs[0], fmt.Sprint(got)) {
			t.Fatalf("seed not logged: %q", r.logs)
		}
	}
}
