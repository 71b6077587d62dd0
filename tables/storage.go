package tables

import (
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
	S3  S3Options
	GCS GCSOptions
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
	return nil
}
