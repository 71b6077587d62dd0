package listen

import (
	"fmt"
	"log"
	"net/http"
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
// (HTTP has its own: ReadHeaderTimeout bounds the request head), and
// net/http's own error log going to l's logger (ErrorLog).
func NewHTTPServer(l *Listener, h http.Handler) *http.Server {
	return &http.Server{
		ErrorLog:          l.ErrorLog(),
		Handler:           l.HTTP(h),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
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
