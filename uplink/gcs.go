//go:build !notrib_gcs

package uplink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
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

// gcsRefused is whether err is GCS's HTTP 401 answer.
func gcsRefused(err error) bool {
	var g *googleapi.Error
	return errors.As(err, &g) && g.Code == http.StatusUnauthorized
}
