//go:build !notrib_s3

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

	"github.com/tributary-io/tributary/tables"
)

// openS3 opens s3://bucket/prefix as a bucket whose keys are relative to
// prefix.
func openS3(ctx context.Context, u *url.URL, o tables.S3Options) (*blob.Bucket, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(o.RegionOrDefault())}
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
