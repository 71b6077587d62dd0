package consume

import (
	"hash/crc32"
	"strings"
	"testing"
)

// Test helpers shared by this package's tests; the produce side has the
// same raw client in kafka/produce/helpers_test.go.

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// testWriter sends server logs to t.Log (shown for failing tests only).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
