package listen

import (
	"errors"
	"io"
	"net"

	"github.com/gorilla/websocket"
)

// ErrWSMessage ends a WebSocket connection that sent a message that is not
// binary (MQTT over WebSocket carries its packets in binary messages).
var ErrWSMessage = errors.New("websocket message is not binary")

// WSConn presents a WebSocket connection as a byte stream: reads run
// across binary messages, each write is one binary message. Both MQTT
// listeners (the edge's and the cloud's) serve their WebSocket clients
// through it. The adapter follows mochi-mqtt's listeners/websocket.go
// (MIT).
type WSConn struct {
	net.Conn
	c *websocket.Conn
	r io.Reader // current message, nil between messages
}

// NewWSConn wraps an upgraded WebSocket connection.
func NewWSConn(c *websocket.Conn) *WSConn { return &WSConn{Conn: c.NetConn(), c: c} }

// NetConn is the connection under the WebSocket (Ready and
// PeerCertificate find the listener's connection through it).
func (ws *WSConn) NetConn() net.Conn { return ws.Conn }

func (ws *WSConn) Read(p []byte) (int, error) {
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
	if err := ws.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
