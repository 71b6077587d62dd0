// Package testkit holds the helpers every package's tests share: a polling
// helper in place of sleeps, the seed of randomised tests, and a test
// certificate authority (CA: server, client and expired certificates as
// PEM files, for TLS tests of any package and the e2e tests). It imports
// nothing of the module, so that any package's internal tests (wal's
// included) can use it without an import cycle. Fault injection lives in
// package fault.
package testkit

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// MinWait is the shortest time Eventually waits before it fails. A
// deadline in a test is there to end a test that hangs, not to time the
// code: on a machine busy with other work (CI beside other jobs, the whole
// suite with -race on two cores) a condition that holds within
// milliseconds when idle took more than the 5 s many tests asked for. How
// fast something happens is measured in make bench.
const MinWait = 30 * time.Second

// Eventually polls cond until it holds, failing tb (Fatalf) with what once
// timeout (at least MinWait) has passed. The poll interval starts at a
// millisecond and grows to 10ms, so a condition that holds soon is seen
// soon and a long wait does not spin.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	timeout = max(timeout, MinWait)
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// SeedEnv names the environment variable that overrides the seed of every
// randomised test: TRIBUTARY_TEST_SEED=1234 go test -run TestX ./pkg/
// repeats a run whose log said "seed 1234".
const SeedEnv = "TRIBUTARY_TEST_SEED"

// EnvSeed returns the seed SeedEnv sets, if it is set.
func EnvSeed(tb testing.TB) (uint64, bool) {
	tb.Helper()
	v, ok := os.LookupEnv(SeedEnv)
	if !ok || v == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		tb.Fatalf("%s=%q: %v", SeedEnv, v, err)
	}
	return n, true
}

// Seed returns the seed of a randomised test and logs it: SeedEnv's value
// when set; otherwise def, the test's own fixed seed; and when def is 0, a
// seed from the clock (a different run each time).
func Seed(tb testing.TB, def uint64) uint64 {
	tb.Helper()
	seed, ok := EnvSeed(tb)
	switch {
	case ok:
	case def != 0:
		seed = def
	default:
		seed = uint64(time.Now().UnixNano())
	}
	tb.Logf("seed %d (repeat with %s=%d)", seed, SeedEnv, seed)
	return seed
}

// Rand is a generator seeded by Seed(tb, def): rand.NewPCG(seed, stream).
// A test that used rand.NewPCG(a, b) keeps its sequence with Rand(tb, a, b).
func Rand(tb testing.TB, def, stream uint64) *rand.Rand {
	tb.Helper()
	return rand.New(rand.NewPCG(Seed(tb, def), stream))
}

// SyncBuffer collects log output (a slog handler's writer) for assertions
// while the code under test goes on writing.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
