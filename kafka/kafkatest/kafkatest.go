// Package kafkatest has the test helpers both Kafka sides' tests use: a
// raw client that sends scripted requests (kmsg) over a real connection,
// and a builder of v2 record batches with a correct CRC in every codec.
// It is for tests only (like net/http/httptest), and imports nothing of
// package kafka, so that package's own tests can use it too.
package kafkatest

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
)

// Conn is a minimal Kafka client for scripted requests.
type Conn struct {
	T    testing.TB
	C    net.Conn
	Corr int32 // correlation id of the last request sent
}

// Dial connects to addr; the connection closes with the test.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Conn{T: t, C: c}
}

// EncodeRequest frames a request with header v1 or v2.
func EncodeRequest(corr int32, clientID string, req kmsg.Request) []byte {
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

// RoundTrip sends req and decodes its response; an error fails the test.
func (c *Conn) RoundTrip(req kmsg.Request) kmsg.Response {
	c.T.Helper()
	resp, err := c.TryRoundTrip(req)
	if err != nil {
		c.T.Fatal(err)
	}
	return resp
}

// TryRoundTrip sends req and decodes its response.
func (c *Conn) TryRoundTrip(req kmsg.Request) (kmsg.Response, error) {
	c.Corr++
	c.C.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.C.Write(EncodeRequest(c.Corr, "raw-client", req)); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(c.C, n[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c.C, frame); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(frame)); got != c.Corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, c.Corr)
	}
	body := frame[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 { // ApiVersions answers with header v0
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode response: %w", err)
	}
	return resp, nil
}

// ExpectClosed asserts the server closes the connection.
func (c *Conn) ExpectClosed() {
	c.T.Helper()
	c.C.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1024)
	for {
		_, err := c.C.Read(buf)
		if err == nil {
			continue
		}
		if err == io.EOF || IsConnReset(err) {
			return
		}
		c.T.Fatalf("connection not closed by server: %v", err)
	}
}

// IsConnReset reports a connection reset or broken pipe.
func IsConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		err != nil && (bytes.Contains([]byte(err.Error()), []byte("reset")) || bytes.Contains([]byte(err.Error()), []byte("broken pipe")))
}

// Rec is a record of a test batch.
type Rec struct {
	Key, Value []byte
	Headers    []tributary.Header
	TSDelta    int64
}

// BatchOpts describes a test batch.
type BatchOpts struct {
	PID     int64
	Epoch   int16
	Seq     int32
	Codec   int16
	Attrs   int16 // extra attribute bits
	FirstTS int64
}

func appendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendVarBytes(b, v []byte) []byte {
	if v == nil {
		return appendVarint(b, -1)
	}
	return append(appendVarint(b, int64(len(v))), v...)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch encodes a v2 record batch with a correct CRC.
func Batch(o BatchOpts, recs ...Rec) []byte {
	var body []byte
	for i, r := range recs {
		var rb []byte
		rb = append(rb, 0)
		rb = appendVarint(rb, r.TSDelta)
		rb = appendVarint(rb, int64(i))
		rb = appendVarBytes(rb, r.Key)
		rb = appendVarBytes(rb, r.Value)
		rb = appendVarint(rb, int64(len(r.Headers)))
		for _, h := range r.Headers {
			rb = appendVarBytes(rb, []byte(h.Key))
			rb = appendVarBytes(rb, h.Value)
		}
		body = appendVarint(body, int64(len(rb)))
		body = append(body, rb...)
	}
	body = Compress(o.Codec, body)
	const headerLen = 61
	b := make([]byte, 0, headerLen+len(body))
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(headerLen-12+len(body)))
	b = binary.BigEndian.AppendUint32(b, 0) // leader epoch
	b = append(b, 2)
	b = binary.BigEndian.AppendUint32(b, 0) // crc, below
	b = binary.BigEndian.AppendUint16(b, uint16(o.Codec|o.Attrs))
	b = binary.BigEndian.AppendUint32(b, uint32(len(recs)-1))
	b = binary.BigEndian.AppendUint64(b, uint64(o.FirstTS))
	b = binary.BigEndian.AppendUint64(b, uint64(o.FirstTS))
	b = binary.BigEndian.AppendUint64(b, uint64(o.PID))
	b = binary.BigEndian.AppendUint16(b, uint16(o.Epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(o.Seq))
	b = binary.BigEndian.AppendUint32(b, uint32(len(recs)))
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// Compress compresses in with a Kafka codec (0 none, 1 gzip, 2 snappy, 3
// lz4, 4 zstd).
func Compress(codec int16, in []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case 0:
		return in
	case 1:
		w := gzip.NewWriter(&buf)
		w.Write(in)
		w.Close()
	case 2:
		return s2.EncodeSnappy(nil, in)
	case 3:
		w := lz4.NewWriter(&buf)
		w.Write(in)
		w.Close()
	case 4:
		w, _ := zstd.NewWriter(&buf)
		w.Write(in)
		w.Close()
	}
	return buf.Bytes()
}

// WriteFuzzSeeds writes seeds as the corpus of fuzz target fuzz under
// testdata/fuzz, in go test's corpus file format.
func WriteFuzzSeeds(t testing.TB, fuzz string, seeds map[string][]byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", fuzz)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range seeds {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
