package tables

import (
	"fmt"
	"net/url"
	"os"
	"strings"
)

// S3Options configure an s3:// warehouse on AWS or an S3-compatible store.
// Empty fields fall back to the AWS SDK's defaults (environment, shared
// config, instance role).
type S3Options struct {
	Endpoint        string // e.g. http://127.0.0.1:7070 for an S3-compatible store
	Region          string // default us-east-1
	PathStyle       bool   // bucket in the path, not the host name (most S3-compatible stores)
	AccessKeyID     string
	SecretAccessKey string
}

// IcebergProperties are the same settings as iceberg-go FileIO properties,
// so that readers of the tables reach the store the uplink writes to.
func (o S3Options) IcebergProperties() map[string]string {
	p := map[string]string{}
	if o.Endpoint != "" {
		p["s3.endpoint"] = o.Endpoint
	}
	p["s3.region"] = o.RegionOrDefault()
	if o.AccessKeyID != "" {
		p["s3.access-key-id"] = o.AccessKeyID
		p["s3.secret-access-key"] = o.SecretAccessKey
	}
	if o.PathStyle {
		p["s3.force-virtual-addressing"] = "false"
	}
	return p
}

// RegionOrDefault is Region, or us-east-1 when it is empty.
func (o S3Options) RegionOrDefault() string {
	if o.Region == "" {
		return "us-east-1"
	}
	return o.Region
}

// GCSOptions configure a gs:// warehouse on Google Cloud Storage or an
// emulator. Empty fields use application-default credentials and the
// public endpoint; STORAGE_EMULATOR_HOST (host:port) stands for an
// anonymous Endpoint of http://HOST/storage/v1/ when Endpoint is empty.
type GCSOptions struct {
	Endpoint        string // e.g. http://127.0.0.1:4443/storage/v1/ for fake-gcs-server
	CredentialsFile string // service-account JSON key; default application-default credentials
	Anonymous       bool   // no credentials at all (public buckets, emulators)
}

// Resolved is o with STORAGE_EMULATOR_HOST applied.
func (o GCSOptions) Resolved() GCSOptions {
	if o.Endpoint == "" {
		if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
			if !strings.Contains(h, "://") {
				h = "http://" + h
			}
			o.Endpoint = strings.TrimRight(h, "/") + "/storage/v1/"
			if o.CredentialsFile == "" {
				o.Anonymous = true
			}
		}
	}
	return o
}

// IcebergProperties are the same settings as iceberg-go's gcs.* FileIO
// properties (io/gocloud/gcs).
func (o GCSOptions) IcebergProperties() map[string]string {
	o = o.Resolved()
	p := map[string]string{}
	if o.Endpoint != "" {
		p["gcs.service.host"] = o.Endpoint
	}
	if o.CredentialsFile != "" {
		p["gcs.keypath"] = o.CredentialsFile
	}
	if o.Anonymous {
		p["gcs.no-auth"] = "true"
	}
	return p
}

// StoreOptions are the settings of every store; the warehouse's scheme
// picks the ones that apply.
type StoreOptions struct {
	S3    S3Options
	GCS   GCSOptions
	Azure AzureOptions
}

// IcebergProperties are the FileIO properties of warehouse's store (nil
// for file://).
func (o StoreOptions) IcebergProperties(warehouse string) map[string]string {
	switch {
	case strings.HasPrefix(warehouse, "s3://"):
		return o.S3.IcebergProperties()
	case strings.HasPrefix(warehouse, "gs://"):
		return o.GCS.IcebergProperties()
	}
	if _, ok, _ := ParseAzureWarehouse(warehouse); ok {
		return o.Azure.IcebergProperties(warehouse)
	}
	return nil
}

// AzureOptions configure an Azure warehouse
// (abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix, or wasbs://…
// .blob.core.windows.net). One of Key, SASToken or ConnectionString, or
// none for Azure's default credential chain (environment, managed identity,
// az login); empty ones are taken from AZURE_STORAGE_KEY,
// AZURE_STORAGE_SAS_TOKEN and AZURE_STORAGE_CONNECTION_STRING.
type AzureOptions struct {
	Account          string // default: the warehouse's account
	Key              string // shared key
	SASToken         string
	ConnectionString string
	Endpoint         string // e.g. http://127.0.0.1:10000/devstoreaccount1 for Azurite
}

// Resolved is o with the environment's secrets filled in.
func (o AzureOptions) Resolved() AzureOptions {
	if o.Key == "" && o.SASToken == "" && o.ConnectionString == "" {
		o.Key = os.Getenv("AZURE_STORAGE_KEY")
		o.SASToken = os.Getenv("AZURE_STORAGE_SAS_TOKEN")
		o.ConnectionString = os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	}
	o.SASToken = strings.TrimPrefix(o.SASToken, "?")
	return o
}

// AzureLocation is an Azure warehouse URL taken apart.
type AzureLocation struct {
	Container, Account, Host, Prefix string
}

// ParseAzureWarehouse parses abfs(s)://CONTAINER@ACCOUNT.HOST/prefix and
// wasb(s)://CONTAINER@ACCOUNT.HOST/prefix, the forms Spark, Trino and
// iceberg-go's adls FileIO read; ok is false for another scheme.
func ParseAzureWarehouse(warehouse string) (loc AzureLocation, ok bool, err error) {
	u, err := url.Parse(warehouse)
	if err != nil {
		return loc, false, err
	}
	switch u.Scheme {
	case "abfss", "abfs", "wasbs", "wasb":
	default:
		return loc, false, nil
	}
	loc.Host = u.Hostname()
	loc.Account, _, _ = strings.Cut(loc.Host, ".")
	if u.User != nil {
		loc.Container = u.User.Username()
	}
	if loc.Container == "" || loc.Account == "" {
		return loc, true, fmt.Errorf("%q: want %s://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix", warehouse, u.Scheme)
	}
	loc.Prefix = strings.Trim(u.Path, "/")
	return loc, true, nil
}

// EndpointParts are the protocol and storage domain of Endpoint for
// account (Azurite's http://127.0.0.1:10000/devstoreaccount1 → http,
// 127.0.0.1:10000; https://ACCOUNT.blob.example → https, blob.example).
func (o AzureOptions) EndpointParts(account string) (protocol, domain string, err error) {
	if o.Endpoint == "" {
		return "", "", nil
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("%q: want an http(s):// URL", o.Endpoint)
	}
	return u.Scheme, strings.TrimPrefix(u.Host, account+"."), nil
}

// IcebergProperties are the same settings as iceberg-go's adls.* FileIO
// properties (io/gocloud/azure) for warehouse.
func (o AzureOptions) IcebergProperties(warehouse string) map[string]string {
	loc, ok, err := ParseAzureWarehouse(warehouse)
	if !ok || err != nil {
		return nil
	}
	o = o.Resolved()
	p := map[string]string{}
	if protocol, domain, err := o.EndpointParts(loc.Account); err == nil && domain != "" {
		p["adls.endpoint"] = domain
		p["adls.protocol"] = protocol
	}
	switch {
	case o.ConnectionString != "":
		p["adls.connection-string."+loc.Account] = o.ConnectionString
	case o.Key != "":
		p["adls.auth.shared-key.account.name"] = loc.Account
		p["adls.auth.shared-key.account.key"] = o.Key
	case o.SASToken != "":
		p["adls.sas-token."+loc.Host] = o.SASToken
	}
	return p
}
