package cloud

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/tables"
)

// withProbes serves, in front of the REST catalog h (which authenticates
// its own requests): /healthz (the process answers) and /readyz (the
// backing catalog answers a namespace listing), open to load balancers
// and Kubernetes probes; /metrics (consumer-group lag, process figures)
// to any principal the Authority authenticates (everyone when it is open
// or admits anonymous clients); the console (con, when not nil: GET / and
// /console/…, which shows the latest messages of every stream) to admins;
// /debug/pprof only with security.debug, to admins
// (auth.Authority.RegisterDebug). Everything is open when the Authority is.
func withProbes(h http.Handler, cat *tables.Catalog, reg *prometheus.Registry, a *auth.Authority, con *cloudConsole) http.Handler {
	guard := func(h http.Handler) http.Handler { return a.Guard("http", "", h) }
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", guard(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if _, err := cat.Iceberg().ListNamespaces(ctx, nil); err != nil {
			http.Error(w, "backing catalog unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	a.RegisterDebug(mux)
	if con != nil {
		con.Register(mux, a.AdminOnly)
	}
	mux.Handle("/", h)
	return mux
}
