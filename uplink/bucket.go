package uplink

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// warehouses
	"gocloud.dev/gcerrors"

	"github.com/tributary-io/tributary/internal/vfs"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
)

// BlobBucket is a Bucket on a warehouse URL: file://, s3://, gs://, and
// Azure's abfss:// and wasbs:// (tables.ParseAzureWarehouse). On file:// it also fsyncs
// each object and its folder, so that
// a committed file survives a power cut like the WAL records it replaced.
type BlobBucket struct {
	b       *blob.Bucket
	fileDir string // local root for file:// URLs
}

// OpenBucket opens the warehouse bucket: file://, s3://, gs:// or Azure (configured
// by stores, which may be zero for the SDKs' defaults), or any other
// gocloud.dev/blob URL whose driver is linked in. On a cloud store it
// checks that the bucket exists and the credentials reach it, so that a
// typo is a start-up error naming catalog.warehouse, not a stuck uplink.
func OpenBucket(ctx context.Context, warehouse string, stores ...tables.StoreOptions) (*BlobBucket, error) {
	u, err := url.Parse(warehouse)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", warehouse, err)
	}
	var o tables.StoreOptions
	if len(stores) > 0 {
		o = stores[0]
	}
	if err := tables.StoreLinked(warehouse); err != nil {
		return nil, fmt.Errorf("catalog.warehouse: %w", err)
	}
	bb := &BlobBucket{}
	switch u.Scheme {
	case "s3":
		b, err := openS3(ctx, u, o.S3)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", warehouse, err)
		}
		bb.b = b
		return bb, nil
	case "gs":
		b, err := openGCS(ctx, u, o.GCS)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", warehouse, err)
		}
		if err := checkAccessible(ctx, b, "gcs", u.Host, "the credentials of storage.gcs"); err != nil {
			b.Close()
			return nil, err
		}
		bb.b = b
		return bb, nil
	}
	if loc, ok, err := tables.ParseAzureWarehouse(warehouse); ok {
		if err != nil {
			return nil, fmt.Errorf("catalog.warehouse: %w", err)
		}
		b, credKey, err := openAzure(ctx, loc, o.Azure)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", warehouse, err)
		}
		if err := checkAccessible(ctx, b, "azure", loc.Container, credKey); err != nil {
			b.Close()
			return nil, err
		}
		bb.b = b
		return bb, nil
	}
	openURL := warehouse
	if u.Scheme == "file" {
		bb.fileDir = u.Path
		if err := os.MkdirAll(u.Path, 0o700); err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", warehouse, err)
		}
		// no_tmp_dir keeps the temp file next to its target so the final
		// rename is atomic on one filesystem.
		q := u.Query()
		q.Set("no_tmp_dir", "true")
		u.RawQuery = q.Encode()
		openURL = u.String()
	}
	b, err := blob.OpenBucket(ctx, openURL)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", warehouse, err)
	}
	bb.b = b
	return bb, nil
}

// WriteAll writes one object whole.
func (b *BlobBucket) WriteAll(ctx context.Context, key string, data []byte) error {
	opts := &blob.WriterOptions{ContentType: "application/vnd.apache.parquet"}
	if b.fileDir != "" {
		opts.DisableContentTypeDetection = true
	}
	if err := b.b.WriteAll(ctx, key, data, opts); err != nil {
		return err
	}
	if b.fileDir != "" {
		p := filepath.Join(b.fileDir, filepath.FromSlash(key))
		if err := vfs.SyncDir(vfs.OS, p); err != nil {
			return err
		}
		return vfs.SyncDir(vfs.OS, filepath.Dir(p))
	}
	return nil
}

// Bucket exposes the underlying blob bucket.
func (b *BlobBucket) Bucket() *blob.Bucket { return b.b }

// Close closes the bucket.
func (b *BlobBucket) Close() error { return b.b.Close() }

// DeltaStore is the store Delta logs are committed to: on file:// a
// folder store whose put-if-absent is a hard link (atomic across
// processes); on the cloud stores the bucket's conditional writes.
func (b *BlobBucket) DeltaStore() delta.Store {
	if b.fileDir != "" {
		return delta.DirStore{Root: b.fileDir}
	}
	return delta.BlobStore{B: b.b}
}

// checkAccessible reports a bucket (container) that does not exist, or that
// the credentials (of the key credKey) may not use, as an error naming
// catalog.warehouse. Any other failure (the store unreachable, a timeout, a
// name that does not resolve) only warns: an edge that starts offline
// must still accept into its WAL, and the uplink retries.
func checkAccessible(ctx context.Context, b *blob.Bucket, store, name, credKey string) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, _, err := b.ListPage(cctx, blob.FirstPageToken, 1, nil)
	switch {
	case err == nil:
		return nil
	case gcerrors.Code(err) == gcerrors.NotFound && !strings.Contains(err.Error(), "no such host"):
		return fmt.Errorf("catalog.warehouse: %s bucket %q does not exist", store, name)
	case gcerrors.Code(err) == gcerrors.PermissionDenied || refused(err):
		return fmt.Errorf("catalog.warehouse: %s bucket %q refuses the credentials (check %s): %w", store, name, credKey, err)
	}
	slog.Warn("warehouse not reachable at start-up; uploads retry", "store", store, "bucket", name, "err", err)
	return nil
}

// refused is whether err is a store's HTTP 401 or 403 answer.
func refused(err error) bool {
	return azureRefused(err) || gcsRefused(err)
}
