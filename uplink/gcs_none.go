//go:build notrib_gcs

package uplink

import (
	"context"
	"net/url"

	"gocloud.dev/blob"

	"github.com/tributary-io/tributary/tables"
)

// openGCS of a build without the Google Cloud SDK (tag notrib_gcs):
// OpenBucket has already refused the warehouse through tables.StoreLinked.
func openGCS(_ context.Context, u *url.URL, _ tables.GCSOptions) (*blob.Bucket, error) {
	return nil, tables.StoreLinked(u.String())
}

func gcsRefused(error) bool { return false }
