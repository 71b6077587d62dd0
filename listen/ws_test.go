package listen

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
)

// TestWSConnConcurrentWrites: WSConn is a net.Conn, so writes from several
// goroutines at once (an MQTT client's pinger and its sender) must not
// reach gorilla's single-writer connection concurrently (it panics), and
// every write arrives whole.
func TestWSConnConcurrentWrites(t *testing.T) {
	const writers, each = 8, 200
	got := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		n := 0
		for n < writers*each*4 {
			op, m, err := c.ReadMessage()
			if err != nil || op != websocket.BinaryMessage || len(m) != 4 {
				break
			}
			n += len(m)
		}
		got <- n
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := NewWSConn(ws)
	defer conn.Close()
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := conn.Write([]byte{1, 2, 3, 4}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := <-got; n != writers*each*4 {
		t.Fatalf("server read %d bytes, want %d", n, writers*each*4)
	}
	var _ io.ReadWriter = conn
}
