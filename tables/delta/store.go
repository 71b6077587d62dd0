package delta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Store is where a table's files are: keys are slash-separated paths
// below the store's root. A Delta commit needs PutIfAbsent: the object
// appears whole, or not at all when it exists already (ErrExists), and of
// two writers of one key exactly one wins.
type Store interface {
	Read(ctx context.Context, key string, limit int64) ([]byte, error) // fs.ErrNotExist when missing
	PutIfAbsent(ctx context.Context, key string, data []byte) error    // ErrExists when present
	Put(ctx context.Context, key string, data []byte) error
	List(ctx context.Context, prefix string) ([]string, error) // keys below prefix, sorted
	Delete(ctx context.Context, key string) error
}

// ErrExists is PutIfAbsent's refusal.
var ErrExists = errors.New("delta: object exists")

// ErrTooLarge is Read's refusal of an object over its limit.
var ErrTooLarge = errors.New("delta: object over the size cap")

// DirStore is a Store on a local folder (file:// tables). PutIfAbsent
// writes a temporary file, syncs it, and hard-links it to the key: link
// fails atomically when the key exists (across processes, unlike a stat
// before a rename), and the linked file is complete.
type DirStore struct{ Root string }

func (d DirStore) path(key string) string { return filepath.Join(d.Root, filepath.FromSlash(key)) }

// Read returns the object, at most limit bytes (0: no cap).
func (d DirStore) Read(_ context.Context, key string, limit int64) ([]byte, error) {
	f, err := os.Open(d.path(key))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCapped(f, key, limit)
}

func readCapped(r io.Reader, key string, limit int64) ([]byte, error) {
	if limit <= 0 {
		return io.ReadAll(r)
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, key, limit)
	}
	return b, nil
}

func (d DirStore) temp(key string, data []byte) (string, error) {
	p := d.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// PutIfAbsent links a complete temporary file to key.
func (d DirStore) PutIfAbsent(_ context.Context, key string, data []byte) error {
	tmp, err := d.temp(key, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, d.path(key)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExists, key)
		}
		return err
	}
	return syncDir(filepath.Dir(d.path(key)))
}

// Put replaces key atomically (rename).
func (d DirStore) Put(_ context.Context, key string, data []byte) error {
	tmp, err := d.temp(key, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, d.path(key)); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(d.path(key)))
}

// List lists the files directly in the folder of prefix whose names
// start with prefix's last element (the log is flat).
func (d DirStore) List(_ context.Context, prefix string) ([]string, error) {
	dir, base := prefix, ""
	if !strings.HasSuffix(prefix, "/") {
		dir, base = filepath.ToSlash(filepath.Dir(prefix)), filepath.Base(prefix)
		if dir == "." {
			dir = ""
		}
		dir += "/"
	}
	ents, err := os.ReadDir(d.path(strings.TrimSuffix(dir, "/")))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasPrefix(e.Name(), base) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, strings.TrimPrefix(dir, "/")+e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Delete removes key; a missing key is not an error.
func (d DirStore) Delete(_ context.Context, key string) error {
	err := os.Remove(d.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// BlobStore is a Store on a gocloud blob bucket (s3://, gs://, Azure).
// PutIfAbsent is a conditional write (WriterOptions.IfNotExist: S3's
// If-None-Match: *, GCS's ifGenerationMatch=0, Azure's If-None-Match: *),
// which the store decides atomically. Not for fileblob: its IfNotExist is
// a stat before a rename, atomic only inside one process — use DirStore.
type BlobStore struct{ B *blob.Bucket }

// Read returns the object, at most limit bytes (0: no cap).
func (s BlobStore) Read(ctx context.Context, key string, limit int64) ([]byte, error) {
	r, err := s.B.NewReader(ctx, key, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, fmt.Errorf("%s: %w", key, fs.ErrNotExist)
		}
		return nil, err
	}
	defer r.Close()
	return readCapped(r, key, limit)
}

// PutIfAbsent writes key only if it does not exist.
func (s BlobStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	err := s.B.WriteAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true, ContentType: "application/json", DisableContentTypeDetection: true})
	if err != nil && gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return fmt.Errorf("%w: %s", ErrExists, key)
	}
	return err
}

// Put writes key whole.
func (s BlobStore) Put(ctx context.Context, key string, data []byte) error {
	return s.B.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/octet-stream", DisableContentTypeDetection: true})
}

// List lists the keys below prefix.
func (s BlobStore) List(ctx context.Context, prefix string) ([]string, error) {
	it := s.B.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	var out []string
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if !o.IsDir {
			out = append(out, o.Key)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Delete removes key; a missing key is not an error.
func (s BlobStore) Delete(ctx context.Context, key string) error {
	err := s.B.Delete(ctx, key)
	if err != nil && gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return err
}
