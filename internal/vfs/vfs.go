// Package vfs is the small file-system interface that durable writers
// (the local warehouse's FileIO in package tables) write through, so that
// a test can put a file system in its place that records what was fsynced
// and simulates a crash (package fault's CrashFS). OS is the real one;
// production code uses nothing else.
package vfs

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// FS is the part of a file system a durable writer needs: create and
// write a file, rename it, and fsync a directory (OpenDir + Sync) so that
// the names it holds survive a power cut.
type FS interface {
	// MkdirAll creates dir and its parents (mode 0700).
	MkdirAll(dir string) error
	// Create creates or truncates the file at path for writing.
	Create(path string) (File, error)
	// Rename renames oldpath to newpath, replacing newpath.
	Rename(oldpath, newpath string) error
	// OpenDir opens a directory so that it can be fsynced.
	OpenDir(dir string) (File, error)
}

// File is an open file (or directory) of an FS.
type File interface {
	io.Writer
	// Sync makes the file's data (for a directory: its entries) durable.
	Sync() error
	Close() error
	// Name is the path the file was opened with.
	Name() string
}

// OS is the operating system's file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) MkdirAll(dir string) error            { return os.MkdirAll(dir, 0o700) }
func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Create and OpenDir return a nil File, not a nil *os.File, on error.
func (osFS) Create(path string) (File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) OpenDir(dir string) (File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// SyncDir fsyncs dir (or a file: anything OpenDir opens) on fsys, so that
// the names it holds survive a power cut. A file system that cannot fsync
// a directory at all (EINVAL) is not an error.
func SyncDir(fsys FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
