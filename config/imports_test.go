package config

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsNoProtocolPackage: package config, the YAML plumbing both
// roles share, depends on no protocol package, directly or through
// another (`go list -deps ./config`): a protocol owns its own section.
func TestImportsNoProtocolPackage(t *testing.T) {
	const module = "github.com/tributary-io/tributary"
	protocols := []string{"mqtt", "kafka", "httpapi", "grpcapi", "pulsar", "cloudmqtt", "subscription", "offsets", "console", "node", "cloud"}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{} // package -> the package that imports it
	var visit func(path, from string)
	visit = func(path, from string) {
		if _, ok := seen[path]; ok || !strings.HasPrefix(path, module) {
			return
		}
		seen[path] = from
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		for _, p := range protocols {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				t.Errorf("config depends on %s (imported by %s)", path, from)
			}
		}
		pkg, err := build.Default.ImportDir(filepath.Join(root, filepath.FromSlash(rel)), 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			visit(imp, path)
		}
	}
	visit(module+"/config", "")
	if len(seen) < 2 {
		t.Fatalf("walked only %v", seen)
	}
}
