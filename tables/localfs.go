package tables

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	iceio "github.com/apache/iceberg-go/io"
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
// the whole process (init below); every other method is LocalFS's.
type syncFS struct{ iceio.LocalFS }

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

// Create returns a writer whose Close fsyncs the file and its directory.
func (fs syncFS) Create(name string) (iceio.FileWriter, error) {
	w, err := fs.LocalFS.Create(name)
	if err != nil {
		return nil, err
	}
	f, ok := w.(*os.File)
	if !ok {
		return w, nil
	}
	return &syncFile{File: f}, nil
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
	if err := fs.LocalFS.Rename(oldpath, newpath); err != nil {
		return err
	}
	p, err := localFilePath(newpath)
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(p))
}

type syncFile struct{ *os.File }

func (f *syncFile) Close() error {
	serr := f.File.Sync()
	cerr := f.File.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return err
	}
	return syncDir(filepath.Dir(f.File.Name()))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
