package rest_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/rest"
)

// catalogPort serves a catalog handler with opts beside /metrics and /
// on one listener, as the cloud's catalog port does, through
// rest.RateLimited.
func catalogPort(t *testing.T, opts rest.Options) string {
	t.Helper()
	dir := t.TempDir()
	backing, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backing.Close() })
	opts.Logger, opts.NodeToken = quietLogger(), testNodeToken
	h := rest.NewHandler(backing.Iceberg(), opts)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("metrics\n")) })
	mux.Handle("/", h)
	srv, err := rest.Listen("127.0.0.1:0", rest.RateLimited(h, mux), listen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv.URL()
}

// TestRateLimitWholePort: /metrics and the other routes beside the
// catalog on its port share the per-address limit; a catalog request
// takes one token, not two.
func TestRateLimitWholePort(t *testing.T) {
	u := catalogPort(t, rest.Options{RatePerIP: 0.001, BurstPerIP: 6})
	for i, path := range []string{"/v1/config", "/v1/config", "/v1/config"} {
		if r := do(t, "GET", u+path); r.status != 200 {
			t.Fatalf("request %d to %s: %d", i, path, r.status)
		}
	}
	limited := 0
	for range 10 {
		if r := do(t, "GET", u+"/metrics"); r.status == 429 {
			limited++
		}
	}
	if limited != 7 {
		t.Fatalf("%d of 10 /metrics requests after 3 catalog requests limited, want 7 (a burst of 6)", limited)
	}
	if r := do(t, "GET", u+"/"); r.status != 429 {
		t.Fatalf("/ beyond the limit: %d", r.status)
	}
	if r := do(t, "GET", u+"/metrics", "", "Authorization", "Bearer "+testNodeToken); r.status != 200 {
		t.Fatalf("the node token beyond the limit: %d", r.status)
	}
}

// TestRateLimitTrustedProxy: X-Forwarded-For names the client only when
// the connection comes from one of security.trusted_proxies; otherwise
// every client behind a proxy would share its bucket, and any client
// could pick a fresh bucket by writing the header.
func TestRateLimitTrustedProxy(t *testing.T) {
	open := func(proxies ...string) *auth.Authority {
		yes := true
		a, err := auth.Open(auth.Config{AllowAnonymous: &yes, TrustedProxies: proxies}, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	run := func(u string) (limitedA, limitedB int) {
		for range 4 {
			if do(t, "GET", u+"/metrics", "", "X-Forwarded-For", "203.0.113.7").status == 429 {
				limitedA++
			}
		}
		for range 4 {
			if do(t, "GET", u+"/metrics", "", "X-Forwarded-For", "203.0.113.7, 198.51.100.9").status == 429 {
				limitedB++
			}
		}
		return
	}
	// Trusted: each forwarded client has its own bucket of 3 (the second
	// one wrote a false address first: the proxy appended its real one).
	if a, b := run(catalogPort(t, rest.Options{Auth: open("127.0.0.0/8"), RatePerIP: 0.001, BurstPerIP: 3})); a != 1 || b != 1 {
		t.Fatalf("behind a trusted proxy: %d and %d limited, want 1 and 1 (a bucket each)", a, b)
	}
	// Not configured: the header is ignored, one bucket for the address.
	if a, b := run(catalogPort(t, rest.Options{Auth: open(), RatePerIP: 0.001, BurstPerIP: 3})); a != 1 || b != 4 {
		t.Fatalf("without trusted_proxies: %d and %d limited, want 1 and 4 (one bucket)", a, b)
	}
}
