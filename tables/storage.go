package tables

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
