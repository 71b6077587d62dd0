package cloud

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/grpcapi"
	"github.com/tributary-io/tributary/httpapi"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/offsets"
	"github.com/tributary-io/tributary/subscription"
)

// DefaultHTTPAddr is the default address of the HTTP read API.
const DefaultHTTPAddr = "127.0.0.1:18080"

// httpServer is the cloud's HTTP read API (package httpapi) and gRPC
// ReadService (package grpcapi) on its own
// listener (TLS name "http"), with /healthz; it stores group offsets in
// the catalog database's offsets table, where the Kafka groups' are.
type httpServer struct {
	ln      *listen.Listener
	srv     *http.Server
	offsets *offsets.Store
	reader  *httpapi.Reader
	grpc    *grpcapi.Reader
	subs    *subscription.Manager // its own (nil when it shares the Pulsar server's)
	done    chan struct{}
	cancel  context.CancelFunc
}

func (c *Config) validateHTTP(bad func(field, format string, args ...any)) {
	if c.HTTP.Addr == nil {
		return
	}
	if a := *c.HTTP.Addr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("http.addr", "%q: want host:port, or \"\" to turn the HTTP read API off", a)
		}
		if err := c.Security.Exposed(map[string]config.Listener{"http.addr": config.Bind(a, "http")}); err != nil {
			bad("security", "%v", err)
		}
	}
	c.HTTP.Config.Validate("http", bad)
}

// listenHTTP starts the HTTP read API when http.addr is set.
func (s *Server) listenHTTP() error {
	a := *s.cfg.HTTP.Addr
	if a == "" {
		return nil
	}
	os, err := offsets.Open(s.cfg.State.URI)
	if err != nil {
		return fmt.Errorf("cloud http: %w", err)
	}
	ln, err := listen.Listen(a, listen.Config{Name: "http-cloud", HandshakeTimeout: -1, Logger: s.log, TLS: s.tls.ServerH2("http"),
		LoopbackHosts: s.openLoopback(a)})
	if err != nil {
		os.Close()
		return fmt.Errorf("listen cloud http %s: %w", a, err)
	}
	rd := httpapi.NewReader(httpapi.ReaderConfig{Auth: s.auth, Limits: s.cfg.HTTP.Limits(),
		MaxGroupOffsets: s.cfg.Kafka.MaxGroupOffsets, Logger: s.log.With("component", "http-read")}, s.reader, os)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	rd.Register(mux)
	// gRPC Subscribe serves the same subscriptions as the Pulsar server
	// (its manager), or a manager of its own over the same cursor table.
	var subs, ownSubs *subscription.Manager
	if s.pulsar != nil {
		subs = s.pulsar.Manager()
	} else {
		store, err := subscription.OpenCursorStore(s.cfg.State.URI)
		if err != nil {
			ln.Close()
			os.Close()
			return fmt.Errorf("cloud http: %w", err)
		}
		subs = subscription.NewManager(store, s.log.With("component", "subscriptions"))
		ownSubs = subs
	}
	grd := grpcapi.NewReader(grpcapi.ReaderConfig{Auth: s.auth, Logger: s.log.With("component", "grpc-read"),
		Limits: grpcapi.Limits{MaxStreams: s.cfg.HTTP.MaxStreams}, Catalog: s.cfg.Catalog.Name, Subscriptions: subs}, s.reader)
	grd.Register(mux) // gRPC ReadService, on HTTP/2
	s.reg.MustRegister(grd.Collectors()...)
	h := &httpServer{ln: ln, srv: listen.NewHTTPServer(ln, mux), offsets: os, reader: rd, grpc: grd, subs: ownSubs, done: make(chan struct{})}
	// Closing ends the long polls and event streams (their requests'
	// contexts), which Shutdown alone would wait for.
	base, cancel := context.WithCancel(context.Background())
	h.srv.BaseContext, h.cancel = func(net.Listener) context.Context { return base }, cancel
	// HTTP/1.1, HTTP/2 over TLS and unencrypted HTTP/2 (h2c, what gRPC
	// clients without TLS speak) on the one port.
	h.srv.Protocols = new(http.Protocols)
	h.srv.Protocols.SetHTTP1(true)
	h.srv.Protocols.SetHTTP2(true)
	h.srv.Protocols.SetUnencryptedHTTP2(true)
	s.http = h
	s.reg.MustRegister(rd.Collectors()...)
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("cloud http server", "err", err)
		}
	}()
	s.log.Info("listening", "listener", "http-read-api", "addr", ln.Addr().String(), "tls", s.TLS("http"),
		"endpoints", "/v1/streams/{stream}/partitions/{p}/records (long poll, SSE) /v1/groups/{group}/offsets /openapi.yaml")
	return nil
}

// HTTPAddr is the bound address of the HTTP read API ("" when off).
func (s *Server) HTTPAddr() string {
	if s.http == nil {
		return ""
	}
	return s.http.ln.Addr().String()
}

func (h *httpServer) close(ctx context.Context) error {
	h.cancel()
	err := h.srv.Shutdown(ctx)
	if err != nil {
		h.srv.Close()
	}
	<-h.done
	err = errors.Join(err, h.offsets.Close())
	if h.subs != nil {
		err = errors.Join(err, h.subs.Close(ctx))
	}
	return err
}
