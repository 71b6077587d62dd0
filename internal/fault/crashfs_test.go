package fault

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCrashFS: what a crash keeps, by which fsyncs happened.
func TestCrashFS(t *testing.T) {
	for _, tc := range []struct {
		name                string
		syncFile, syncDir   bool
		rename, syncRenamed bool
		want                map[string]string // content after the crash; "-": absent
	}{
		{"nothing synced", false, false, false, false, map[string]string{"a": "-"}},
		{"data only", true, false, false, false, map[string]string{"a": "-"}},
		{"name only", false, true, false, false, map[string]string{"a": ""}},
		{"data and name", true, true, false, false, map[string]string{"a": "data"}},
		{"rename unsynced", true, true, true, false, map[string]string{"a": "data", "b": "-"}},
		{"rename synced", true, true, true, true, map[string]string{"a": "-", "b": "data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := NewCrashFS()
			f, err := c.Create(filepath.Join(dir, "a"))
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("data"))
			if tc.syncFile {
				f.Sync()
			}
			f.Close()
			syncDir := func() {
				d, err := c.OpenDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				if err := d.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			if tc.syncDir {
				syncDir()
			}
			if tc.rename {
				if err := c.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
					t.Fatal(err)
				}
				if tc.syncRenamed {
					syncDir()
				}
			}
			if err := c.Crash(); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.want {
				b, err := os.ReadFile(filepath.Join(dir, name))
				got := string(b)
				if os.IsNotExist(err) {
					got = "-"
				} else if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%s after the crash: %q, want %q (- is absent)", name, got, want)
				}
			}
		})
	}
}
