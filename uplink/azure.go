//go:build !notrib_azure

package uplink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"

	"github.com/tributary-io/tributary/tables"
)

// openAzure opens an abfss:// (or wasbs://) warehouse as a bucket whose
// keys are relative to its prefix, with the same credentials and endpoint
// as iceberg-go's adls.* FileIO properties
// (tables.AzureOptions.IcebergProperties). credKey is the storage.azure
// key the credentials came from, for errors.
func openAzure(ctx context.Context, loc tables.AzureLocation, o tables.AzureOptions) (b *blob.Bucket, credKey string, err error) {
	o = o.Resolved()
	protocol, domain, err := o.EndpointParts(loc.Account)
	if err != nil {
		return nil, "", fmt.Errorf("storage.azure.endpoint: %w", err)
	}
	if domain == "" {
		domain = "blob.core.windows.net"
	}
	svc, err := azureblob.NewServiceURL(&azureblob.ServiceURLOptions{AccountName: loc.Account, Protocol: protocol,
		StorageDomain: domain, SASToken: o.SASToken})
	if err != nil {
		return nil, "", fmt.Errorf("storage.azure: %w", err)
	}
	su, err := url.Parse(string(svc))
	if err != nil {
		return nil, "", fmt.Errorf("storage.azure: %w", err)
	}
	su = su.JoinPath(loc.Container)
	containerURL := su.String()
	var client *container.Client
	switch {
	case o.ConnectionString != "":
		credKey = "storage.azure.connection_string"
		client, err = container.NewClientFromConnectionString(o.ConnectionString, loc.Container, nil)
	case o.Key != "":
		credKey = "storage.azure.key"
		cred, cerr := azblob.NewSharedKeyCredential(loc.Account, o.Key)
		if cerr != nil {
			return nil, credKey, fmt.Errorf("storage.azure.key: %w", cerr)
		}
		client, err = container.NewClientWithSharedKeyCredential(containerURL, cred, nil)
	case o.SASToken != "":
		credKey = "storage.azure.sas_token"
		client, err = container.NewClientWithNoCredential(containerURL, nil)
	default:
		credKey = "storage.azure (Azure's default credential chain)"
		cred, cerr := azidentity.NewDefaultAzureCredential(nil)
		if cerr != nil {
			return nil, credKey, fmt.Errorf("azure: no default credential (set storage.azure.key, sas_token or connection_string): %w", cerr)
		}
		client, err = container.NewClient(containerURL, cred, nil)
	}
	if err != nil {
		return nil, credKey, fmt.Errorf("%s: %w", credKey, err)
	}
	b, err = azureblob.OpenBucket(ctx, client, nil)
	if err != nil {
		return nil, credKey, err
	}
	if loc.Prefix != "" {
		b = blob.PrefixedBucket(b, loc.Prefix+"/")
	}
	return b, credKey, nil
}

// azureRefused is whether err is Azure's HTTP 401 or 403 answer.
func azureRefused(err error) bool {
	var az *azcore.ResponseError
	return errors.As(err, &az) && (az.StatusCode == http.StatusUnauthorized || az.StatusCode == http.StatusForbidden)
}
