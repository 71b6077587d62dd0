package cloud

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/tables"
)

// TestCloudProbes checks that /healthz and /readyz answer next to the REST
// catalog (Kubernetes probes in deploy/k8s/cloud.yaml use them) and that
// every other path still reaches the catalog handler.
func TestCloudProbes(t *testing.T) {
	dir := t.TempDir()
	cat, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("catalog")) })
	srv := httptest.NewServer(withProbes(inner, cat, prometheus.NewRegistry()))
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
