package mqtt

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// wsClient is a byte-stream view of a client WebSocket for raw MQTT.
type wsClient struct {
	c   *websocket.Conn
	buf []byte
}

func dialWS(t *testing.T, addr string) *wsClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws://"+addr+"/", nil)
	if err != nil {
		t.Fatalf("dial ws: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &wsClient{c: c}
}

func (w *wsClient) Write(p []byte) (int, error) {
	return len(p), w.c.WriteMessage(websocket.BinaryMessage, p)
}

func (w *wsClient) Read(p []byte) (int, error) {
	if len(w.buf) == 0 {
		_ = w.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, m, err := w.c.ReadMessage()
		if err != nil {
			return 0, err
		}
		w.buf = m
	}
	n := copy(p, w.buf)
	w.buf = w.buf[n:]
	return n, nil
}
