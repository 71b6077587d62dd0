package listen

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve accepts connections of l and hands each to fn in a goroutine.
func serve(t *testing.T, l *Listener, fn func(c net.Conn)) {
	t.Helper()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go l.Protect(c, func() { fn(c) })
		}
	}()
}

func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedSoon reports whether the server closed c within d (EOF or reset).
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestCaps(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{MaxConns: 3, MaxConnsPerIP: 2, HandshakeTimeout: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	defer close(hold)
	serve(t, l, func(c net.Conn) { <-hold; c.Close() })
	a, b := dial(t, l), dial(t, l)
	testkit.Eventually(t, 5*time.Second, "two open", func() bool { return l.Stats().Open == 2 })
	over := dial(t, l) // third from the same address: over the per-IP cap
	if !closedSoon(over, 2*time.Second) {
		t.Fatal("connection over the per-IP cap kept open")
	}
	if st := l.Stats(); st.RefusedPerIP != 1 || st.Open != 2 {
		t.Fatalf("stats %+v", st)
	}
	if closedSoon(a, 200*time.Millisecond) || closedSoon(b, 200*time.Millisecond) {
		t.Fatal("connections under the cap closed")
	}
	a.Close()
	testkit.Eventually(t, 5*time.Second, "released", func() bool { return l.Stats().Open <= 2 })
}

func TestMaxConns(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{MaxConns: 1, MaxConnsPerIP: -1, HandshakeTimeout: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	defer close(hold)
	serve(t, l, func(c net.Conn) { <-hold })
	dial(t, l)
	testkit.Eventually(t, 5*time.Second, "one open", func() bool { return l.Stats().Open == 1 })
	if !closedSoon(dial(t, l), 2*time.Second) {
		t.Fatal("connection over MaxConns kept open")
	}
	if st := l.Stats(); st.RefusedMax != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHandshakeDeadline(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{HandshakeTimeout: 200 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if string(buf) == "hello" {
			Ready(c)
		}
		io.Copy(io.Discard, c)
	})
	silent := dial(t, l)
	start := time.Now()
	if !closedSoon(silent, 3*time.Second) {
		t.Fatal("silent connection kept past the handshake deadline")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("closed after %s", d)
	}
	ok := dial(t, l)
	ok.Write([]byte("hello"))
	if closedSoon(ok, 600*time.Millisecond) {
		t.Fatal("ready connection closed by the handshake deadline")
	}
	if st := l.Stats(); st.HandshakeTimeouts != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWriteTimeout: a client that stops reading makes the server's Write
// time out; the connection is closed (a blocked reader of it, as a
// protocol's read loop, returns), counted; a client that reads is not
// affected.
func TestWriteTimeout(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{HandshakeTimeout: -1, WriteTimeout: 300 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	type result struct{ write, read error }
	results := make(chan result, 2)
	serve(t, l, func(c net.Conn) {
		readErr := make(chan error, 1)
		go func() { _, err := c.Read(make([]byte, 1)); readErr <- err }()
		var err error
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 1000 && err == nil; i++ { // 64 MiB: far more than the socket buffers
			_, err = c.Write(chunk)
		}
		c.Close()
		results <- result{err, <-readErr}
	})
	slow := dial(t, l) // never reads
	fast := dial(t, l)
	go io.Copy(io.Discard, fast)
	got := map[bool]int{}
	for range 2 {
		select {
		case r := <-results:
			var ne net.Error
			timedOut := errors.As(r.write, &ne) && ne.Timeout()
			got[timedOut]++
			if timedOut && !errors.Is(r.read, net.ErrClosed) {
				t.Fatalf("the handler's read after the write timeout: %v", r.read)
			}
			if !timedOut && r.write != nil {
				t.Fatalf("reading client: write %v", r.write)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a write stayed blocked")
		}
	}
	if got[true] != 1 || got[false] != 1 {
		t.Fatalf("timed out / not: %v", got)
	}
	if st := l.Stats(); st.WriteTimeouts != 1 {
		t.Fatalf("stats %+v", st)
	}
	_ = slow
}

func TestProtect(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{HandshakeTimeout: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) {
		var m map[string]int
		m["boom"]++ // a nil map write panics
	})
	for range 3 {
		if !closedSoon(dial(t, l), 2*time.Second) {
			t.Fatal("connection of a panicked handler left open")
		}
	}
	testkit.Eventually(t, 5*time.Second, "panics counted", func() bool { return l.Stats().Panics == 3 })
	if st := l.Stats(); st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGracefulClose: the server answers and closes while the client is
// still sending; the client reads the answer and a clean end of stream,
// not a reset. The handler's Read after Close fails.
func TestGracefulClose(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{HandshakeTimeout: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	readAfter := make(chan error, 1)
	serve(t, l, func(c net.Conn) {
		buf := make([]byte, 16)
		io.ReadFull(c, buf)
		c.Write([]byte("GOODBYE"))
		c.Close()
		_, err := c.Read(buf)
		readAfter <- err
	})
	c := dial(t, l)
	go c.Write(bytes.Repeat([]byte("x"), 4<<20)) // much more than the server reads
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "GOODBYE" {
		t.Fatalf("client got %q, %v; want GOODBYE and a clean close", got, err)
	}
	if err := <-readAfter; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
}

func TestHTTPPanic(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{HandshakeTimeout: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			panic("boom")
		}
		w.Write([]byte("ok"))
	}))
	go srv.Serve(l)
	defer srv.Close()
	base := "http://" + l.Addr().String()
	r, err := http.Get(base + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 500 {
		t.Fatalf("status %d", r.StatusCode)
	}
	r, err = http.Get(base + "/fine")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("after a panic: %v %v", r, err)
	}
	r.Body.Close()
	if st := l.Stats(); st.Panics != 1 {
		t.Fatalf("stats %+v", st)
	}
}
