package consume

import (
	"hash/crc32"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// Test helpers shared by this package's tests; the produce side has the
// same raw client in kafka/produce/helpers_test.go.

// rawConn is a minimal Kafka client for scripted requests (kafkatest.Conn).
type rawConn struct{ *kafkatest.Conn }

func dialRaw(t testing.TB, addr string) *rawConn { return &rawConn{kafkatest.Dial(t, addr)} }

func encodeRequest(corr int32, clientID string, req kmsg.Request) []byte {
	return kafkatest.EncodeRequest(corr, clientID, req)
}

func (rc *rawConn) roundTrip(req kmsg.Request) kmsg.Response { rc.T.Helper(); return rc.RoundTrip(req) }

func (rc *rawConn) tryRoundTrip(req kmsg.Request) (kmsg.Response, error) { return rc.TryRoundTrip(req) }

func (rc *rawConn) expectClosed() { rc.T.Helper(); rc.ExpectClosed() }

func isConnReset(err error) bool { return kafkatest.IsConnReset(err) }

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// testWriter sends server logs to t.Log (shown for failing tests only).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
