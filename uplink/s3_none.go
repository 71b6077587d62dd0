//go:build notrib_s3

package uplink

import (
	"context"
	"net/url"

	"gocloud.dev/blob"

	"github.com/tributary-io/tributary/tables"
)

// openS3 of a build without the AWS SDK (tag notrib_s3): OpenBucket has
// already refused the warehouse through tables.StoreLinked.
func openS3(_ context.Context, u *url.URL, _ tables.S3Options) (*blob.Bucket, error) {
	return nil, tables.StoreLinked(u.String())
}
