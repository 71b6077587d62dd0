package tables

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	iceio "github.com/apache/iceberg-go/io"
)

// TestLocalFSIsDurable checks that iceberg-go resolves file:// and plain
// paths to syncFS, and that its writes land intact.
func TestLocalFSIsDurable(t *testing.T) {
	dir := t.TempDir()
	for _, loc := range []string{"file://" + dir, dir} {
		fs, err := iceio.LoadFS(context.Background(), nil, loc)
		if err != nil {
			t.Fatal(err)
		}
		sfs, ok := fs.(syncFS)
		if !ok {
			t.Fatalf("%s: FileIO is %T, want syncFS", loc, fs)
		}
		name := filepath.Join(dir, "metadata", "00001.metadata.json")
		if err := sfs.WriteFile("file://"+name, []byte(`{"a":1}`)); err != nil {
			t.Fatal(err)
		}
		w, err := sfs.Create(name + ".2")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := w.(*syncFile); !ok {
			t.Fatalf("Create returned %T, want *syncFile", w)
		}
		w.Write([]byte("x"))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := sfs.Rename(name+".2", "file://"+name+".3"); err != nil {
			t.Fatal(err)
		}
		for f, want := range map[string]string{name: `{"a":1}`, name + ".3": "x"} {
			if b, err := os.ReadFile(f); err != nil || string(b) != want {
				t.Fatalf("%s: %q, %v", f, b, err)
			}
		}
	}
}
