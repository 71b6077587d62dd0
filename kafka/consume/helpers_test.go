package consume

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

// Test helpers shared by this package's tests; the produce side has the
// same raw client in kafka/produce/helpers_test.go.

// rawConn is a minimal Kafka client for scripted requests.
type rawConn struct {
	t    testing.TB
	c    net.Conn
	corr int32
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

// encodeRequest frames a request with header v1 or v2.
func encodeRequest(corr int32, clientID string, req kmsg.Request) []byte {
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// roundTrip sends req and decodes the response into resp.
func (rc *rawConn) roundTrip(req kmsg.Request) kmsg.Response {
	rc.t.Helper()
	resp, err := rc.tryRoundTrip(req)
	if err != nil {
		rc.t.Fatal(err)
	}
	return resp
}

func (rc *rawConn) tryRoundTrip(req kmsg.Request) (kmsg.Response, error) {
	rc.corr++
	rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.c.Write(encodeRequest(rc.corr, "raw-client", req)); err != nil {
		return nil, err
	}
	frame, err := kafka.ReadFrame(rc.c, 1<<30)
	if err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(frame)); got != rc.corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, rc.corr)
	}
	body := frame[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != kafka.ApiVersionsKey {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	return resp, nil
}

// expectClosed asserts the server closes the connection.
func (rc *rawConn) expectClosed() {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1024)
	for {
		_, err := rc.c.Read(buf)
		if err == nil {
			continue
		}
		if err == io.EOF || isConnReset(err) {
			return
		}
		rc.t.Fatalf("connection not closed by server: %v", err)
	}
}

func isConnReset(err error) bool {
	return err != nil && (bytes.Contains([]byte(err.Error()), []byte("reset")) || bytes.Contains([]byte(err.Error()), []byte("broken pipe")))
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// testWriter sends server logs to t.Log (shown for failing tests only).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
