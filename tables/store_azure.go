//go:build !notrib_azure

package tables

import (
	_ "github.com/apache/iceberg-go/io/gocloud/azure" // abfss:// and wasbs:// table locations
)

// The build tag notrib_azure leaves this file, and with it iceberg-go's
// azure FileIO and its SDK, out of the binary (see stores.go).
func init() { linked[StoreAzure] = true }
