package listen

import (
	"errors"
	"io"
	"net"
	"sync"

	"github.com/gorilla/websocket"
)

// ErrWSMessage ends a WebSocket connection that sent a message that is not
// binary (MQTT over WebSocket carries its packets in binary messages).
var ErrWSMessage = errors.New("websocket message is not binary")

// WSConn presents a WebSocket connection as a byte stream: reads run
// across binary messages, each write is one binary message. Both MQTT
// listeners (the edge's and the cloud's) serve their WebSocket clients
// through it. The adapter follows mochi-mqtt's listeners/websocket.go
// (MIT). Like any net.Conn it is safe for concurrent use: gorilla allows
// one reader and one writer at a time, so reads and writes each hold a
// lock (an MQTT client writes from its keep-alive pinger and its sender
// at once).
type WSConn struct {
	net.Conn
	c   *websocket.Conn
	rmu sync.Mutex
	r   io.Reader // current message, nil between messages; under rmu
	wmu sync.Mutex
}

// NewWSConn wraps an upgraded WebSocket connection.
func NewWSConn(c *websocket.Conn) *WSConn { return &WSConn{Conn: c.NetConn(), c: c} }

// NetConn is the connection under the WebSocket (Ready and
// PeerCertificate find the listener's connection through it).
func (ws *WSConn) NetConn() net.Conn { return ws.Conn }

func (ws *WSConn) Read(p []byte) (int, error) {
	ws.rmu.Lock()
	defer ws.rmu.Unlock()
	for {
		if ws.r == nil {
			op, r, err := ws.c.NextReader()
			if err != nil {
				return 0, err
			}
			if op != websocket.BinaryMessage {
				return 0, ErrWSMessage
			}
			ws.r = r
		}
		n, err := ws.r.Read(p)
		if errors.Is(err, io.EOF) {
			ws.r = nil
			err = nil
			if n == 0 {
				continue // empty or finished message: read the next one
			}
		}
		return n, err
	}
}

func (ws *WSConn) Write(p []byte) (int, error) {
	ws.wmu.Lock()
	defer ws.wmu.Unlock()
	if err := ws.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
