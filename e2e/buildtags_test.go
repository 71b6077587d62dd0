package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmallerBuild: `make build-edge STORES=s3` (docs/operations.md,
// "Smaller builds") builds an edge that links the AWS SDK but not the GCS
// and Azure ones, runs, says which stores it has, accepts an
// s3:// warehouse at config check, and refuses a gs:// or abfss:// one
// naming the tag to drop. One build of one variant, to keep make test
// cheap; the notrib_ unit tests run with every tag in make unit.
func TestSmallerBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tributary-edge")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", "..", "build-edge", "STORES=s3", "EDGE_BIN="+bin)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build-edge STORES=s3: %v\n%s", err, out)
	}
	edge, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	full, err := os.Stat(binPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("full build %.1f MB, s3 edge (stripped) %.1f MB", float64(full.Size())/1e6, float64(edge.Size())/1e6)
	// The modules linked in, from the build information (kept when stripped).
	mods, err := exec.CommandContext(ctx, "go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, mods)
	}
	for mod, want := range map[string]bool{
		"github.com/aws/aws-sdk-go-v2/service/s3":              true,
		"cloud.google.com/go/storage":                          false,
		"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob": false,
		"github.com/Azure/azure-sdk-for-go/sdk/azidentity":     false,
	} {
		if got := strings.Contains(string(mods), "\t"+mod+"\t"); got != want {
			t.Errorf("s3 edge links %s: %v, want %v", mod, got, want)
		}
	}

	run := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee) && ctx.Err() == nil:
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("%v: %v\n%s", args, err, out)
		return 0, ""
	}
	if code, out := run("version"); code != 0 || !strings.Contains(out, "stores: file, s3\n") || !strings.Contains(out, "tags: notrib_gcs,notrib_azure") {
		t.Fatalf("version: exit %d\n%s", code, out)
	}

	dir := t.TempDir()
	check := func(warehouse string) (int, string) {
		t.Helper()
		f := filepath.Join(dir, strings.SplitN(warehouse, ":", 2)[0]+".yaml")
		yaml := "data_dir: " + filepath.Join(dir, "data") + "\ncatalog:\n  warehouse: " + warehouse + "\n"
		if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return run("config", "check", f)
	}
	if code, out := check("s3://lake/w"); code != 0 {
		t.Fatalf("config check of an s3:// warehouse in the s3 edge: exit %d\n%s", code, out)
	}
	for warehouse, want := range map[string]string{
		"gs://lake/w": "catalog.warehouse: this build has no gs:// support; build without the notrib_gcs tag",
		"abfss://lake@acct.dfs.core.windows.net/w": "catalog.warehouse: this build has no abfss:// support; build without the notrib_azure tag",
	} {
		code, out := check(warehouse)
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("config check of %s in the s3 edge: exit %d, want the error %q:\n%s", warehouse, code, want, out)
		}
	}
	// Start-up refuses it too, before it serves anything.
	f := filepath.Join(dir, "gs.yaml")
	if code, out := run("edge", "-config", f); code == 0 || !strings.Contains(out, "this build has no gs:// support") {
		t.Errorf("edge on a gs:// warehouse in the s3 edge: exit %d\n%s", code, out)
	}
}
