package peer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

func listenPeer(t *testing.T, id string) *Peer {
	t.Helper()
	p, err := Listen(Config{NodeID: id, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCallAndOrder(t *testing.T) {
	a, b := listenPeer(t, "a"), listenPeer(t, "b")
	var mu sync.Mutex
	var seen []int
	var froms []string
	// Replies complete out of order (odd requests reply later), yet the
	// handler sees requests in the order they were sent.
	b.Handle(40, func(from string, p []byte, reply func([]byte, error)) {
		n := int(binary.BigEndian.Uint32(p))
		mu.Lock()
		seen = append(seen, n)
		froms = append(froms, from)
		mu.Unlock()
		if n%2 == 1 {
			go func() { time.Sleep(time.Millisecond); reply(p, nil) }()
			return
		}
		reply(p, nil)
	})
	l := a.Link("b", b.Addr())
	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		var buf [4]byte
		binary.BigEndian.PutUint32(buf[:], uint32(i))
		l.Go(40, buf[:], func(resp []byte, err error) {
			defer wg.Done()
			if err != nil {
				errs <- err
			} else if !bytes.Equal(resp, buf[:]) {
				errs <- fmt.Errorf("reply %x for request %d", resp, i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, v := range seen {
		if v != i || froms[i] != "a" {
			t.Fatalf("request %d handled as %d from %q", i, v, froms[i])
		}
	}
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
	if up, _, _ := l.Health(); !up {
		t.Fatal("link not up after calls")
	}
}

func TestRemoteErrorAndUnknownType(t *testing.T) {
	a, b := listenPeer(t, "a"), listenPeer(t, "b")
	b.Handle(41, func(_ string, _ []byte, reply func([]byte, error)) { reply(nil, errors.New("fenced: epoch 3")) })
	l := a.Link("b", b.Addr())
	_, err := l.Call(ctx(t), 41, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Msg != "fenced: epoch 3" {
		t.Fatalf("err = %v, want RemoteError fenced", err)
	}
	_, err = l.Call(ctx(t), 99, nil)
	if !errors.As(err, &re) || !strings.Contains(re.Msg, "no handler for message type 99") {
		t.Fatalf("err = %v", err)
	}
	// The link survives remote errors.
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
}

func TestPendingFailWhenRemoteDiesAndRedial(t *testing.T) {
	a := listenPeer(t, "a")
	b, err := Listen(Config{NodeID: "b", Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	block := make(chan struct{})
	b.Handle(42, func(_ string, _ []byte, reply func([]byte, error)) {
		go func() { <-block; reply(nil, nil) }()
	})
	l := a.Link("b", addr)
	got := make(chan error, 1)
	l.Go(42, []byte("x"), func(_ []byte, err error) { got <- err })
	// Let the request reach b, then kill b: the pending request fails.
	testkit.Eventually(t, 10*time.Second, "b to count the request", func() bool { return b.Stats().RequestsIn == 1 })
	close(block)
	b.Close(context.Background())
	if err := <-got; err != nil && !errors.Is(err, ErrLinkDown) {
		t.Fatalf("pending request: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the link to report down", func() bool { up, _, _ := l.Health(); return !up })
	if _, err := l.Call(ctx(t), TypePing, nil); !errors.Is(err, ErrLinkDown) {
		t.Fatalf("call to a dead node: %v, want ErrLinkDown", err)
	}
	_, since, _ := l.Health()
	if since.IsZero() {
		t.Fatal("down link without a down-since time")
	}
	// b comes back on the same address: the next call redials.
	var b2 *Peer
	testkit.Eventually(t, 10*time.Second, "b to listen again on its address", func() bool { b2, err = Listen(Config{NodeID: "b", Addr: addr}); return err == nil })
	defer b2.Close(context.Background())
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
}

func TestWrongNodeAtAddress(t *testing.T) {
	a, c := listenPeer(t, "a"), listenPeer(t, "c")
	l := a.Link("b", c.Addr())
	_, err := l.Call(ctx(t), TypePing, nil)
	if !errors.Is(err, ErrLinkDown) || !strings.Contains(err.Error(), `answers as node "c", want "b"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestCloseFailsCalls(t *testing.T) {
	a, b := listenPeer(t, "a"), listenPeer(t, "b")
	l := a.Link("b", b.Addr())
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
	a.Close(context.Background())
	if _, err := l.Call(ctx(t), TypePing, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestBadFramesCloseTheConnection(t *testing.T) {
	b := listenPeer(t, "b")
	for name, raw := range map[string][]byte{
		"no hello":  frameBytes(kindRequest, 1, 1, nil),
		"too large": {0xff, 0xff, 0xff, 0xff},
		"short":     {0, 0, 0, 2, 1, 1},
		"version":   frameBytes(kindHello, 0, 0, []byte{9, 'x'}),
		"v1 hello":  frameBytes(kindHello, 0, 0, []byte{1, 'a'}),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", b.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(raw)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := bufio.NewReader(c).ReadByte(); err == nil {
				t.Fatal("server answered a bad opening")
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("server kept the connection open")
			}
		})
	}
	// The peer still serves good links.
	a := listenPeer(t, "a")
	if _, err := a.Link("b", b.Addr()).Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
}

func frameBytes(kind, typ byte, id uint64, payload []byte) []byte {
	var w bytes.Buffer
	cw := &connWriter{bw: bufio.NewWriter(&w), stats: new(atomic.Int64)}
	cw.write(kind, typ, id, payload)
	return w.Bytes()
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frameBytes(kindRequest, 40, 7, []byte("hello")))
	f.Add(frameBytes(kindHello, 0, 0, encodeHello(hello{nonce: newNonce(), node: "node-1"})))
	f.Add(frameBytes(kindHello, 0, 0, encodeHello(hello{auth: authHMAC, nonce: newNonce(), proof: make([]byte, proofLen), node: "node-1"})))
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := readFrame(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		again := frameBytes(fr.kind, fr.typ, fr.id, fr.payload)
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("re-encoded frame differs")
		}
		if fr.kind == kindHello {
			decodeHello(fr.payload)
		}
	})
}

// TestHandlerPanicClosesOneLink: a handler that panics on a request closes
// that link's connection (counted), not the node; the link redials and
// other requests are served.
func TestHandlerPanicClosesOneLink(t *testing.T) {
	a, b := listenPeer(t, "a"), listenPeer(t, "b")
	b.Handle(41, func(from string, p []byte, reply func([]byte, error)) {
		if string(p) == "boom" {
			var m map[string]int
			m["x"]++
		}
		reply(p, nil)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Link("b", b.Addr()).Call(ctx, 41, []byte("boom")); err == nil {
		t.Fatal("call answered although its handler panicked")
	}
	testkit.Eventually(t, 5*time.Second, "panic counted", func() bool { return b.ListenerStats().Panics == 1 })
	testkit.Eventually(t, 10*time.Second, "a later call served", func() bool {
		got, err := a.Link("b", b.Addr()).Call(ctx, 41, []byte("fine"))
		return err == nil && string(got) == "fine"
	})
}

// TestHelloFrameBounded: before the hello, a stranger cannot make the
// node read (and allocate) a large frame: a header announcing 60 MiB
// closes the connection at once.
func TestHelloFrameBounded(t *testing.T) {
	p := listenPeer(t, "a")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[:], 60<<20)
	h[4] = kindHello
	c.Write(h[:])
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("connection with an oversized hello kept open")
		}
	}
}
