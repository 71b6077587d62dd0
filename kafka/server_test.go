package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/listen"
)

// frame encodes req as a client would: size, header v1/v2, body.
func frame(req kmsg.Request) []byte {
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 7)
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 'c')
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// TestDecodeRequest: the API table decides what is admitted; ApiVersions
// of an unknown version is admitted as Unsupported, anything else outside
// the table is an error that closes the connection.
func TestDecodeRequest(t *testing.T) {
	apis := APIs{MetadataKey: {Min: 0, Max: 12}, ApiVersionsKey: ApiVersionsVersions}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	mdNew := kmsg.NewPtrMetadataRequest()
	mdNew.Version = 13
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	avNew := kmsg.NewPtrApiVersionsRequest()
	avNew.Version = 99
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 4
	for _, tc := range []struct {
		name        string
		req         kmsg.Request
		err         error
		unsupported bool
	}{
		{"metadata v12", md, nil, false},
		{"metadata v13", mdNew, ErrUnsupportedVers, false},
		{"apiversions v3", av, nil, false},
		{"apiversions v99", avNew, nil, true},
		{"fetch not in table", fetch, ErrUnsupportedAPI, false},
	} {
		f, err := ReadFrame(bytes.NewReader(frame(tc.req)), 1<<20)
		if err != nil {
			t.Fatalf("%s: read frame: %v", tc.name, err)
		}
		req, err := DecodeRequest(f, apis)
		if !errors.Is(err, tc.err) {
			t.Fatalf("%s: error %v, want %v", tc.name, err, tc.err)
		}
		if err != nil {
			continue
		}
		if req.Key != tc.req.Key() || req.CorrID != 7 || req.ClientID != "c" || req.Unsupported != tc.unsupported {
			t.Fatalf("%s: decoded %+v", tc.name, req)
		}
		if req.Unsupported {
			resp := HandleApiVersions(req, req.Body.(*kmsg.ApiVersionsRequest), apis).(*kmsg.ApiVersionsResponse)
			if resp.ErrorCode != CodeUnsupportedVersion || resp.GetVersion() != 0 || len(resp.ApiKeys) != 2 {
				t.Fatalf("%s: response %+v", tc.name, resp)
			}
			// ApiVersions responses use header v0: no tag byte after the
			// correlation id, whatever the version.
			out := AppendResponse(nil, req, resp)
			if int(binary.BigEndian.Uint32(out)) != len(out)-4 || binary.BigEndian.Uint32(out[4:]) != 7 {
				t.Fatalf("%s: bad framing", tc.name)
			}
		}
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0x7f, 0, 0, 0}), 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("huge frame: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0, 0, 0, 3, 1, 2, 3}), 1<<20); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short frame: %v", err)
	}
}

// panicky answers ApiVersions and panics on Metadata.
type panicky struct{}

func (panicky) Handle(ctx context.Context, req *Request) (kmsg.Response, bool) {
	if req.Key == 3 {
		var m map[string]int
		m["boom"]++
	}
	return HandleApiVersions(req, req.Body.(*kmsg.ApiVersionsRequest), APIs{ApiVersionsKey: {0, 3}, 3: {0, 12}}), false
}

// startTestServer starts a server on a loopback port with cfg (its
// Addr and Logger set here) answering ApiVersions and Metadata through h,
// and closes it when the test ends.
func startTestServer(t *testing.T, cfg Config, h Handler) *Server {
	t.Helper()
	cfg.Addr, cfg.Logger = "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := NewServer(cfg, "kafka-test", APIs{ApiVersionsKey: {0, 3}, MetadataKey: {0, 12}}, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestListenerDefences: a handler panic closes that connection only
// (counted); a socket that never sends a request is closed after the
// handshake deadline; a first frame over 1 MiB closes the connection.
func TestListenerDefences(t *testing.T) {
	s := startTestServer(t, Config{Limits: listen.Config{HandshakeTimeout: 300 * time.Millisecond}}, panicky{})
	addr := s.Addr()
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := io.ReadAll(c)
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
	silent, _ := net.Dial("tcp", addr)
	defer silent.Close()
	if !closed(silent) {
		t.Fatal("silent socket kept past the handshake deadline")
	}
	big, _ := net.Dial("tcp", addr)
	defer big.Close()
	big.Write([]byte{0x01, 0x00, 0x00, 0x00}) // a 16 MiB frame announced first
	if !closed(big) {
		t.Fatal("oversized first frame kept open")
	}
	bad, _ := net.Dial("tcp", addr)
	defer bad.Close()
	bad.Write(frame(&kmsg.MetadataRequest{Version: 1}))
	if !closed(bad) {
		t.Fatal("connection whose handler panicked left open")
	}
	// The connection is closed while the panic unwinds, before the
	// listener's recovery counts it: wait for the count.
	testkit.Eventually(t, 5*time.Second, "the panic and the handshake timeout counted", func() bool {
		st := s.ListenerStats()
		return st.Panics == 1 && st.HandshakeTimeouts == 1
	})
	good, _ := net.Dial("tcp", addr)
	defer good.Close()
	good.Write(frame(&kmsg.ApiVersionsRequest{Version: 0}))
	good.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := ReadFrame(good, 1<<20); err != nil {
		t.Fatalf("server stopped answering after a panic: %v", err)
	}
}

// holding answers ApiVersions at once and holds every Metadata request
// until release is closed.
type holding struct {
	handled atomic.Int64
	release chan struct{}
}

func (h *holding) Handle(ctx context.Context, req *Request) (kmsg.Response, bool) {
	if req.Key == MetadataKey {
		h.handled.Add(1)
		select {
		case <-h.release:
		case <-ctx.Done():
		}
		return req.Body.(*kmsg.MetadataRequest).ResponseKind(), false
	}
	return HandleApiVersions(req, req.Body.(*kmsg.ApiVersionsRequest), APIs{ApiVersionsKey: {0, 3}, MetadataKey: {0, 12}}), false
}

// TestInflightBytes: clients pipelining requests that the server has not
// answered cannot make it hold more than max_inflight_bytes across all
// connections: the frames beyond it stay unread (back-pressure, counted)
// and are served, none refused, once the held ones are answered.
func TestInflightBytes(t *testing.T) {
	const conns, pipelined, max = 10, 5, 8 << 10
	h := &holding{release: make(chan struct{})}
	s, err := NewServer(Config{Addr: "127.0.0.1:0", MaxFrameBytes: 4 << 10, Listener: Listener{MaxInflightBytes: max},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, "kafka-test", APIs{ApiVersionsKey: {0, 3}, MetadataKey: {0, 12}}, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Close(ctx)
	}()
	md := &kmsg.MetadataRequest{Version: 1, Topics: []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr(strings.Repeat("t", 3000))}}}
	big := frame(md)
	perFrame := int64(len(big))
	var cs []net.Conn
	for range conns {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(frame(&kmsg.ApiVersionsRequest{Version: 0})) // the handshake
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := ReadFrame(c, 1<<20); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		go func() {
			for range pipelined {
				if _, err := c.Write(big); err != nil {
					return
				}
			}
		}()
	}
	testkit.Eventually(t, 5*time.Second, "a connection waiting for in-flight bytes",
		func() bool { return s.Stats().InflightWaits > 0 && h.handled.Load() == max/perFrame })
	time.Sleep(100 * time.Millisecond)
	if st := s.Stats(); h.handled.Load() != max/perFrame || st.InflightBytes > max {
		t.Fatalf("held %d requests, %d bytes (max %d)", h.handled.Load(), st.InflightBytes, max)
	}
	close(h.release)
	for _, c := range cs {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for i := range pipelined {
			if _, err := ReadFrame(c, 1<<20); err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
		}
	}
	if st := s.Stats(); st.InflightBytes != 0 || h.handled.Load() != conns*pipelined {
		t.Fatalf("after: handled %d, stats %+v", h.handled.Load(), st)
	}
}

// TestInflightStrangers: connections that have not finished their
// handshake reserve their frames in a quarter of max_inflight_bytes too,
// so strangers announcing large first frames and trickling them cannot
// take the budget from admitted clients.
func TestInflightStrangers(t *testing.T) {
	h := &holding{release: make(chan struct{})}
	close(h.release) // answer at once
	s := startTestServer(t, Config{MaxFrameBytes: 4 << 20, Listener: Listener{MaxInflightBytes: 8 << 20}}, h)
	good, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	good.SetReadDeadline(time.Now().Add(5 * time.Second))
	good.Write(frame(&kmsg.ApiVersionsRequest{Version: 0}))
	if _, err := ReadFrame(good, 1<<20); err != nil {
		t.Fatal(err)
	}
	for range 4 { // each announces a 1 MiB first frame and sends 10 bytes of it
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(append(binary.BigEndian.AppendUint32(nil, 1<<20), make([]byte, 10)...))
	}
	testkit.Eventually(t, 5*time.Second, "strangers waiting for their share", func() bool { return s.Stats().InflightWaits >= 2 })
	if st := s.Stats(); st.InflightBytes > 2<<20+8 {
		t.Fatalf("strangers hold %d bytes, more than their share", st.InflightBytes)
	}
	good.Write(frame(&kmsg.MetadataRequest{Version: 1}))
	if _, err := ReadFrame(good, 1<<20); err != nil {
		t.Fatalf("admitted client not served while strangers hold their share: %v", err)
	}
}

// TestBodyTimeout: a client that announces a large frame and trickles its
// body is closed after kafka.body_timeout (plus a second per MiB), and
// the reservation it held is released; the next client is served.
func TestBodyTimeout(t *testing.T) {
	s := startTestServer(t, Config{MaxFrameBytes: 4 << 20, Listener: Listener{BodyTimeout: 200 * time.Millisecond}}, &holding{release: closedChan()})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(frame(&kmsg.ApiVersionsRequest{Version: 0}))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ReadFrame(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Write(binary.BigEndian.AppendUint32(nil, 3<<20)) // 3 MiB announced: 0.2 s + 3 s allowed
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 100 ms: never idle, never done
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := c.Write([]byte{0}); err != nil {
					return
				}
			}
		}
	}()
	testkit.Eventually(t, 5*time.Second, "the reservation held", func() bool { return s.Stats().InflightBytes >= 3<<20 })
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("trickling connection not closed: %v", err)
	}
	if d := time.Since(start); d < 3*time.Second || d > 6*time.Second {
		t.Errorf("closed after %v, want about 3.2s", d)
	}
	if st := s.Stats(); st.InflightBytes != 0 || st.ClosedMalformed != 1 {
		t.Errorf("after the close: %+v", st)
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
