package rest

import (
	"context"
	"errors"
	"net/http"

	"github.com/tributary-io/tributary/listen"
)

// Server is a catalog handler listening on a TCP address.
type Server struct {
	ln   *listen.Listener
	tls  bool
	srv  *http.Server
	done chan error
}

// Listen binds addr ("127.0.0.1:0" picks a free port) and serves h on it
// in the background until Shutdown. lc tunes the listener (caps, TLS,
// logger; HTTP bounds its own handshake, so lc.HandshakeTimeout is
// ignored); its Name defaults to rest-catalog.
func Listen(addr string, h http.Handler, lc listen.Config) (*Server, error) {
	if lc.Name == "" {
		lc.Name = "rest-catalog"
	}
	lc.HandshakeTimeout = -1
	ln, err := listen.Listen(addr, lc)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, tls: lc.TLS != nil, done: make(chan error, 1), srv: listen.NewHTTPServer(ln, h)}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s, nil
}

// ListenerStats are the listener's connection counters.
func (s *Server) ListenerStats() listen.Stats { return s.ln.Stats() }

// Addr is the address the server listens on (host:port).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the catalog URI clients use: http://host:port, or https:// over
// TLS.
func (s *Server) URL() string {
	if s.tls {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Done reports the end of serving: nil after Shutdown, else the error
// that stopped it.
func (s *Server) Done() <-chan error { return s.done }

// Shutdown stops accepting requests and waits (until ctx ends) for the
// ones in flight.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	return err
}
