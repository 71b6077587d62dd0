package cloud

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tributary-io/tributary/tables"
)

// withProbes serves /healthz (the process answers), /readyz (the backing
// catalog answers a namespace listing) and /metrics (consumer-group lag,
// process figures) next to the REST catalog h, without authentication, for
// load balancers, Kubernetes probes and Prometheus.
func withProbes(h http.Handler, cat *tables.Catalog, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
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
	mux.Handle("/", h)
	return mux
}
