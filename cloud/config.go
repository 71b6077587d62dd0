package cloud

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/httpapi"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/consume"
	"github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
)

// Config configures a cloud server (`tributary cloud`): the Iceberg REST
// catalog, the Kafka and Pulsar consume servers reading the tables, and
// table maintenance. Every field has a default (see the comments); a YAML
// file may set any of them, with ${ENV} expansion. Command-line flags
// override the file.
type Config struct {
	// Role must be "cloud" in a cloud config file (it tells `tributary
	// config check` which kind of file it reads).
	Role string `yaml:"role"`
	// DataDir holds the embedded catalog and warehouse. Default ./data.
	DataDir string `yaml:"data_dir"`

	Catalog struct {
		// Name of the catalog. Default tributary.
		Name string `yaml:"name"`
		// URI of the backing catalog: sqlite:///path/catalog.db or
		// postgres://user:pw@host:5432/db (the server's own), or
		// http(s)://host:port[/path] for an Iceberg REST catalog that is
		// not ours (Polaris, Unity, Glue, S3 Tables, Nessie, Lakekeeper,
		// SeaweedFS): the server then serves every protocol from that
		// catalog's tables and keeps its own state in state.uri. Default
		// sqlite://DATA_DIR/catalog.db.
		URI string `yaml:"uri"`
		// Warehouse blob URL; with a REST catalog that is not ours, the
		// location of the catalog's warehouse as it names it (e.g.
		// s3://table-bucket), sent to its /v1/config, which answers the
		// prefix and overrides. Default file://DATA_DIR/warehouse.
		Warehouse string `yaml:"warehouse"`
		// Token, when set, is required as a bearer token by the REST
		// catalog this server serves. With a catalog.uri of http(s)://
		// it is instead the bearer token this server sends to that
		// catalog. Default "" (no auth).
		Token string `yaml:"token"`
		// Credential is "client_id:client_secret" of a REST catalog that
		// is not ours (catalog.uri http(s)://): exchanged at its OAuth2
		// token endpoint for a bearer token, refreshed before it expires.
		// Default "".
		Credential string `yaml:"credential"`
		// SigV4 signs every request to a REST catalog that is not ours
		// with AWS Signature V4 (storage.s3's keys when set). Default off.
		SigV4 config.SigV4 `yaml:"sigv4"`
		// NodeToken is the bearer token edge nodes commit with (their
		// catalog.token) when they commit through this REST catalog: only
		// it may write the tables' tributary.* properties (marks, owners,
		// epochs). Default "" (then no REST request may: edge nodes must
		// commit to the backing database directly).
		NodeToken string `yaml:"node_token"`
		// Addr of the Iceberg REST catalog listener, which also serves
		// /healthz, /readyz and /metrics. Default 127.0.0.1:8181. (A
		// program may set it to "" after ApplyDefaults to run without
		// the catalog listener, as `tributary dev --catalog-addr ""`
		// does; in a file "" means the default.)
		Addr string `yaml:"addr"`
	} `yaml:"catalog"`

	// Storage configures the warehouse's object store.
	Storage config.Storage `yaml:"storage"`

	// State is where the server keeps what is its own rather than the
	// tables': committed consumer-group offsets, durable Pulsar and gRPC
	// cursors, persistent MQTT sessions, and the cloud write path's
	// sequencing (cloud_produce: every cloud server producing to one
	// warehouse must share it).
	State struct {
		// URI of the state database: sqlite:///path/state.db or
		// postgres://user:pw@host:5432/db (cloud servers sharing a site
		// share one Postgres). Default the catalog's own database when
		// catalog.uri is SQLite or Postgres (as before state.uri
		// existed), else sqlite://DATA_DIR/state.db.
		URI string `yaml:"uri"`
	} `yaml:"state"`

	Kafka struct {
		// Addr of the Kafka consume listener. Default 127.0.0.1:19092;
		// "" turns it off.
		Addr *string `yaml:"addr"`
		// Listener is advertised_addr, max_inflight_bytes and
		// body_timeout (package kafka's section, shared with the edge).
		kafka.Listener `yaml:",inline"`
		// Peers are the advertised host:port of every cloud server (this
		// one included), for group coordinator placement. Default: alone.
		Peers []string `yaml:"peers"`
		// MaxGroups caps the consumer groups this server coordinates
		// (with members, or with committed offsets — which a restart
		// reloads); a JoinGroup or OffsetCommit creating one more gets
		// POLICY_VIOLATION. Default 10000; -1 = no cap.
		MaxGroups int `yaml:"max_groups"`
		// MaxGroupMembers caps a group's members (and member ids handed
		// out but not yet used); beyond, GROUP_MAX_SIZE_REACHED (Kafka's
		// group.max.size). Default 1000; -1 = no cap.
		MaxGroupMembers int `yaml:"max_group_members"`
		// MaxGroupOffsets caps the committed (topic, partition) offsets a
		// group holds; a commit beyond it is refused whole with
		// POLICY_VIOLATION. Default 100000; -1 = no cap.
		MaxGroupOffsets int `yaml:"max_group_offsets"`
		// OffsetsRetention: a group without members whose last commit is
		// older loses its offsets and stops counting toward max_groups
		// (Kafka's offsets.retention.minutes). Default 168h; -1s = never.
		OffsetsRetention time.Duration `yaml:"offsets_retention"`
		// BatchCacheBytes bounds the cache of record batches encoded from
		// the tables' row groups, which fetches serve whole. Default
		// 256MiB, at least 1MiB.
		BatchCacheBytes config.ByteSize `yaml:"batch_cache_bytes"`
	} `yaml:"kafka"`

	Pulsar struct {
		// Addr of the Pulsar consume listener. Default 127.0.0.1:6650;
		// "" turns it off.
		Addr *string `yaml:"addr"`
		// AdvertisedAddr is the host:port LOOKUP answers with. Default:
		// the bound address.
		AdvertisedAddr string `yaml:"advertised_addr"`
		// Peers are the advertised Pulsar host:port of every cloud server
		// (this one included): LOOKUP sends each topic partition to one of
		// them, which dispatches its subscriptions. Default: alone.
		Peers []string `yaml:"peers"`
		// MaxConsumersPerConnection caps the consumers of one connection.
		// Default 1000.
		MaxConsumersPerConnection int `yaml:"max_consumers_per_connection"`
		// MaxSubscriptions caps the subscriptions this server holds at
		// once. Default 10000.
		MaxSubscriptions int `yaml:"max_subscriptions"`
		// MaxUnackedPerConsumer: a consumer with this many messages
		// delivered and unacknowledged gets nothing more until it
		// acknowledges (the broker's maxUnackedMessagesPerConsumer).
		// Default 50000.
		MaxUnackedPerConsumer int `yaml:"max_unacked_per_consumer"`
		// MaxAckedRanges bounds a subscription's individually
		// acknowledged ranges (out-of-order acks); an ack that would open
		// one more is refused. Default 10000.
		MaxAckedRanges int `yaml:"max_acked_ranges"`
		// MaxConnectionBacklog: a connection with more bytes than this
		// queued for the client gets nothing more until the client reads.
		// Default 4MiB.
		MaxConnectionBacklog config.ByteSize `yaml:"max_connection_backlog"`
		// MessageCacheBytes bounds the cache of encoded messages
		// (metadata and payload), which serves a message dispatched
		// again without encoding it again. Default 64MiB.
		MessageCacheBytes config.ByteSize `yaml:"message_cache_bytes"`
	} `yaml:"pulsar"`

	// MQTT is the cloud MQTT listener (subscribers served from the tables).
	MQTT MQTTConfig `yaml:"mqtt"`
	// HTTP is the HTTP read API (package httpapi: long poll, Server-Sent
	// Events, partitions, offsets by time, group offsets, /openapi.yaml).
	HTTP struct {
		// Addr of its listener (HTTP/1.1 and HTTP/2, h2c without TLS).
		// Default "" (off); tributary dev serves 127.0.0.1:18080
		// (DefaultHTTPAddr).
		Addr           *string `yaml:"addr"`
		httpapi.Config `yaml:",inline"`
	} `yaml:"http"`

	// Produce is the cloud write path (package cloudwrite): producers on
	// the Kafka listener and the HTTP port (Confluent REST v3, gRPC
	// ProduceService) write into the same tables, through WAL objects in
	// the warehouse sequenced in the state database (state.uri).
	Produce ProduceConfig `yaml:"cloud_produce"`

	// Maintenance of the tables; the cloud server is where it belongs.
	Maintenance config.Maintenance `yaml:"maintenance"`

	// Security: TLS on every listener (names rest — the catalog port with
	// /metrics and the console —, kafka, pulsar, mqtt, mqtt_ws), authentication and the
	// ACL (the same keys as the edge config's section). Default: no TLS,
	// anonymous clients with every right, on loopback addresses only.
	Security config.Security `yaml:"security"`

	// Federation lists the organisation's Iceberg REST catalogs each
	// committed stream is registered in as a read-only mirror, kept
	// current after commits (docs/tables.md "Federation"). Default none.
	Federation []FederationConfig `yaml:"federation"`

	// ShutdownTimeout bounds a graceful stop. Default 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// ApplyDefaults fills every unset field with its default.
func (c *Config) ApplyDefaults() {
	if c.Role == "" {
		c.Role = "cloud"
	}
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	config.DefaultCatalog(c.DataDir, &c.Catalog.Name, &c.Catalog.URI, &c.Catalog.Warehouse)
	c.Catalog.Warehouse = c.Storage.Warehouse(c.Catalog.Warehouse)
	c.Catalog.SigV4.Defaults()
	if c.State.URI == "" {
		c.State.URI = defaultStateURI(c.DataDir, c.Catalog.URI)
	}
	if c.Catalog.Addr == "" {
		c.Catalog.Addr = "127.0.0.1:8181"
	}
	if c.Kafka.Addr == nil {
		a := "127.0.0.1:19092"
		c.Kafka.Addr = &a
	}
	k := &c.Kafka
	k.MaxGroups = defaultCount(k.MaxGroups, consume.DefaultMaxGroups)
	k.MaxGroupMembers = defaultCount(k.MaxGroupMembers, consume.DefaultMaxGroupMembers)
	k.MaxGroupOffsets = defaultCount(k.MaxGroupOffsets, consume.DefaultMaxGroupOffsets)
	if k.OffsetsRetention == 0 {
		k.OffsetsRetention = consume.DefaultOffsetsRetention
	}
	k.Listener.Defaults()
	if k.BatchCacheBytes == 0 {
		k.BatchCacheBytes = consume.DefaultBatchCacheBytes
	}
	if c.Pulsar.Addr == nil {
		a := "127.0.0.1:6650"
		c.Pulsar.Addr = &a
	}
	ps := &c.Pulsar
	ps.MaxConsumersPerConnection = defaultCount(ps.MaxConsumersPerConnection, pulsar.DefaultMaxConsumersPerConn)
	ps.MaxSubscriptions = defaultCount(ps.MaxSubscriptions, pulsar.DefaultMaxSubscriptions)
	ps.MaxUnackedPerConsumer = defaultCount(ps.MaxUnackedPerConsumer, pulsar.DefaultMaxUnackedPerConsumer)
	ps.MaxAckedRanges = defaultCount(ps.MaxAckedRanges, pulsar.DefaultMaxAckedRanges)
	if ps.MessageCacheBytes == 0 {
		ps.MessageCacheBytes = pulsar.DefaultMessageCacheBytes
	}
	if ps.MaxConnectionBacklog == 0 {
		ps.MaxConnectionBacklog = pulsar.DefaultMaxConnectionBacklog
	}
	c.MQTT.defaults()
	if c.HTTP.Addr == nil {
		a := ""
		c.HTTP.Addr = &a
	}
	c.HTTP.Defaults()
	c.Produce.defaults()
	c.Maintenance.Defaults()
	c.federationDefaults()
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
}

// Validate checks the configuration; each error names the field and the fix.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.Role != "cloud" {
		bad("role", "%q: a cloud config says role: cloud", c.Role)
	}
	if u := c.Catalog.URI; !sqlURI(u) && !tables.External(u) {
		bad("catalog.uri", "%q: want sqlite:///path/to/catalog.db, postgres://user:password@host:5432/db or http(s)://host:port (an Iceberg REST catalog)", tables.Redact(u))
	}
	if u := c.State.URI; !sqlURI(u) {
		bad("state.uri", "%q: want sqlite:///path/to/state.db or postgres://user:password@host:5432/db", tables.Redact(u))
	}
	if tables.External(c.Catalog.URI) {
		if c.Catalog.NodeToken != "" {
			bad("catalog.node_token", "set, but catalog.uri is another REST catalog: edge nodes commit there with their own catalog.credential or catalog.token")
		}
		if c.Catalog.Token != "" && c.Catalog.Credential != "" {
			bad("catalog.credential", "set token or credential, not both")
		}
	} else if c.Catalog.Credential != "" {
		bad("catalog.credential", "only a REST catalog (catalog.uri http(s)://) takes a credential")
	}
	if cr := c.Catalog.Credential; cr != "" {
		if id, secret, ok := strings.Cut(cr, ":"); !ok || id == "" || secret == "" {
			bad("catalog.credential", "want client_id:client_secret")
		}
	}
	tok := c.Catalog.Token
	if !tables.External(c.Catalog.URI) {
		tok = "" // the token of our own listener
	}
	c.Catalog.SigV4.Validate(c.Catalog.URI, tok, c.Catalog.Credential, bad)
	if !strings.Contains(c.Catalog.Warehouse, "://") {
		bad("catalog.warehouse", "%q: want a blob URL such as file:///var/lib/tributary/warehouse or s3://bucket/prefix", c.Catalog.Warehouse)
	}
	if a := c.Catalog.Addr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("catalog.addr", "%q: want host:port", a)
		}
	}
	c.Security.Validate(bad)
	if c.Kafka.Addr != nil && c.Pulsar.Addr != nil {
		if err := c.Security.Exposed(map[string]config.Listener{"catalog.addr": config.Bind(c.Catalog.Addr, "rest"), "kafka.addr": config.Bind(*c.Kafka.Addr, "kafka"),
			"pulsar.addr": config.Bind(*c.Pulsar.Addr, "pulsar"), "mqtt.addr": config.Bind(c.MQTT.Addr, "mqtt"), "mqtt.ws_addr": config.Bind(c.MQTT.WSAddr, "mqtt_ws")}); err != nil {
			bad("security", "%v", err)
		}
	}
	if c.Kafka.Addr == nil || c.Pulsar.Addr == nil || c.Maintenance.Enabled == nil {
		return errors.New("config: defaults not applied (call ApplyDefaults)")
	}
	if a := *c.Kafka.Addr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("kafka.addr", "%q: want host:port, or \"\" to turn the Kafka listener off", a)
		}
	}
	for i, p := range c.Kafka.Peers {
		if _, _, err := net.SplitHostPort(p); err != nil {
			bad(fmt.Sprintf("kafka.peers[%d]", i), "%q: want host:port", p)
		}
	}
	for name, v := range map[string]int{"kafka.max_groups": c.Kafka.MaxGroups, "kafka.max_group_members": c.Kafka.MaxGroupMembers,
		"kafka.max_group_offsets": c.Kafka.MaxGroupOffsets} {
		if v < -1 || v == 0 {
			bad(name, "%d: want a positive count, or -1 for no cap", v)
		}
	}
	for name, v := range map[string]int{"pulsar.max_consumers_per_connection": c.Pulsar.MaxConsumersPerConnection,
		"pulsar.max_subscriptions": c.Pulsar.MaxSubscriptions, "pulsar.max_unacked_per_consumer": c.Pulsar.MaxUnackedPerConsumer,
		"pulsar.max_acked_ranges": c.Pulsar.MaxAckedRanges} {
		if v <= 0 {
			bad(name, "%d: want a positive count", v)
		}
	}
	if b := c.Pulsar.MessageCacheBytes; b < 0 {
		bad("pulsar.message_cache_bytes", "%d: must not be negative", b)
	}
	if b := c.Pulsar.MaxConnectionBacklog; b < 64<<10 {
		bad("pulsar.max_connection_backlog", "%d: want at least 64KiB", b)
	}
	if r := c.Kafka.OffsetsRetention; r > 0 && r < time.Minute {
		bad("kafka.offsets_retention", "%s: want at least 1m, or a negative duration to keep offsets forever", r)
	}
	if c.Kafka.BatchCacheBytes < 1<<20 {
		bad("kafka.batch_cache_bytes", "%d: want at least 1MiB", c.Kafka.BatchCacheBytes)
	}
	c.Kafka.Listener.Validate("kafka.", bad)
	if a := *c.Pulsar.Addr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("pulsar.addr", "%q: want host:port, or \"\" to turn the Pulsar listener off", a)
		}
	}
	if a := c.Pulsar.AdvertisedAddr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("pulsar.advertised_addr", "%q: want host:port", a)
		}
	}
	for i, p := range c.Pulsar.Peers {
		if _, _, err := net.SplitHostPort(p); err != nil {
			bad(fmt.Sprintf("pulsar.peers[%d]", i), "%q: want host:port", p)
		}
	}
	c.MQTT.validate(bad)
	c.validateHTTP(bad)
	c.Produce.validate(bad)
	c.Storage.Validate(c.Catalog.Warehouse, bad)
	c.Maintenance.Validate(bad)
	c.validateFederation(bad)
	return errors.Join(errs...)
}

// ParseConfig reads a cloud config from YAML bytes, expanding ${ENV}
// references, fills in defaults and validates.
func ParseConfig(raw []byte) (Config, error) {
	var c Config
	if err := config.Decode(raw, &c); err != nil {
		return Config{}, err
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// LoadConfig is ParseConfig on a file.
func LoadConfig(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := ParseConfig(raw)
	return c, config.InFile(path, err)
}

// sqlURI tells whether u names a SQLite or Postgres database.
func sqlURI(u string) bool {
	return strings.HasPrefix(u, "sqlite://") || strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// defaultStateURI is state.uri's default: the catalog's own database,
// else DATA_DIR/state.db.
func defaultStateURI(dataDir, catalogURI string) string {
	if sqlURI(catalogURI) {
		return catalogURI
	}
	abs, err := filepath.Abs(filepath.Join(dataDir, "state.db"))
	if err != nil {
		abs = filepath.Join(dataDir, "state.db")
	}
	return "sqlite://" + abs
}

// CatalogConfig is how the server opens its catalog (also used by
// `tributary config check`).
func (c Config) CatalogConfig() tables.Config {
	props := c.Storage.CatalogProperties(c.Catalog.Warehouse)
	if tables.External(c.Catalog.URI) {
		switch {
		case c.Catalog.Token != "":
			props["token"] = c.Catalog.Token
		case c.Catalog.Credential != "":
			props["credential"] = c.Catalog.Credential
		}
	}
	return tables.Config{Name: c.Catalog.Name, URI: c.Catalog.URI, Warehouse: c.Catalog.Warehouse,
		Properties: props, SigV4: c.Catalog.SigV4.Signer(c.Storage)}
}

// CatalogKeys are the cloud config keys a REST catalog's errors name.
var CatalogKeys = tables.CheckKeys{URI: "catalog.uri", Token: "catalog.token", Credential: "catalog.credential",
	SigV4: "catalog.sigv4", Warehouse: "catalog.warehouse"}

// defaultCount is v, or d when v is unset (0).
func defaultCount(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// RoleOf tells which kind of config file raw is: "cloud" when it says
// role: cloud, else "edge".
func RoleOf(raw []byte) string { return config.RoleOf(raw) }
