package config

import (
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tributary-io/tributary/tables"
)

// Storage configures the warehouse's object store (edge and cloud).
type Storage struct {
	// S3 configures an s3:// warehouse (AWS or S3-compatible). Empty
	// fields use the AWS SDK defaults (environment, shared config,
	// instance role).
	S3 struct {
		// Endpoint of an S3-compatible store, e.g. http://minio:9000.
		Endpoint string `yaml:"endpoint"`
		// Region. Default "", which means us-east-1.
		Region string `yaml:"region"`
		// PathStyle puts the bucket in the path (most S3-compatible
		// stores want this). Default false.
		PathStyle bool `yaml:"path_style"`
		// AccessKeyID and SecretAccessKey; default from the environment.
		AccessKeyID     string `yaml:"access_key_id"`
		SecretAccessKey string `yaml:"secret_access_key"`
	} `yaml:"s3"`
	// GCS configures a gs:// warehouse (Google Cloud Storage or an
	// emulator). Empty fields use application-default credentials
	// (GOOGLE_APPLICATION_CREDENTIALS, the metadata server);
	// STORAGE_EMULATOR_HOST is honoured when endpoint is empty.
	GCS struct {
		// Endpoint of the JSON API, e.g.
		// http://127.0.0.1:4443/storage/v1/ for fake-gcs-server.
		Endpoint string `yaml:"endpoint"`
		// CredentialsFile is a service-account JSON key file.
		CredentialsFile string `yaml:"credentials_file"`
		// Anonymous sends no credentials (public buckets, emulators).
		// Default false.
		Anonymous bool `yaml:"anonymous"`
	} `yaml:"gcs"`
	// Azure configures an Azure warehouse:
	// abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix (or wasbs://
	// CONTAINER@ACCOUNT.blob.core.windows.net/prefix; azblob://CONTAINER/prefix
	// with account set is recorded as the abfss:// form). Set one of key,
	// sas_token or connection_string, or none for Azure's default
	// credential chain; empty ones are taken from AZURE_STORAGE_KEY,
	// AZURE_STORAGE_SAS_TOKEN and AZURE_STORAGE_CONNECTION_STRING.
	Azure struct {
		// Account is the storage account; default the warehouse's. When
		// set, it must match it; an azblob:// warehouse needs it.
		Account string `yaml:"account"`
		// Key is the account's shared key.
		Key string `yaml:"key"`
		// SASToken is a shared access signature (without the leading ?).
		SASToken string `yaml:"sas_token"`
		// ConnectionString is an Azure Storage connection string.
		ConnectionString string `yaml:"connection_string"`
		// Endpoint of the blob service, e.g.
		// http://127.0.0.1:10000/devstoreaccount1 for Azurite; default
		// https://ACCOUNT.blob.core.windows.net.
		Endpoint string `yaml:"endpoint"`
	} `yaml:"azure"`
}

// S3Options are the storage.s3 settings for the uplink and iceberg-go.
func (s Storage) S3Options() tables.S3Options {
	o := s.S3
	return tables.S3Options{Endpoint: o.Endpoint, Region: o.Region, PathStyle: o.PathStyle,
		AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey}
}

// Warehouse is catalog.warehouse as tables record it: an
// azblob://CONTAINER/prefix alias becomes
// abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix (storage.azure.account),
// the form Spark, Trino and iceberg-go read. Others are unchanged.
func (s Storage) Warehouse(warehouse string) string {
	u, err := url.Parse(warehouse)
	if err != nil || u.Scheme != "azblob" || s.Azure.Account == "" || u.Host == "" {
		return warehouse
	}
	return "abfss://" + u.Host + "@" + s.Azure.Account + ".dfs.core.windows.net" + strings.TrimRight(u.Path, "/")
}

// GCSOptions are the storage.gcs settings for the uplink and iceberg-go.
func (s Storage) GCSOptions() tables.GCSOptions {
	o := s.GCS
	return tables.GCSOptions{Endpoint: o.Endpoint, CredentialsFile: o.CredentialsFile, Anonymous: o.Anonymous}
}

// AzureOptions are the storage.azure settings for the uplink and iceberg-go.
func (s Storage) AzureOptions() tables.AzureOptions {
	o := s.Azure
	return tables.AzureOptions{Account: o.Account, Key: o.Key, SASToken: o.SASToken,
		ConnectionString: o.ConnectionString, Endpoint: o.Endpoint}
}

// Stores are the settings of every store, for uplink.OpenBucket.
func (s Storage) Stores() tables.StoreOptions {
	return tables.StoreOptions{S3: s.S3Options(), GCS: s.GCSOptions(), Azure: s.AzureOptions()}
}

// CatalogProperties are the catalog properties the storage settings imply
// for a warehouse (iceberg-go FileIO settings of its scheme).
func (s Storage) CatalogProperties(warehouse string) map[string]string {
	return s.Stores().IcebergProperties(warehouse)
}

// EngineProperties are the FileIO properties the REST catalog hands to
// engines in GET /v1/config (endpoint, region, addressing, anonymous
// access): CatalogProperties without secrets or server-side paths, which
// engines bring themselves.
func (s Storage) EngineProperties(warehouse string) map[string]string {
	p := s.CatalogProperties(warehouse)
	for k := range p {
		switch {
		case k == "s3.access-key-id", k == "s3.secret-access-key", k == "gcs.keypath", k == "gcs.jsonkey",
			k == "adls.auth.shared-key.account.name", k == "adls.auth.shared-key.account.key",
			strings.HasPrefix(k, "adls.sas-token."), strings.HasPrefix(k, "adls.connection-string."):
			delete(p, k)
		}
	}
	return p
}

// Validate reports each bad field through bad (the warehouse decides
// which settings apply).
func (s Storage) Validate(warehouse string, bad func(field, format string, args ...any)) {
	if err := tables.StoreLinked(warehouse); err != nil {
		bad("catalog.warehouse", "%v", err)
		return
	}
	if strings.HasPrefix(warehouse, "s3://") && (s.S3.AccessKeyID == "") != (s.S3.SecretAccessKey == "") {
		bad("storage.s3", "set both access_key_id and secret_access_key, or neither (to use the AWS SDK's defaults)")
	}
	if strings.HasPrefix(warehouse, "gs://") {
		if u, err := url.Parse(warehouse); err != nil || u.Host == "" {
			bad("catalog.warehouse", "%q: want gs://BUCKET/prefix", warehouse)
		}
		if s.GCS.Anonymous && s.GCS.CredentialsFile != "" {
			bad("storage.gcs", "set credentials_file or anonymous, not both")
		}
		if f := s.GCS.CredentialsFile; f != "" {
			if _, err := os.ReadFile(f); err != nil {
				bad("storage.gcs.credentials_file", "%v", err)
			}
		}
		if e := s.GCS.Endpoint; e != "" && !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			bad("storage.gcs.endpoint", "%q: want an http(s):// URL", e)
		}
	}
	if strings.HasPrefix(warehouse, "azblob://") {
		bad("storage.azure.account", "required with an azblob://CONTAINER/prefix catalog.warehouse (or write abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix)")
	}
	if loc, ok, err := tables.ParseAzureWarehouse(warehouse); ok {
		if err != nil {
			bad("catalog.warehouse", "%v", err)
			return
		}
		a := s.Azure
		if a.Account != "" && a.Account != loc.Account {
			bad("storage.azure.account", "%q, but catalog.warehouse is in account %q", a.Account, loc.Account)
		}
		n := 0
		for _, v := range []string{a.Key, a.SASToken, a.ConnectionString} {
			if v != "" {
				n++
			}
		}
		if n > 1 {
			bad("storage.azure", "set one of key, sas_token and connection_string")
		}
		if _, _, err := s.AzureOptions().EndpointParts(loc.Account); err != nil {
			bad("storage.azure.endpoint", "%v", err)
		}
	}
}

// Maintenance configures table maintenance (edge and cloud).
type Maintenance struct {
	// Enabled runs table maintenance (compaction, manifest merging,
	// snapshot expiry, orphan cleanup) in this process. Default true;
	// a lease in the catalog lets one process at a time maintain a table.
	Enabled *bool `yaml:"enabled"`
	// Interval between passes over every stream. Default 1m.
	Interval time.Duration `yaml:"interval"`
	// SnapshotMaxAge: younger snapshots are kept. Default 1h.
	SnapshotMaxAge time.Duration `yaml:"snapshot_max_age"`
	// RetainSnapshots: at least this many newest snapshots are kept.
	// Default 100.
	RetainSnapshots int `yaml:"retain_snapshots"`
	// TargetFileSize of compacted data files. Default 128MiB.
	TargetFileSize ByteSize `yaml:"target_file_size"`
	// MaxManifests in the current snapshot before they are merged.
	// Default 10.
	MaxManifests int `yaml:"max_manifests"`
	// OrphanGrace: unreferenced files younger than this are kept (an
	// upload in progress). Default 24h.
	OrphanGrace time.Duration `yaml:"orphan_grace"`
	// DeltaDeletedFileRetention: of a stream with a Delta log, a data file
	// the log removed (a compaction's input) is kept this long after the
	// remove, for Delta readers' time travel, before expiry or orphan
	// cleanup may delete it. A table's own
	// delta.deletedFileRetentionDuration may be longer; a shorter one is
	// raised to this. Default 168h (7 days, Delta's default).
	DeltaDeletedFileRetention time.Duration `yaml:"delta_deleted_file_retention"`
	// DeltaLogRetention: a Delta log's JSON commits and checkpoints older
	// than this and older than its latest checkpoint are deleted. A
	// table's own delta.logRetentionDuration may be longer; a shorter one
	// is raised to this. Default 720h (30 days, Delta's default).
	DeltaLogRetention time.Duration `yaml:"delta_log_retention"`
}

// Defaults fills every unset field with its default.
func (m *Maintenance) Defaults() {
	if m.Enabled == nil {
		on := true
		m.Enabled = &on
	}
	if m.Interval == 0 {
		m.Interval = tables.DefaultMaintainInterval
	}
	if m.SnapshotMaxAge == 0 {
		m.SnapshotMaxAge = tables.DefaultSnapshotMaxAge
	}
	if m.RetainSnapshots == 0 {
		m.RetainSnapshots = tables.DefaultRetainSnapshots
	}
	if m.TargetFileSize == 0 {
		m.TargetFileSize = tables.DefaultTargetFileSize
	}
	if m.MaxManifests == 0 {
		m.MaxManifests = tables.DefaultMaxManifests
	}
	if m.OrphanGrace == 0 {
		m.OrphanGrace = tables.DefaultOrphanGrace
	}
	if m.DeltaDeletedFileRetention == 0 {
		m.DeltaDeletedFileRetention = tables.DefaultDeltaFileRetention
	}
	if m.DeltaLogRetention == 0 {
		m.DeltaLogRetention = tables.DefaultDeltaLogRetention
	}
}

// Validate reports each bad field through bad.
func (m Maintenance) Validate(bad func(field, format string, args ...any)) {
	if m.Enabled == nil || !*m.Enabled {
		return
	}
	if m.Interval < time.Second {
		bad("maintenance.interval", "%s is below the minimum of 1s", m.Interval)
	}
	if m.SnapshotMaxAge < time.Minute {
		bad("maintenance.snapshot_max_age", "%s is below the minimum of 1m (readers plan on recent snapshots)", m.SnapshotMaxAge)
	}
	if m.RetainSnapshots < 1 {
		bad("maintenance.retain_snapshots", "%d: want at least 1", m.RetainSnapshots)
	}
	if m.TargetFileSize < 1<<20 {
		bad("maintenance.target_file_size", "%d is below the minimum of 1MiB", m.TargetFileSize)
	}
	if m.MaxManifests < 1 {
		bad("maintenance.max_manifests", "%d: want at least 1", m.MaxManifests)
	}
	if m.OrphanGrace < time.Hour {
		bad("maintenance.orphan_grace", "%s is below the minimum of 1h (uploads in progress must never be deleted)", m.OrphanGrace)
	}
	if m.DeltaDeletedFileRetention < time.Hour {
		bad("maintenance.delta_deleted_file_retention", "%s is below the minimum of 1h (Delta readers plan on recent versions)", m.DeltaDeletedFileRetention)
	}
	if m.DeltaLogRetention < time.Hour {
		bad("maintenance.delta_log_retention", "%s is below the minimum of 1h", m.DeltaLogRetention)
	}
}

// Policy is the tables.Policy of the maintenance settings.
func (m Maintenance) Policy() tables.Policy {
	return tables.Policy{SnapshotMaxAge: m.SnapshotMaxAge, RetainSnapshots: m.RetainSnapshots,
		TargetFileSize: int64(m.TargetFileSize), MaxManifests: m.MaxManifests, OrphanGrace: m.OrphanGrace,
		DeltaFileRetention: m.DeltaDeletedFileRetention, DeltaLogRetention: m.DeltaLogRetention}
}

// SigV4 signs the requests to an Iceberg REST catalog with AWS Signature
// V4 (AWS Glue's and S3 Tables' REST endpoints, SeaweedFS), with the
// storage.s3 keys when they are set, else the AWS SDK's default chain.
type SigV4 struct {
	// Region of the signature; setting it turns signing on. Default ""
	// (off: the catalog gets catalog.token or catalog.credential).
	Region string `yaml:"region"`
	// Service of the signature: glue for AWS Glue, s3tables for S3
	// Tables, s3 for SeaweedFS. Default execute-api.
	Service string `yaml:"service"`
}

// Defaults fills the service.
func (s *SigV4) Defaults() {
	if s.Service == "" {
		s.Service = "execute-api"
	}
}

// Validate reports a signature set on a catalog that is not a REST one,
// or beside a token or credential.
func (s SigV4) Validate(uri, token, credential string, bad func(field, format string, args ...any)) {
	if s.Region == "" {
		return
	}
	if !tables.External(uri) {
		bad("catalog.sigv4", "signs requests to a REST catalog: catalog.uri %q is not http(s)://", tables.Redact(uri))
	}
	if token != "" || credential != "" {
		bad("catalog.sigv4", "set sigv4, token or credential, not more than one")
	}
}

// Signer is the tables.SigV4 of these settings (nil when off), signing
// with storage.s3's keys when set.
func (s SigV4) Signer(st Storage) *tables.SigV4 {
	if s.Region == "" {
		return nil
	}
	return &tables.SigV4{Region: s.Region, Service: s.Service, AccessKeyID: st.S3.AccessKeyID, SecretAccessKey: st.S3.SecretAccessKey}
}
