package tables

import (
	"context"
	"errors"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	iceio "github.com/apache/iceberg-go/io"

	"github.com/tributary-io/tributary/internal/vfs"
)

// syncFS is iceberg-go's LocalFS with durable writes: a file created or
// written through it is fsynced before Close returns, and so is the
// directory that holds it. iceberg-go's own LocalFS only closes, so after a
// power cut (not a process crash) the SQLite catalog could point at a
// metadata.json or manifest that never reached the disk. The catalog
// pointer is committed after the metadata file is written, so syncing here
// orders the two on disk as well as in the program.
//
// It replaces the "file" and "" schemes of iceberg-go's FileIO registry for
// the whole process (init below); every other method is LocalFS's. Its
// writes go through disk (vfs.OS when nil), so that a test can check with a
// crash-simulating file system that every fsync it needs is there.
type syncFS struct {
	iceio.LocalFS
	disk vfs.FS
}

func (fs syncFS) fs() vfs.FS {
	if fs.disk == nil {
		return vfs.OS
	}
	return fs.disk
}

func init() {
	factory := func(context.Context, *url.URL, map[string]string) (iceio.IO, error) { return syncFS{}, nil }
	for _, scheme := range []string{"file", ""} {
		iceio.Unregister(scheme)
		iceio.Register(scheme, factory)
	}
}

// localFilePath turns a file:// URL or a plain path into a path.
func localFilePath(name string) (string, error) {
	if !strings.HasPrefix(name, "file:") {
		return name, nil
	}
	u, err := url.Parse(name)
	if err != nil {
		return "", err
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", errors.New("tables: unsupported file URL host " + u.Host)
	}
	return filepath.FromSlash(u.Path), nil
}

// Create returns a writer whose Close fsyncs the file and its directory
// (creating the directory first, as LocalFS does).
func (fs syncFS) Create(name string) (iceio.FileWriter, error) {
	p, err := localFilePath(name)
	if err != nil {
		return nil, err
	}
	disk := fs.fs()
	if err := disk.MkdirAll(filepath.Dir(p)); err != nil {
		return nil, err
	}
	f, err := disk.Create(p)
	if err != nil {
		return nil, err
	}
	return &syncFile{f: f, disk: disk}, nil
}

// WriteFile writes content and fsyncs the file and its directory.
func (fs syncFS) WriteFile(name string, content []byte) error {
	w, err := fs.Create(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(content); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// Rename renames and fsyncs the destination's directory.
func (fs syncFS) Rename(oldpath, newpath string) error {
	src, err := localFilePath(oldpath)
	if err != nil {
		return err
	}
	dst, err := localFilePath(newpath)
	if err != nil {
		return err
	}
	disk := fs.fs()
	if err := disk.Rename(src, dst); err != nil {
		return err
	}
	return vfs.SyncDir(disk, filepath.Dir(dst))
}

// syncFile is a file of syncFS: Close fsyncs it, closes it, and fsyncs its
// directory, so that both its data and its name survive a power cut.
type syncFile struct {
	f    vfs.File
	disk vfs.FS
}

func (f *syncFile) Write(p []byte) (int, error) { return f.f.Write(p) }

// ReadFrom uses the file's own ReadFrom (an *os.File's copies in the
// kernel where it can), else Write.
func (f *syncFile) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := f.f.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{f.f}, r)
}

func (f *syncFile) Close() error {
	serr := f.f.Sync()
	cerr := f.f.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return err
	}
	return vfs.SyncDir(f.disk, filepath.Dir(f.f.Name()))
}
