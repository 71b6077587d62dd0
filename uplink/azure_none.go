//go:build notrib_azure

package uplink

import (
	"context"
	"errors"

	"gocloud.dev/blob"

	"github.com/tributary-io/tributary/tables"
)

// openAzure of a build without the Azure SDK (tag notrib_azure):
// OpenBucket has already refused the warehouse through tables.StoreLinked.
func openAzure(context.Context, tables.AzureLocation, tables.AzureOptions) (*blob.Bucket, string, error) {
	return nil, "", errors.New("this build has no Azure support; build without the notrib_azure tag")
}

func azureRefused(error) bool { return false }
