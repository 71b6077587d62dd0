package listen

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"
)

// HTTP serves h over l with the same panic accounting as Protect: a
// handler that panics answers 500 (if nothing was written yet), is logged
// with its stack and counted in l's Stats; http.ErrAbortHandler keeps its
// meaning (abort the response quietly). net/http would recover the panic
// too, but silently for metrics and with the connection torn down.
func (l *Listener) HTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				l.panics.Add(1)
				l.cfg.Logger.Error("http handler panicked", "listener", l.cfg.Name, "method", r.Method,
					"path", r.URL.Path, "remote", r.RemoteAddr, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// NewHTTPServer is the http.Server every HTTP listener of Tributary uses:
// h wrapped by l.HTTP, with header, idle and handshake-free timeouts set
// (HTTP has its own: ReadHeaderTimeout bounds the request head), Host
// checked when the listener's Config says LoopbackHosts, and
// net/http's own error log going to l's logger (ErrorLog).
func NewHTTPServer(l *Listener, h http.Handler) *http.Server {
	return &http.Server{
		ErrorLog:          l.ErrorLog(),
		Handler:           l.HTTP(l.HostGuard(h)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// HostGuard is h behind LoopbackHost when l's Config says LoopbackHosts,
// else h.
func (l *Listener) HostGuard(h http.Handler) http.Handler {
	if l.cfg.LoopbackHosts {
		return LoopbackHost(h)
	}
	return h
}

// ErrorLog is an http.Server.ErrorLog for l: net/http's messages go to l's
// logger at warn level, except its "TLS handshake error" lines, which the
// listener has counted and logged rate-limited already (a port scan would
// otherwise write a line per connection).
func (l *Listener) ErrorLog() *log.Logger {
	return log.New(httpErrorWriter{l}, "", 0)
}

type httpErrorWriter struct{ l *Listener }

func (w httpErrorWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if !strings.Contains(msg, "TLS handshake error") {
		w.l.cfg.Logger.Warn("http server", "listener", w.l.cfg.Name, "msg", msg)
	}
	return len(p), nil
}

// LoopbackHost serves h only to requests whose Host is a loopback name or
// address (localhost, *.localhost, 127.0.0.0/8, ::1), others get 421
// Misdirected Request. A node that lets anyone in (loopback only) guards
// every HTTP listener with it: a web page whose DNS name is rebound to
// 127.0.0.1 would otherwise reach it from the user's browser.
func LoopbackHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, "this node is open to loopback clients only: the Host header must be localhost or a loopback address", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckOrigin is a WebSocket upgrader's CheckOrigin: a request without
// Origin (not a browser) passes; a browser's passes when its Origin's host
// is the request's Host, or the Origin is in allowed ("*" allows every
// origin; entries are scheme://host[:port], compared case-insensitively).
func CheckOrigin(allowed []string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		origin := r.Header.Get("Origin")
		if origin == "" {
			return true
		}
		for _, a := range allowed {
			if a == "*" || strings.EqualFold(strings.TrimRight(a, "/"), origin) {
				return true
			}
		}
		u, err := url.Parse(origin)
		return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
	}
}
