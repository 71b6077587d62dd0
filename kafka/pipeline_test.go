package kafka

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/internal/testkit"
)

// starting starts every Metadata request (Starter) and finishes request
// with correlation id c only once release[c] is closed; ApiVersions is
// answered inline by Handle.
type starting struct {
	mu      sync.Mutex
	started []int32
	release map[int32]chan struct{}
}

func (h *starting) StartRequest(ctx context.Context, req *Request) (func() (kmsg.Response, bool), bool) {
	if req.Key != MetadataKey {
		return nil, false
	}
	h.mu.Lock()
	h.started = append(h.started, req.CorrID)
	ch := h.release[req.CorrID]
	h.mu.Unlock()
	return func() (kmsg.Response, bool) {
		<-ch
		return req.Body.(*kmsg.MetadataRequest).ResponseKind(), false
	}, true
}

func (h *starting) Handle(ctx context.Context, req *Request) (kmsg.Response, bool) {
	return HandleApiVersions(req, req.Body.(*kmsg.ApiVersionsRequest), APIs{ApiVersionsKey: {0, 3}, MetadataKey: {0, 12}}), false
}

func (h *starting) startedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.started)
}

// frameCorr is frame with correlation id corr.
func frameCorr(req kmsg.Request, corr int32) []byte {
	b := frame(req)
	binary.BigEndian.PutUint32(b[8:], uint32(corr))
	return b
}

// TestPipelinedInOrder: a connection starts up to max_pipelined_requests
// requests while earlier ones are unfinished, reads no further until one
// is answered, and writes every response — also an inline one queued
// behind started ones — in request order, whatever order they finish in.
func TestPipelinedInOrder(t *testing.T) {
	const depth = 3
	h := &starting{release: map[int32]chan struct{}{}}
	for c := range int32(8) {
		h.release[c] = make(chan struct{})
	}
	s := startTestServer(t, Config{Pipelining: Pipelining{MaxPipelinedRequests: depth}}, h)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.Write(frameCorr(&kmsg.ApiVersionsRequest{Version: 0}, 100)) // the handshake
	if _, err := ReadFrame(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	// Metadata 0, 1, ApiVersions 101, Metadata 2..5.
	var out []byte
	out = append(out, frameCorr(&kmsg.MetadataRequest{Version: 1}, 0)...)
	out = append(out, frameCorr(&kmsg.MetadataRequest{Version: 1}, 1)...)
	out = append(out, frameCorr(&kmsg.ApiVersionsRequest{Version: 0}, 101)...)
	for corr := int32(2); corr < 6; corr++ {
		out = append(out, frameCorr(&kmsg.MetadataRequest{Version: 1}, corr)...)
	}
	c.Write(out)
	// Requests 0, 1 and the inline 101 fill the pipeline: 2 is not read.
	testkit.Eventually(t, 5*time.Second, "two requests started", func() bool { return h.startedCount() == 2 })
	time.Sleep(200 * time.Millisecond)
	if n := h.startedCount(); n != 2 {
		t.Fatalf("%d requests started with a pipeline of %d holding 3", n, depth)
	}
	// Finishing 1 first answers nothing (0 is first in line) and frees
	// nothing.
	close(h.release[1])
	time.Sleep(200 * time.Millisecond)
	if n := h.startedCount(); n != 2 {
		t.Fatalf("%d requests started after a later one finished", n)
	}
	close(h.release[5])
	close(h.release[4])
	close(h.release[3])
	close(h.release[2])
	close(h.release[0])
	want := []int32{0, 1, 101, 2, 3, 4, 5}
	for i, w := range want {
		f, err := ReadFrame(c, 1<<20)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if got := int32(binary.BigEndian.Uint32(f)); got != w {
			t.Fatalf("response %d has correlation id %d, want %d (order %v)", i, got, w, want)
		}
	}
	if st := s.Stats(); st.InflightBytes != 0 || st.Pipelined < 3 {
		t.Fatalf("after every answer: in-flight bytes %d, pipelined %d", st.InflightBytes, st.Pipelined)
	}
}

// TestPipelinedFlushedBeforeClose: a malformed frame after started
// requests closes the connection only after their responses are written.
func TestPipelinedFlushedBeforeClose(t *testing.T) {
	h := &starting{release: map[int32]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}}
	s := startTestServer(t, Config{}, h)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.Write(frameCorr(&kmsg.ApiVersionsRequest{Version: 0}, 100))
	if _, err := ReadFrame(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	var out []byte
	out = append(out, frameCorr(&kmsg.MetadataRequest{Version: 1}, 0)...)
	out = append(out, frameCorr(&kmsg.MetadataRequest{Version: 1}, 1)...)
	out = append(out, 0, 0, 0, 12, 0x7f, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // unknown api key
	c.Write(out)
	testkit.Eventually(t, 5*time.Second, "both requests started", func() bool { return h.startedCount() == 2 })
	testkit.Eventually(t, 5*time.Second, "the malformed frame counted", func() bool { return s.Stats().ClosedMalformed == 1 })
	close(h.release[1])
	close(h.release[0])
	for i := range int32(2) {
		f, err := ReadFrame(c, 1<<20)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if got := int32(binary.BigEndian.Uint32(f)); got != i {
			t.Fatalf("response %d has correlation id %d", i, got)
		}
	}
	if _, err := ReadFrame(c, 1<<20); err == nil {
		t.Fatal("connection open after the malformed frame's predecessors were answered")
	}
}
