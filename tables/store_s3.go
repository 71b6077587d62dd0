//go:build !notrib_s3

package tables

import (
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // s3:// table locations
)

// The build tag notrib_s3 leaves this file, and with it iceberg-go's
// s3 FileIO and its SDK, out of the binary (see stores.go).
func init() { linked[StoreS3] = true }
