package uplink

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
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
	p["s3.region"] = o.region()
	if o.AccessKeyID != "" {
		p["s3.access-key-id"] = o.AccessKeyID
		p["s3.secret-access-key"] = o.SecretAccessKey
	}
	if o.PathStyle {
		p["s3.force-virtual-addressing"] = "false"
	}
	return p
}

func (o S3Options) region() string {
	if o.Region == "" {
		return "us-east-1"
	}
	return o.Region
}

// openS3 opens s3://bucket/prefix as a bucket whose keys are relative to
// prefix.
func openS3(ctx context.Context, u *url.URL, o S3Options) (*blob.Bucket, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(o.region())}
	if o.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
		so.UsePathStyle = o.PathStyle
	})
	b, err := s3blob.OpenBucket(ctx, client, u.Host, nil)
	if err != nil {
		return nil, err
	}
	if prefix := strings.Trim(u.Path, "/"); prefix != "" {
		b = blob.PrefixedBucket(b, prefix+"/")
	}
	return b, nil
}
