package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStoreErrors: a GCS bucket or Azure container that does not exist and
// a refused Azure key are start-up errors of `tributary edge` and
// `tributary cloud` naming the key to fix, against the real emulators;
// `tributary config check` refuses contradictory storage sections.
func TestStoreErrors(t *testing.T) {
	gcs := startFakeGCS(t)
	az := startAzurite(t)
	abfss := func(container string) string {
		return "abfss://" + container + "@" + azAccount + ".dfs.core.windows.net/warehouse"
	}
	wrongKey := "c29tZSBvdGhlciBrZXkgdGhhdCBpcyBub3QgdGhlIGFjY291bnQncw=="
	run := func(t *testing.T, args ...string) (int, string) { return runExit(t, 60*time.Second, args...) }
	for _, c := range []struct {
		name, warehouse, storage string
		want                     []string
	}{
		{"gcs bucket missing", "gs://no-such-bucket/w", gcsStorage(gcs), []string{"catalog.warehouse", "no-such-bucket", "does not exist"}},
		{"azure container missing", abfss("nosuch"), azureStorage(az), []string{"catalog.warehouse", "nosuch", "does not exist"}},
		{"azure key refused", abfss(azContainer), fmt.Sprintf("storage:\n  azure:\n    endpoint: %s\n    key: %s\n", az, wrongKey),
			[]string{"catalog.warehouse", "storage.azure.key"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := edgeConfig(t, dir, "bad-store", fmt.Sprintf("catalog:\n  uri: sqlite://%s/catalog.db\n  warehouse: %s\n%s", dir, c.warehouse, c.storage))
			code, out := run(t, "edge", "-config", f)
			for _, w := range c.want {
				if code == 0 || !strings.Contains(out, w) {
					t.Fatalf("edge: exit %d, output does not name %q:\n%s", code, w, out)
				}
			}
			cf := filepath.Join(dir, "cloud.yaml")
			if err := os.WriteFile(cf, []byte(fmt.Sprintf("role: cloud\ndata_dir: %[1]s\ncatalog:\n  uri: sqlite://%[1]s/catalog.db\n  warehouse: %[2]s\n  addr: 127.0.0.1:0\nkafka:\n  addr: \"\"\npulsar:\n  addr: \"\"\n%[3]s",
				dir, c.warehouse, c.storage)), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out = run(t, "cloud", "-config", cf)
			for _, w := range c.want {
				if code == 0 || !strings.Contains(out, w) {
					t.Fatalf("cloud: exit %d, output does not name %q:\n%s", code, w, out)
				}
			}
		})
	}
	for _, c := range []struct {
		name, warehouse, storage, want string
	}{
		{"azure two credentials", abfss(azContainer), "storage:\n  azure:\n    key: a2V5\n    sas_token: sv=1\n", "storage.azure"},
		{"azure account mismatch", abfss(azContainer), "storage:\n  azure:\n    account: other\n", "storage.azure.account"},
		{"azure no container", "abfss://" + azAccount + ".dfs.core.windows.net/w", "", "catalog.warehouse"},
		{"azure bad endpoint", abfss(azContainer), "storage:\n  azure:\n    endpoint: 127.0.0.1:10000\n", "storage.azure.endpoint"},
		{"gcs credentials file missing", "gs://lake/w", "storage:\n  gcs:\n    credentials_file: /nonexistent/key.json\n", "storage.gcs.credentials_file"},
		{"gcs anonymous and credentials", "gs://lake/w", "storage:\n  gcs:\n    credentials_file: /etc/hostname\n    anonymous: true\n", "storage.gcs"},
	} {
		t.Run("config check "+c.name, func(t *testing.T) {
			dir := t.TempDir()
			f := edgeConfig(t, dir, "bad-store", fmt.Sprintf("catalog:\n  warehouse: %s\n%s", c.warehouse, c.storage))
			if code, out := run(t, "config", "check", f); code == 0 || !strings.Contains(out, c.want) {
				t.Fatalf("config check: exit %d, output does not name %q:\n%s", code, c.want, out)
			}
		})
	}
}
