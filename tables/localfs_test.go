package tables

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	iceio "github.com/apache/iceberg-go/io"

	"github.com/tributary-io/tributary/internal/fault"
)

// TestLocalFSIsDurable checks that iceberg-go resolves file:// and plain
// paths to syncFS, and that each way it writes a file (WriteFile, Create
// then Close, Rename) leaves the file's data and name durable when it
// returns: after a simulated power cut (fault.CrashFS drops data that was
// not fsynced and names whose directory was not fsynced) every file holds
// what was written. Removing any fsync from localfs.go fails it.
func TestLocalFSIsDurable(t *testing.T) {
	for _, loc := range []string{"file://", ""} {
		dir := t.TempDir()
		fs, err := iceio.LoadFS(context.Background(), nil, loc+dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := fs.(syncFS); !ok {
			t.Fatalf("%q: FileIO is %T, want syncFS", loc, fs)
		}
		crash := fault.NewCrashFS()
		sfs := syncFS{disk: crash}
		name := filepath.Join(dir, "metadata", "00001.metadata.json")
		for _, step := range []struct {
			what string
			do   func() error
			want map[string]string // file → content after a crash
		}{
			{"WriteFile", func() error { return sfs.WriteFile(loc+name, []byte(`{"a":1}`)) },
				map[string]string{name: `{"a":1}`}},
			{"Create+Close", func() error {
				w, err := sfs.Create(loc + name + ".2")
				if err != nil {
					return err
				}
				if _, ok := w.(*syncFile); !ok {
					t.Fatalf("Create returned %T, want *syncFile", w)
				}
				if _, err := w.Write([]byte("x")); err != nil {
					return err
				}
				return w.Close()
			}, map[string]string{name: `{"a":1}`, name + ".2": "x"}},
			{"Rename", func() error { return sfs.Rename(loc+name+".2", loc+name+".3") },
				map[string]string{name: `{"a":1}`, name + ".3": "x"}},
		} {
			if err := step.do(); err != nil {
				t.Fatalf("%q %s: %v", loc, step.what, err)
			}
			if err := crash.Crash(); err != nil {
				t.Fatal(err)
			}
			for f, want := range step.want {
				if b, err := os.ReadFile(f); err != nil || string(b) != want {
					t.Fatalf("%q %s then a crash: %s holds %q (%v), want %q; fsynced: %q",
						loc, step.what, f, b, err, want, crash.Syncs())
				}
			}
			if step.what == "Rename" {
				if _, err := os.Stat(name + ".2"); !os.IsNotExist(err) {
					t.Fatalf("%q: renamed file still under its old name after a crash: %v", loc, err)
				}
			}
		}
	}
}
