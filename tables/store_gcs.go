//go:build !notrib_gcs

package tables

import (
	_ "github.com/apache/iceberg-go/io/gocloud/gcs" // gs:// table locations
)

// The build tag notrib_gcs leaves this file, and with it iceberg-go's
// gcs FileIO and its SDK, out of the binary (see stores.go).
func init() { linked[StoreGCS] = true }
