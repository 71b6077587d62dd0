package uplink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcerrors"
	"gocloud.dev/gcp"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/googleapi"
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
	var az *azcore.ResponseError
	if errors.As(err, &az) {
		return az.StatusCode == http.StatusUnauthorized || az.StatusCode == http.StatusForbidden
	}
	var g *googleapi.Error
	if errors.As(err, &g) {
		return g.Code == http.StatusUnauthorized
	}
	return false
}
