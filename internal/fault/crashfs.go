package fault

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/tributary-io/tributary/internal/vfs"
)

// CrashFS is a vfs.FS on the real disk that tracks durability, like
// pebble's strict in-memory FS but with the data on disk (so readers that
// bypass it, such as iceberg-go's LocalFS, see what was written).
//
// The model: a file is an inode with data; a name in a directory points at
// an inode. Write changes the inode's data; File.Sync makes the data
// durable (the inode's synced data is what it holds now). Create and Rename
// change names; syncing a directory makes its names durable (as they are
// now: new names appear, removed and renamed-away names disappear). A
// crash keeps only durable names, each with its inode's synced data (empty
// if never synced). Directories themselves are assumed durable, and only
// files created through the CrashFS are tracked.
type CrashFS struct {
	mu      sync.Mutex
	live    map[string]*inode // name → inode now
	durable map[string]*inode // name → inode after a crash
	syncs   []string          // paths fsynced, in order (files and directories)
}

type inode struct {
	data, synced []byte // now; as of the last File.Sync (nil: never)
}

// NewCrashFS returns a CrashFS tracking nothing yet.
func NewCrashFS() *CrashFS {
	return &CrashFS{live: map[string]*inode{}, durable: map[string]*inode{}}
}

// MkdirAll creates directories (treated as durable).
func (c *CrashFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

// Create creates or truncates a file; its name is not durable until its
// directory is synced.
func (c *CrashFS) Create(path string) (vfs.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	ino := &inode{}
	c.mu.Lock()
	c.live[filepath.Clean(path)] = ino
	c.mu.Unlock()
	return &crashFile{fs: c, f: f, ino: ino}, nil
}

// Rename renames a file; the new name (and the old name's removal) is not
// durable until the directories are synced.
func (c *CrashFS) Rename(oldpath, newpath string) error {
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	oldpath, newpath = filepath.Clean(oldpath), filepath.Clean(newpath)
	c.mu.Lock()
	defer c.mu.Unlock()
	ino := c.live[oldpath]
	if ino == nil {
		// Not created through us: its data is on disk already, durable.
		data, err := os.ReadFile(newpath)
		if err != nil {
			return err
		}
		ino = &inode{data: data, synced: data}
		c.durable[oldpath] = ino
	}
	delete(c.live, oldpath)
	c.live[newpath] = ino
	return nil
}

// OpenDir opens a directory; its Sync makes the directory's names durable.
func (c *CrashFS) OpenDir(dir string) (vfs.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return &crashDir{fs: c, f: f, dir: filepath.Clean(dir)}, nil
}

// Syncs lists the paths fsynced so far, files and directories, in order.
func (c *CrashFS) Syncs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.syncs)
}

// Crash puts the disk in the state a power cut would leave now: every
// tracked name that is not durable is removed, every durable name holds its
// inode's synced data. Tracking continues from that state.
func (c *CrashFS) Crash() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for name := range c.live {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	live := map[string]*inode{}
	for name, ino := range c.durable {
		ino.data = bytes.Clone(ino.synced)
		if err := os.WriteFile(name, ino.data, 0o644); err != nil {
			errs = append(errs, err)
		}
		live[name] = ino
	}
	c.live = live
	return errors.Join(errs...)
}

type crashFile struct {
	fs  *CrashFS
	f   *os.File
	ino *inode
}

func (f *crashFile) Write(p []byte) (int, error) {
	n, err := f.f.Write(p)
	f.fs.mu.Lock()
	f.ino.data = append(f.ino.data, p[:n]...)
	f.fs.mu.Unlock()
	return n, err
}

func (f *crashFile) Sync() error {
	if err := f.f.Sync(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	f.ino.synced = bytes.Clone(f.ino.data)
	f.fs.syncs = append(f.fs.syncs, f.f.Name())
	f.fs.mu.Unlock()
	return nil
}

func (f *crashFile) Close() error { return f.f.Close() }
func (f *crashFile) Name() string { return f.f.Name() }

type crashDir struct {
	fs  *CrashFS
	f   *os.File
	dir string
}

// errDirWrite is returned by a write to a directory.
var errDirWrite = errors.New("fault: write to a directory")

func (d *crashDir) Write([]byte) (int, error) { return 0, errDirWrite }
func (d *crashDir) Close() error              { return d.f.Close() }
func (d *crashDir) Name() string              { return d.f.Name() }

func (d *crashDir) Sync() error {
	if err := d.f.Sync(); err != nil {
		return err
	}
	c := d.fs
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.durable {
		if filepath.Dir(name) == d.dir && c.live[name] == nil {
			delete(c.durable, name)
		}
	}
	for name, ino := range c.live {
		if filepath.Dir(name) == d.dir {
			c.durable[name] = ino
		}
	}
	c.syncs = append(c.syncs, d.dir+"/")
	return nil
}
