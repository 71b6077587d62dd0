package uplink

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"

	"github.com/tributary-io/tributary/tables"
)

const gcsScope = "https://www.googleapis.com/auth/devstorage.read_write"

// openGCS opens gs://bucket/prefix as a bucket whose keys are relative to
// prefix, with the same credentials and endpoint as iceberg-go's gcs.*
// FileIO properties (tables.GCSOptions.IcebergProperties).
func openGCS(ctx context.Context, u *url.URL, o tables.GCSOptions) (*blob.Bucket, error) {
	o = o.Resolved()
	var client *gcp.HTTPClient
	switch {
	case o.Anonymous:
		client = gcp.NewAnonymousHTTPClient(gcp.DefaultTransport())
	default:
		var creds *google.Credentials
		var err error
		if o.CredentialsFile != "" {
			data, rerr := os.ReadFile(o.CredentialsFile)
			if rerr != nil {
				return nil, fmt.Errorf("storage.gcs.credentials_file: %w", rerr)
			}
			creds, err = google.CredentialsFromJSON(ctx, data, gcsScope)
			if err != nil {
				return nil, fmt.Errorf("storage.gcs.credentials_file %s: %w", o.CredentialsFile, err)
			}
		} else if creds, err = gcp.DefaultCredentials(ctx); err != nil {
			return nil, fmt.Errorf("gcs: no application-default credentials (set storage.gcs.credentials_file, or storage.gcs.anonymous for an emulator): %w", err)
		}
		if client, err = gcp.NewHTTPClient(gcp.DefaultTransport(), gcp.CredentialsTokenSource(creds)); err != nil {
			return nil, err
		}
	}
	var opts gcsblob.Options
	if o.Endpoint != "" {
		opts.ClientOptions = append(opts.ClientOptions, option.WithEndpoint(o.Endpoint))
	}
	b, err := gcsblob.OpenBucket(ctx, client, u.Host, &opts)
	if err != nil {
		return nil, err
	}
	if prefix := strings.Trim(u.Path, "/"); prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
	}
	return b, nil
}

// checkAccessible reports a bucket (container) that does not exist or that
// the credentials (of the key credKey) cannot reach as an error naming
// catalog.warehouse.
func checkAccessible(ctx context.Context, b *blob.Bucket, store, name, credKey string) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ok, err := b.IsAccessible(cctx)
	if err != nil {
		return fmt.Errorf("catalog.warehouse: %s bucket %q is not reachable (check %s): %w", store, name, credKey, err)
	}
	if !ok {
		return fmt.Errorf("catalog.warehouse: %s bucket %q does not exist", store, name)
	}
	return nil
}
