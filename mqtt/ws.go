package mqtt

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/listeners"

	"github.com/tributary-io/tributary/listen"
)

// wsListener serves MQTT over WebSocket on a listener we bound ourselves, so
// that the bound address (port 0) is known; mochi's own Websocket listener
// calls ListenAndServe and can only report the configured address. The
// connection adapter is listen.WSConn.
type wsListener struct {
	id       string
	protocol string // ws, or wss over TLS
	ln       net.Listener
	recover  func(net.Conn, any)
	srv      *http.Server
	log      *slog.Logger
	upgrader websocket.Upgrader

	mu        sync.Mutex
	closed    bool
	establish listeners.EstablishFn
}

func newWSListener(id string, ln net.Listener, recover func(net.Conn, any), origins []string) *wsListener {
	return &wsListener{
		id:       id,
		protocol: "ws",
		ln:       ln,
		recover:  recover,
		upgrader: websocket.Upgrader{
			Subprotocols: []string{"mqtt"},
			CheckOrigin:  listen.CheckOrigin(origins),
		},
	}
}

func (l *wsListener) ID() string       { return l.id }
func (l *wsListener) Address() string  { return l.ln.Addr().String() }
func (l *wsListener) Protocol() string { return l.protocol }

func (l *wsListener) Init(log *slog.Logger) error {
	l.log = log
	l.srv = &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	if ll, ok := l.ln.(*listen.Listener); ok {
		l.srv.ErrorLog = ll.ErrorLog() // TLS handshake errors: counted and logged there
		l.srv.Handler = ll.HostGuard(l)
	}
	return nil
}

func (l *wsListener) Serve(establish listeners.EstablishFn) {
	l.mu.Lock()
	l.establish = establish
	l.mu.Unlock()
	if err := l.srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		l.log.Error("websocket listener stopped", "error", err)
	}
}

func (l *wsListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := l.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered the request
	}
	defer c.Close()
	l.mu.Lock()
	establish := l.establish
	l.mu.Unlock()
	conn := listen.NewWSConn(c)
	defer func() {
		if r := recover(); r != nil {
			l.recover(conn, r) // see tcpListener
		}
	}()
	if err := establish(l.id, conn); err != nil {
		l.log.Debug("websocket client ended", "error", err, "remote", r.RemoteAddr)
	}
}

func (l *wsListener) Close(closeClients listeners.CloseFn) {
	l.mu.Lock()
	first := !l.closed
	l.closed = true
	l.mu.Unlock()
	if first && l.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.srv.Shutdown(ctx)
	}
	closeClients(l.id)
}
