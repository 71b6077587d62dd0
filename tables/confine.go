package tables

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"net/url"
	"path"
	"strings"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// ErrOutsideTable refuses a delete of a path outside the table's own
// folder (a manifest, manifest list or statistics entry naming a file
// elsewhere).
var ErrOutsideTable = errors.New("path outside the table's folder")

// InFolder reports whether p names a file strictly inside folder: the
// same scheme, the same authority (bucket, container@account), and a path
// below folder's once cleaned, with no "." or ".." segment in p (plain or
// percent-encoded), no backslash, query or fragment. A path without a
// scheme is inside a file:// folder when its absolute path is (the local
// FileIO reads plain paths as local files, and iceberg-go's orphan
// planning lists them so), and never inside a folder of another scheme.
func InFolder(folder, p string) bool {
	f, err := url.Parse(strings.TrimRight(folder, "/"))
	if err != nil {
		return false
	}
	u, err := url.Parse(p)
	if err != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.Contains(p, `\`) {
		return false
	}
	plainLocal := u.Scheme == "" && u.Host == "" && u.User == nil && strings.EqualFold(f.Scheme, "file") && f.Host == "" && strings.HasPrefix(p, "/")
	if !plainLocal && (!strings.EqualFold(u.Scheme, f.Scheme) || u.Host != f.Host || u.User.String() != f.User.String()) {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	base := path.Clean("/" + f.Path)
	return path.Clean(u.Path) == u.Path && strings.HasPrefix(u.Path, strings.TrimRight(base, "/")+"/")
}

// confinedIO is the FileIO every maintenance pass works through: reads
// and writes go to the table's own IO, and Remove deletes only inside the
// table's folder, telling refused of every other path (and returning
// ErrOutsideTable for it). It deliberately does not offer bulk deletes, so
// iceberg-go's post-commit cleanup removes file by file through Remove.
type confinedIO struct {
	io      icebergio.IO
	folder  string
	refused func(path string)
	// kept, when set, reports the paths another log (the table's Delta
	// log) still references: Remove leaves them and returns nil.
	kept func(path string) bool
}

func (c *confinedIO) Open(name string) (icebergio.File, error) { return c.io.Open(name) }

func (c *confinedIO) Remove(name string) error {
	if !InFolder(c.folder, name) {
		if c.refused != nil {
			c.refused(name)
		}
		return fmt.Errorf("delete %s: %w %s", name, ErrOutsideTable, c.folder)
	}
	if c.kept != nil && c.kept(name) {
		return nil
	}
	return c.io.Remove(name)
}

func (c *confinedIO) ReadFile(name string) ([]byte, error) {
	if r, ok := c.io.(icebergio.ReadFileIO); ok {
		return r.ReadFile(name)
	}
	return nil, fmt.Errorf("read %s: %w", name, errors.ErrUnsupported)
}

func (c *confinedIO) Create(name string) (icebergio.FileWriter, error) {
	if w, ok := c.io.(icebergio.WriteFileIO); ok {
		return w.Create(name)
	}
	return nil, fmt.Errorf("create %s: %w", name, errors.ErrUnsupported)
}

func (c *confinedIO) WriteFile(name string, p []byte) error {
	if w, ok := c.io.(icebergio.WriteFileIO); ok {
		return w.WriteFile(name, p)
	}
	return fmt.Errorf("write %s: %w", name, errors.ErrUnsupported)
}

func (c *confinedIO) WalkDir(root string, fn iofs.WalkDirFunc) error {
	if l, ok := c.io.(icebergio.ListableIO); ok {
		return l.WalkDir(root, fn)
	}
	return fmt.Errorf("walk %s: %w", root, errors.ErrUnsupported)
}

func (c *confinedIO) Stat(name string) (iofs.FileInfo, error) {
	if s, ok := c.io.(icebergio.StatIO); ok {
		return s.Stat(name)
	}
	return nil, fmt.Errorf("stat %s: %w", name, errors.ErrUnsupported)
}

// confine returns t with its FileIO wrapped in a confinedIO of folder:
// everything a transaction of the result deletes after its commit (the
// files of expired snapshots, superseded manifests, old metadata) goes
// through it, as do the pass's own orphan deletes; kept (may be nil)
// names the files it must leave.
func confine(t *table.Table, cat table.CatalogIO, folder string, refused func(string), kept func(string) bool) *table.Table {
	return table.New(t.Identifier(), t.Metadata(), t.MetadataLocation(), func(ctx context.Context) (icebergio.IO, error) {
		fs, err := t.FS(ctx)
		if err != nil {
			return nil, err
		}
		return &confinedIO{io: fs, folder: folder, refused: refused, kept: kept}, nil
	}, cat)
}
