package cloudwrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/tributary-io/tributary/uplink"
)

// Store is the object store WAL objects are written to: the warehouse
// bucket. Implementations must be safe for concurrent use.
type Store interface {
	// Put writes one object whole and durably.
	Put(ctx context.Context, key string, data []byte) error
	// ReadRange reads n bytes of key from off.
	ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error)
	// Delete removes key; a missing key is no error.
	Delete(ctx context.Context, key string) error
	// List calls fn with every key below prefix and its modification time.
	List(ctx context.Context, prefix string, fn func(key string, mod time.Time) error) error
}

// BucketStore is a Store on the warehouse bucket (uplink.OpenBucket:
// file://, s3://, gs://, Azure), whose writes on file:// are fsynced.
type BucketStore struct{ B *uplink.BlobBucket }

// Put writes key (uplink.BlobBucket.WriteAll).
func (s BucketStore) Put(ctx context.Context, key string, data []byte) error {
	return s.B.WriteAll(ctx, key, data)
}

// ReadRange reads [off, off+n) of key.
func (s BucketStore) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	r, err := s.B.Bucket().NewRangeReader(ctx, key, off, n, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("read %s [%d,+%d): %w", key, off, n, err)
	}
	return b, nil
}

// Delete removes key.
func (s BucketStore) Delete(ctx context.Context, key string) error {
	err := s.B.Bucket().Delete(ctx, key)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil
	}
	return err
}

// List lists the keys below prefix.
func (s BucketStore) List(ctx context.Context, prefix string, fn func(string, time.Time) error) error {
	it := s.B.Bucket().List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if o.IsDir {
			continue
		}
		if err := fn(o.Key, o.ModTime); err != nil {
			return err
		}
	}
}
