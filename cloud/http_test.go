package cloud

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/tables"
)

// TestCloudProbes checks that /healthz and /readyz answer next to the REST
// catalog (Kubernetes probes in deploy/k8s/cloud.yaml use them) and that
// every other path still reaches the catalog handler.
func TestCloudProbes(t *testing.T) {
	cat := testCatalog(t)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("catalog")) })
	a, err := auth.Open(auth.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(withProbes(inner, cat, prometheus.NewRegistry(), a, nil))
	defer srv.Close()
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n", "/v1/config": "catalog"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("GET %s: %d %q, want 200 %q", path, resp.StatusCode, b, want)
		}
	}
}

// TestDebugAuthCloud: with authentication on, the probes stay open,
// /metrics needs a principal, the console an admin, /debug/pprof is 404
// unless security.debug,
// and then 401 without credentials, 403 for a non-admin, 200 for an admin.
func TestDebugAuthCloud(t *testing.T) {
	cat := testCatalog(t)
	users := filepath.Join(t.TempDir(), "passwd")
	for _, u := range []string{"ops", "reader"} {
		if err := auth.SetPassword(users, u, []byte("pw")); err != nil {
			t.Fatal(err)
		}
	}
	no := false
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("catalog")) })
	for _, debug := range []bool{false, true} {
		a, err := auth.Open(auth.Config{AllowAnonymous: &no, UsersFile: users, Debug: debug,
			ACL: []auth.Rule{{Principal: "ops", Allow: []auth.Action{auth.Admin}}, {Principal: "reader", Allow: []auth.Action{auth.Consume}}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(withProbes(inner, cat, prometheus.NewRegistry(), a, newCloudConsole(cat)))
		get := func(path, user string) int {
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			if user != "" {
				req.SetBasicAuth(user, "pw")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s: 401 without a challenge", path)
			}
			return resp.StatusCode
		}
		type probe struct {
			path, user string
			status     int
		}
		want := []probe{{"/healthz", "", 200}, {"/metrics", "", 401}, {"/metrics", "reader", 200}, {"/", "", 401}, {"/", "reader", 403}, {"/", "ops", 200},
			{"/debug/pprof/", "", 404}, {"/debug/pprof/", "ops", 404}}
		if debug {
			want = append(want[:6], probe{"/debug/pprof/", "", 401}, probe{"/debug/pprof/", "reader", 403}, probe{"/debug/pprof/", "ops", 200})
		}
		for _, w := range want {
			if got := get(w.path, w.user); got != w.status {
				t.Errorf("debug %v: GET %s as %q: %d, want %d", debug, w.path, w.user, got, w.status)
			}
		}
		srv.Close()
	}
}

// testCatalog opens a SQLite catalog in a temporary directory, closed
// with the test.
func testCatalog(t *testing.T) *tables.Catalog {
	t.Helper()
	dir := t.TempDir()
	cfg := tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")}
	cat, err := tables.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}
