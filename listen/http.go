package listen

import (
	"fmt"
	"net/http"
	"runtime/debug"
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
// (HTTP has its own: ReadHeaderTimeout bounds the request head).
func NewHTTPServer(l *Listener, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           l.HTTP(h),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}
