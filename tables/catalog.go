package tables

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	_ "github.com/jackc/pgx/v5/stdlib" // Postgres catalogs
	_ "modernc.org/sqlite"             // pure-Go SQLite driver for the embedded catalog

	"github.com/tributary-io/tributary"
)

// Table properties through which Tributary keeps its own state in the
// catalog, committed atomically with data.
const (
	// PropHighWater + "<partition>" is the next offset of that partition not
	// yet in the table: every offset below it is committed exactly once.
	PropHighWater = "tributary.hwm."
	// PropNodePartition + "<node id>" is the partition a node writes for its
	// own clients (it may own more partitions by TakeOver: see PropOwner).
	PropNodePartition = "tributary.partition.node."
	// PropNextPartition is the next unallocated partition number.
	PropNextPartition = "tributary.partitions.next"
	// PropGranularity is "day" or "hour" (the partition spec's transform).
	PropGranularity = "tributary.partition.granularity"
)

// Config says where the catalog and the warehouse are.
type Config struct {
	// Name of the catalog; the first part of catalog.namespace.stream.
	Name string
	// URI of the catalog: "sqlite:///abs/path/catalog.db" (embedded default),
	// a path ending in .db, or "http(s)://host:port" for an Iceberg REST
	// catalog (a Tributary cloud server, or any other REST catalog).
	URI string
	// Warehouse is the root blob URL of table data: "file:///abs/dir",
	// "s3://bucket/prefix", ...
	Warehouse string
	// Granularity of the timestamp partition transform for new tables: day or hour.
	Granularity string
	// Properties are passed to the catalog (e.g. s3.endpoint for S3 FileIO).
	// For a REST catalog, "token" is sent as a bearer token and
	// "credential" (id:secret) is exchanged at the OAuth2 token endpoint.
	Properties map[string]string
	// TLS is the client TLS configuration of an https:// REST catalog
	// (e.g. RootCAs from the edge config's catalog.ca_file); nil = the
	// system's roots.
	TLS *tls.Config
	// SigV4, when set, signs every request to a REST catalog with AWS
	// Signature V4 (AWS Glue, S3 Tables, SeaweedFS) instead of a bearer
	// token.
	SigV4 *SigV4
}

// SigV4 is how REST catalog requests are signed with AWS Signature V4.
type SigV4 struct {
	// Region and Service of the signature (Service default execute-api;
	// glue for AWS Glue, s3tables for S3 Tables).
	Region, Service string
	// AccessKeyID and SecretAccessKey sign; both empty means the AWS
	// SDK's default chain (environment, shared config, instance role).
	AccessKeyID, SecretAccessKey string
}

// Catalog gives access to stream tables.
type Catalog struct {
	cfg Config
	cat catalog.Catalog
	db  *sql.DB
	// rest: cat is a REST catalog (http(s)://), ours or another's, which
	// may place tables where it likes (EnsureTable checks).
	rest bool

	mu     sync.Mutex
	tables map[string]*table.Table // last loaded, by stream
}

// Open connects to the catalog, creating an embedded SQLite catalog when
// the URI names one.
func Open(ctx context.Context, cfg Config) (*Catalog, error) {
	if cfg.Name == "" {
		cfg.Name = "tributary"
	}
	props := iceberg.Properties{"warehouse": cfg.Warehouse}
	for k, v := range cfg.Properties {
		props[k] = v
	}
	c := &Catalog{cfg: cfg, tables: map[string]*table.Table{}}
	switch {
	case strings.HasPrefix(cfg.URI, "sqlite://") || strings.HasSuffix(cfg.URI, ".db"):
		path := strings.TrimPrefix(cfg.URI, "sqlite://")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("open catalog: %w", err)
		}
		db, err := sql.Open("sqlite", SQLiteDSN(path))
		if err != nil {
			return nil, fmt.Errorf("open catalog %s: %w", path, err)
		}
		cat, err := sqlcat.NewCatalog(cfg.Name, db, sqlcat.SQLite, props)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("open catalog %s: %w", path, err)
		}
		c.cat, c.db = cat, db
	case strings.HasPrefix(cfg.URI, "http://") || strings.HasPrefix(cfg.URI, "https://"):
		cat, err := openREST(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("open catalog %s: %w", Redact(cfg.URI), err)
		}
		c.cat, c.rest = cat, true
	case strings.HasPrefix(cfg.URI, "postgres://") || strings.HasPrefix(cfg.URI, "postgresql://"):
		db, err := sql.Open("pgx", cfg.URI)
		if err != nil {
			return nil, fmt.Errorf("open catalog %s: %w", Redact(cfg.URI), err)
		}
		cat, err := sqlcat.NewCatalog(cfg.Name, db, sqlcat.Postgres, props)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("open catalog %s: %w", Redact(cfg.URI), err)
		}
		c.cat, c.db = cat, db
	default:
		return nil, fmt.Errorf("open catalog: unsupported catalog uri %q (want sqlite:///path, postgres://user@host/db or http(s)://host:port)", Redact(cfg.URI))
	}
	return c, nil
}

// Wrap gives access to stream tables through an iceberg-go catalog that is
// already open (cfg.URI is ignored): tests put a fault-injecting catalog
// (internal/fault) in front of a real one this way. Close does not close
// cat unless it is a catalog.Closer.
func Wrap(cfg Config, cat catalog.Catalog) *Catalog {
	if cfg.Name == "" {
		cfg.Name = "tributary"
	}
	return &Catalog{cfg: cfg, cat: cat, tables: map[string]*table.Table{}}
}

// openREST connects to an Iceberg REST catalog. Commits through it keep
// their exactly-once guarantee: a stale commit comes back as HTTP 409,
// which iceberg-go reports as table.ErrCommitFailed without replaying it
// (our tables set commit.retry.num-retries=0), so CommitAppend and
// AllocatePartition reload and decide again exactly as with SQLite.
func openREST(ctx context.Context, cfg Config) (catalog.Catalog, error) {
	var opts []restcat.Option
	if cfg.Warehouse != "" {
		opts = append(opts, restcat.WithWarehouseLocation(cfg.Warehouse))
	}
	if cfg.TLS != nil {
		opts = append(opts, restcat.WithTLSConfig(cfg.TLS))
	}
	extra := iceberg.Properties{}
	for k, v := range cfg.Properties {
		switch k {
		case "token":
			opts = append(opts, restcat.WithOAuthToken(v))
		case "credential":
			opts = append(opts, restcat.WithCredential(v))
		default:
			extra[k] = v
		}
	}
	if len(extra) > 0 {
		opts = append(opts, restcat.WithAdditionalProps(extra))
	}
	if sv := cfg.SigV4; sv != nil {
		opts = append(opts, restcat.WithSigV4RegionSvc(sv.Region, sv.Service))
		if sv.AccessKeyID != "" {
			opts = append(opts, restcat.WithAwsConfig(aws.Config{Region: sv.Region,
				Credentials: credentials.NewStaticCredentialsProvider(sv.AccessKeyID, sv.SecretAccessKey, "")}))
		}
	}
	return restcat.NewCatalog(ctx, cfg.Name, cfg.URI, opts...)
}

// Close releases the catalog connection.
func (c *Catalog) Close() error {
	if c.db != nil {
		return c.db.Close()
	}
	if cl, ok := c.cat.(catalog.Closer); ok {
		return cl.Close()
	}
	return nil
}

// Name is the catalog name.
func (c *Catalog) Name() string { return c.cfg.Name }

// Iceberg returns the underlying iceberg-go catalog.
func (c *Catalog) Iceberg() catalog.Catalog { return c.cat }

// Warehouse is the warehouse blob URL.
func (c *Catalog) Warehouse() string { return c.cfg.Warehouse }

func ident(stream string) (table.Identifier, error) {
	ns, n, err := tributary.ParseStream(stream)
	if err != nil {
		return nil, err
	}
	return table.Identifier{ns, n}, nil
}

// TableLocation is where a stream's table lives below the warehouse.
func (c *Catalog) TableLocation(stream string) string {
	ns, n, _ := tributary.ParseStream(stream)
	return strings.TrimRight(c.cfg.Warehouse, "/") + "/" + ns + "/" + n
}

// LoadTable loads the current metadata of a stream's table.
func (c *Catalog) LoadTable(ctx context.Context, stream string) (*table.Table, error) {
	id, err := ident(stream)
	if err != nil {
		return nil, err
	}
	t, err := c.cat.LoadTable(ctx, id)
	if errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) {
		return nil, fmt.Errorf("%w: %s", ErrNoSuchStream, stream)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", stream, err)
	}
	c.remember(stream, t)
	return t, nil
}

// remember keeps t as the last loaded (or committed) table of stream.
func (c *Catalog) remember(stream string, t *table.Table) {
	c.mu.Lock()
	c.tables[stream] = t
	c.mu.Unlock()
}

// lastLoaded returns a stream's table as last loaded or committed (by
// Marks, HighWaters, LoadTable, …), loading or creating it if it was not
// loaded yet.
func (c *Catalog) lastLoaded(ctx context.Context, stream string) (*table.Table, error) {
	c.mu.Lock()
	t := c.tables[stream]
	c.mu.Unlock()
	if t != nil {
		return t, nil
	}
	return c.EnsureTable(ctx, stream)
}

// retryPause waits before attempt+1 of a reload-decide-commit loop: a
// short pause, longer with each attempt, lets a concurrent committer
// finish. It fails only when ctx ends.
func retryPause(ctx context.Context, attempt int) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(attempt) * 5 * time.Millisecond):
		return nil
	}
}

// EnsureTable loads a stream's table, creating it (and its namespace) with
// the envelope schema on first use, and adds the envelope columns it lacks
// (evolve.go). Concurrent creators converge on one table.
func (c *Catalog) EnsureTable(ctx context.Context, stream string) (*table.Table, error) {
	t, err := c.LoadTable(ctx, stream)
	if errors.Is(err, ErrNoSuchStream) {
		t, err = c.createTable(ctx, stream)
	}
	if err != nil {
		return nil, err
	}
	if loc, want := strings.TrimRight(t.Location(), "/"), c.TableLocation(stream); c.rest && loc != want {
		// The uplink names files below the warehouse (KeyOf) and the
		// maintainer confines itself to TableLocation: a table elsewhere
		// would take files it can neither name nor clean.
		return nil, fmt.Errorf("catalog.warehouse: the catalog placed table %s at %s, not at %s where Tributary writes its files: set catalog.warehouse to the location the catalog uses for this warehouse (its tables must be at WAREHOUSE/NAMESPACE/NAME)", stream, loc, want)
	}
	return c.evolveTable(ctx, stream, t)
}

// createTable creates a stream's table with InitialSchema (see
// EnvelopeSchema for why not the full envelope) and loads it.
func (c *Catalog) createTable(ctx context.Context, stream string) (*table.Table, error) {
	id, _ := ident(stream)
	if err := c.cat.CreateNamespace(ctx, id[:1], nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return nil, fmt.Errorf("create namespace %s: %w", id[0], err)
	}
	spec, err := PartitionSpec(c.cfg.Granularity)
	if err != nil {
		return nil, err
	}
	gran := c.cfg.Granularity
	if gran == "" {
		gran = "day"
	}
	_, err = c.cat.CreateTable(ctx, id, InitialSchema(),
		catalog.WithPartitionSpec(&spec),
		catalog.WithLocation(c.TableLocation(stream)),
		catalog.WithProperties(iceberg.Properties{
			PropNextPartition:                            "0",
			PropGranularity:                              gran,
			table.CommitNumRetriesKey:                    "0", // conflicts are decided by us, with the high-water marks
			"write.parquet.compression-codec":            "zstd",
			"write.metadata.delete-after-commit.enabled": "true",
			"write.metadata.previous-versions-max":       "20",
			"comment":                                    "Tributary stream " + stream,
		}))
	if err != nil && !errors.Is(err, catalog.ErrTableAlreadyExists) {
		return nil, fmt.Errorf("create table %s: %w", stream, err)
	}
	return c.LoadTable(ctx, stream)
}

// ListStreams lists every stream table of the catalog.
func (c *Catalog) ListStreams(ctx context.Context) ([]string, error) {
	nss, err := c.cat.ListNamespaces(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var out []string
	for _, ns := range nss {
		for id, err := range c.cat.ListTables(ctx, ns) {
			if err != nil {
				return nil, fmt.Errorf("list tables of %s: %w", strings.Join(ns, "."), err)
			}
			out = append(out, strings.Join(id, "."))
		}
	}
	return out, nil
}

// HighWater is the committed high-water mark of a partition: every offset
// below it is in the table exactly once, none at or above it is.
func HighWater(t *table.Table, partition int32) int64 {
	v, err := strconv.ParseInt(t.Properties()[PropHighWater+strconv.Itoa(int(partition))], 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// HighWaters returns every partition's committed high-water mark.
func HighWaters(t *table.Table) map[int32]int64 {
	out := map[int32]int64{}
	for k, v := range t.Properties() {
		if p, ok := strings.CutPrefix(k, PropHighWater); ok {
			pn, err1 := strconv.ParseInt(p, 10, 32)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if err1 == nil && err2 == nil {
				out[int32(pn)] = n
			}
		}
	}
	return out
}

// AllocatePartition returns the partition of stream that node writes,
// allocating the next free number through the catalog on first use, with
// node as its owner at epoch 0. The allocation is a compare-and-swap commit
// of table properties, so two nodes never get the same partition.
//
// If the partition node writes has been taken over by another node
// (TakeOver), node gets a new partition and its mapping is moved to it: a
// node fenced out of its partition never writes it again.
func (c *Catalog) AllocatePartition(ctx context.Context, stream, node string) (int32, error) {
	for attempt := 0; ; attempt++ {
		t, err := c.EnsureTable(ctx, stream)
		if err != nil {
			return 0, err
		}
		props := t.Properties()
		var old int64 = -1
		if v, ok := props[PropNodePartition+node]; ok {
			p, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return 0, fmt.Errorf("allocate partition of %s: bad property %s=%q", stream, PropNodePartition+node, v)
			}
			if o, ok := Owner(t, int32(p)); !ok || o.Node == node {
				return int32(p), nil
			}
			old = p
		}
		next, _ := strconv.ParseInt(props[PropNextPartition], 10, 32)
		set := ownerProps(int32(next), node, 0)
		set[PropNodePartition+node] = strconv.FormatInt(next, 10)
		set[PropNextPartition] = strconv.FormatInt(next+1, 10)
		summary := iceberg.Properties{"tributary.operation": "allocate-partition", "tributary.node": node}
		if old >= 0 {
			summary["tributary.replaces"] = strconv.FormatInt(old, 10)
		}
		err = c.commitProps(ctx, t, set, summary)
		if err == nil {
			continue // reload: the next round returns the partition (or the winner's)
		}
		if attempt < 20 && isConflict(err) {
			continue
		}
		return 0, fmt.Errorf("allocate partition of %s: %w", stream, err)
	}
}

func isConflict(err error) bool {
	if errors.Is(err, table.ErrCommitFailed) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "has changed") || strings.Contains(s, "requirement failed") ||
		strings.Contains(s, "moved underneath") || strings.Contains(s, "database is locked")
}

// FileURL joins a warehouse-relative key into a full URL.
func (c *Catalog) FileURL(key string) string {
	return strings.TrimRight(c.cfg.Warehouse, "/") + "/" + key
}

// KeyOf turns a full URL below the warehouse into a bucket key.
func (c *Catalog) KeyOf(fileURL string) (string, error) {
	base := strings.TrimRight(c.cfg.Warehouse, "/") + "/"
	k, ok := strings.CutPrefix(fileURL, base)
	if !ok {
		return "", fmt.Errorf("%s is not below warehouse %s", fileURL, c.cfg.Warehouse)
	}
	return url.PathUnescape(k)
}

// HighWaters reloads a stream's table, creating it on first use, and
// returns its partitions' marks.
func (c *Catalog) HighWaters(ctx context.Context, stream string) (map[int32]int64, error) {
	t, err := c.EnsureTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	return HighWaters(t), nil
}
