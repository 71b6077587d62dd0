package auth

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// HTTP authenticates an HTTP request: Basic credentials (a users file
// user, or a JWT as the password), a Bearer JWT, or nothing (anonymous,
// when allowed). protocol names the listener in the audit log ("http").
func (a *Authority) HTTP(r *http.Request, protocol string) (Principal, error) {
	c := Client{Protocol: protocol, Remote: a.ClientAddr(r)}
	if user, pw, ok := r.BasicAuth(); ok {
		return a.Password(c, user, []byte(pw))
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return a.Token(c, strings.TrimSpace(tok))
	}
	if r.Header.Get("Authorization") != "" {
		a.fail(c, "", "unsupported_http_auth")
		return Principal{}, ErrBadCredentials
	}
	return a.Anonymous(c)
}

// HTTPClient is HTTP for the data APIs (HTTP and gRPC produce and read):
// a request over TLS with a verified client certificate and no
// Authorization header is its certificate's principal; otherwise HTTP.
func (a *Authority) HTTPClient(r *http.Request, protocol string) (Principal, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 && r.Header.Get("Authorization") == "" {
		return a.Certificate(Client{Protocol: protocol, Remote: a.ClientAddr(r)}, r.TLS.PeerCertificates[0])
	}
	return a.HTTP(r, protocol)
}

// Guard serves next to requests that authenticate (HTTP) and, unless
// action is "", are authorized for action; GET and HEAD need no more,
// any other method (a page that changes state) needs Admin. When the
// Authority is open, everything passes. Refusals: 401 with
// WWW-Authenticate: Basic and Bearer challenges, or 403.
func (a *Authority) Guard(protocol string, action Action, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.Open() {
			next.ServeHTTP(w, r)
			return
		}
		p, err := a.HTTP(r, protocol)
		if err != nil {
			w.Header().Add("WWW-Authenticate", `Basic realm="tributary", charset="UTF-8"`)
			w.Header().Add("WWW-Authenticate", `Bearer realm="tributary"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		need := action
		if need == "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
			need = Admin
		}
		if need != "" {
			if err := a.Authorize(Request{Client: Client{Protocol: protocol, Remote: a.ClientAddr(r)}, Principal: p, Action: need}); err != nil {
				http.Error(w, p.String()+" may not "+string(need)+" here", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// AdminOnly is Guard for Admin on the "http" protocol: pages that show
// what only an admin may see (the console, with the latest messages of
// every stream) or change state.
func (a *Authority) AdminOnly(next http.Handler) http.Handler { return a.Guard("http", Admin, next) }

// StatusPort completes an HTTP status port of an edge node: probes
// already serves /healthz and /readyz, open to everyone (load balancers,
// Kubernetes), and whatever the caller mounted behind AdminOnly (the
// console); pages (/metrics, /status, /cluster, …) are served through
// Guard with no action — to any principal that authenticates, anonymous
// clients when they are allowed, and anything but GET and HEAD to an
// admin only; /debug/pprof as RegisterDebug says. With an open Authority
// (nothing to authenticate with) everything is open.
func (a *Authority) StatusPort(probes *http.ServeMux, pages http.Handler) http.Handler {
	a.RegisterDebug(probes)
	probes.Handle("/", a.Guard("http", "", pages))
	return probes
}

// RegisterDebug mounts /debug/pprof on mux when security.debug is on, for
// admins only (everyone when the Authority is open); when it is off the
// route is 404 whoever asks.
func (a *Authority) RegisterDebug(mux *http.ServeMux) {
	if !a.Debug() {
		mux.Handle("/debug/pprof/", http.NotFoundHandler())
		return
	}
	dbg := http.NewServeMux()
	dbg.HandleFunc("GET /debug/pprof/", pprof.Index)
	dbg.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	dbg.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/pprof/", a.AdminOnly(dbg))
}
