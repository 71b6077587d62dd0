package node

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/httpapi"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/mqtt"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/typed"
	"github.com/tributary-io/tributary/uplink"
)

// Route maps an MQTT topic filter to a stream, and says how the stream's
// payloads become columns (the setting is the stream's, whichever door a
// record comes in by: routes naming one stream must not disagree).
type Route struct {
	Filter string `yaml:"filter"`
	Stream string `yaml:"stream"`
	// Payload is raw (the envelope only; default), infer (JSON object
	// payloads also land as typed columns: docs/tables.md "Typed columns") or
	// schema (as declared by SchemaFile, a JSON Schema).
	Payload string `yaml:"payload"`
	// SchemaFile (schema): the stream's JSON Schema (Draft-07 subset).
	SchemaFile string `yaml:"schema_file"`
	// Formats are the table formats of the stream: [iceberg] or
	// [iceberg, delta] (a Delta Lake log beside the Iceberg table, over
	// the same files: docs/tables.md "Delta Lake"). Default: uplink.formats.
	Formats []string `yaml:"formats"`
	// EventTime (infer, schema) names the top-level payload field, an RFC
	// 3339 date-time, copied into the event_time column. Default "" (none).
	EventTime string `yaml:"event_time"`
	// PartitionBy is timestamp (the ingest time; default) or event_time
	// (the table's day or hour partition spec uses event_time instead).
	PartitionBy string `yaml:"partition_by"`
	// Timestamps (infer): a new string field whose first value is an RFC
	// 3339 date-time becomes a timestamptz column. Default false.
	Timestamps bool `yaml:"timestamps"`
	// Numbers (infer) is the type of a new number field: double (every
	// number, the default: a reading of 22 and then 21.5 keeps both) or
	// long (a field whose first value is an integer becomes long; once
	// the table has it, a fraction goes to the dead-letter table). A
	// table keeps the types it has whatever this says.
	Numbers string `yaml:"numbers"`
	// MaxColumns (infer) caps the stream's typed columns, at every level
	// of nesting; a payload that would add more goes to the dead-letter
	// table. Default 512.
	MaxColumns int `yaml:"max_columns"`
}

// parseFormats checks a formats list and says whether it has delta.
func parseFormats(fs []string) (delta bool, err error) {
	if len(fs) == 0 {
		return false, nil
	}
	seen := map[string]bool{}
	for _, f := range fs {
		if f != "iceberg" && f != "delta" {
			return false, fmt.Errorf("%q: want iceberg or delta", f)
		}
		if seen[f] {
			return false, fmt.Errorf("%s twice", f)
		}
		seen[f] = true
	}
	if !seen["iceberg"] {
		return false, errors.New("iceberg is always one of the formats (the cloud's readers serve from it): [iceberg] or [iceberg, delta]")
	}
	return seen["delta"], nil
}

// Formats returns, for each stream an MQTT route sets formats for,
// whether it has a Delta log, and the default for every other stream
// (uplink.formats). Routes of one stream must agree.
func (c *Config) Formats() (map[string]bool, bool, error) {
	def, err := parseFormats(c.Uplink.Formats)
	if err != nil {
		return nil, false, fmt.Errorf("uplink.formats: %w", err)
	}
	out := map[string]bool{}
	set := map[string]int{}
	for i, r := range c.MQTT.Routes {
		if r.Formats == nil {
			continue
		}
		d, err := parseFormats(r.Formats)
		if err != nil {
			return nil, false, fmt.Errorf("mqtt.routes[%d].formats: %w", i, err)
		}
		if j, ok := set[r.Stream]; ok && out[r.Stream] != d {
			return nil, false, fmt.Errorf("mqtt.routes[%d]: stream %s has other formats in mqtt.routes[%d]: one stream, one setting", i, r.Stream, j)
		}
		set[r.Stream], out[r.Stream] = i, d
	}
	return out, def, nil
}

// Payloads returns each routed stream's payload policy (streams set raw
// by every route are left out). Routes of one stream must agree.
func (c *Config) Payloads() (map[string]typed.Policy, error) {
	out := map[string]typed.Policy{}
	set := map[string]int{} // stream -> index of the route that set it
	for i, r := range c.MQTT.Routes {
		if r.Payload == "" && !r.Timestamps && r.MaxColumns == 0 && r.SchemaFile == "" && r.EventTime == "" && r.PartitionBy == "" && r.Numbers == "" {
			continue // says nothing: another route of the stream may
		}
		m, err := typed.ParseMode(r.Payload)
		if err != nil {
			return nil, fmt.Errorf("mqtt.routes[%d].payload: %w", i, err)
		}
		if r.MaxColumns < 0 {
			return nil, fmt.Errorf("mqtt.routes[%d].max_columns: %d: want 0 (default %d) or more", i, r.MaxColumns, typed.DefaultMaxColumns)
		}
		if (m == typed.Declared) != (r.SchemaFile != "") {
			return nil, fmt.Errorf("mqtt.routes[%d]: schema_file goes with payload: schema, and payload: schema needs a schema_file", i)
		}
		switch r.PartitionBy {
		case "", "timestamp":
		case "event_time":
			if r.EventTime == "" {
				return nil, fmt.Errorf("mqtt.routes[%d].partition_by: event_time needs event_time (the payload field)", i)
			}
		default:
			return nil, fmt.Errorf("mqtt.routes[%d].partition_by: %q: want timestamp or event_time", i, r.PartitionBy)
		}
		switch r.Numbers {
		case "", "double":
		case "long":
			if m != typed.Infer {
				return nil, fmt.Errorf("mqtt.routes[%d].numbers: long needs payload: infer (in schema mode the schema says integer or number)", i)
			}
		default:
			return nil, fmt.Errorf("mqtt.routes[%d].numbers: %q: want double (the default) or long", i, r.Numbers)
		}
		if r.EventTime != "" && m == typed.Raw {
			return nil, fmt.Errorf("mqtt.routes[%d].event_time: needs payload: infer or schema", i)
		}
		if r.EventTime != "" && !typed.Usable(r.EventTime, true, nil) {
			return nil, fmt.Errorf("mqtt.routes[%d].event_time: %q cannot name a payload field", i, r.EventTime)
		}
		pol := typed.Policy{Mode: m, Timestamps: r.Timestamps, MaxColumns: r.MaxColumns, SchemaFile: r.SchemaFile,
			EventTime: r.EventTime, PartitionByEventTime: r.PartitionBy == "event_time", Longs: r.Numbers == "long"}
		if j, ok := set[r.Stream]; ok {
			if prev := out[r.Stream]; prev.Mode != pol.Mode || prev.Timestamps != pol.Timestamps || prev.MaxColumns != pol.MaxColumns ||
				prev.SchemaFile != pol.SchemaFile || prev.EventTime != pol.EventTime || prev.PartitionByEventTime != pol.PartitionByEventTime ||
				prev.Longs != pol.Longs {
				return nil, fmt.Errorf("mqtt.routes[%d]: stream %s has other payload settings in mqtt.routes[%d]: one stream, one setting", i, r.Stream, j)
			}
			continue
		}
		if m == typed.Declared {
			raw, err := os.ReadFile(r.SchemaFile)
			if err != nil {
				return nil, fmt.Errorf("mqtt.routes[%d].schema_file: %w", i, err)
			}
			if pol.Columns, err = typed.ParseJSONSchema(raw); err != nil {
				return nil, fmt.Errorf("mqtt.routes[%d].schema_file %s: %w", i, r.SchemaFile, err)
			}
		}
		set[r.Stream] = i
		out[r.Stream] = pol
	}
	for s, pol := range out {
		if !pol.Typed() {
			delete(out, s)
		}
	}
	return out, nil
}

// Config is an edge node's configuration. Every field has a default
// (see Defaults); a YAML file may set any of them, with ${ENV} expansion.
type Config struct {
	// NodeID names this node in the catalog and in every row it accepts.
	// Default: the host name.
	NodeID string `yaml:"node_id"`
	// DataDir holds the WAL and, on embedded defaults, the catalog and
	// warehouse. Default ./data.
	DataDir string `yaml:"data_dir"`

	WAL struct {
		// Path of the bbolt file. Default DATA_DIR/wal/wal.db.
		Path string `yaml:"path"`
		// MaxBytes is the disk budget of unuploaded records. Default 1 GiB.
		MaxBytes ByteSize `yaml:"max_bytes"`
	} `yaml:"wal"`

	Catalog struct {
		// Name of the catalog. Default tributary.
		Name string `yaml:"name"`
		// URI: sqlite:///path/catalog.db, postgres://user:pw@host:5432/db
		// (iceberg-go's SQL catalog schema), or http(s)://host:port[/path]
		// for an Iceberg REST catalog (a 'tributary cloud' server, or one
		// that is not ours: Polaris, Unity, Glue, S3 Tables, Nessie,
		// Lakekeeper, SeaweedFS). Default sqlite://DATA_DIR/catalog.db.
		URI string `yaml:"uri"`
		// Token is the bearer token of a REST catalog that requires one
		// (the cloud's catalog.node_token, or a JWT).
		Token string `yaml:"token"`
		// Credential is this node's own "client_id:client_secret" for a
		// REST catalog with authentication: exchanged at the catalog's
		// OAuth2 token endpoint (/v1/oauth/tokens) for a bearer token,
		// refreshed before it expires. The cloud checks it against its
		// users file and authorizes the node's commits with the write
		// action. Ignored when Token is set. Default "".
		Credential string `yaml:"credential"`
		// SigV4 signs every request to a REST catalog with AWS Signature
		// V4 instead of a token or credential (AWS Glue, S3 Tables,
		// SeaweedFS), with storage.s3's keys when set. Default off.
		SigV4 config.SigV4 `yaml:"sigv4"`
		// CAFile is a PEM file of the CAs an https:// REST catalog's
		// certificate is verified against. Default "" (the system's roots).
		CAFile string `yaml:"ca_file"`
		// Warehouse blob URL; with a REST catalog that is not ours, the
		// location of its warehouse as it names it (e.g. s3://table-bucket),
		// sent to its /v1/config. Default file://DATA_DIR/warehouse.
		Warehouse string `yaml:"warehouse"`
		// PartitionGranularity of new tables: day or hour. Default day.
		PartitionGranularity string `yaml:"partition_granularity"`
	} `yaml:"catalog"`

	// Storage configures the object store of the warehouse.
	Storage StorageConfig `yaml:"storage"`

	// Security: TLS on every listener (security.tls; listener names mqtt,
	// mqtt_ws, kafka, http, peer, and rest, kafka, pulsar for the cloud
	// server it may run), authentication and the ACL (see docs/security.md, "Secure
	// a site"). Default: no TLS, anonymous clients with every right,
	// allowed on loopback addresses only. Peer links use mutual TLS when
	// security.tls (or security.tls.listeners.peer) has a certificate and
	// a client_ca_file.
	Security config.Security `yaml:"security"`

	MQTT struct {
		// Addr of the TCP listener. Default 127.0.0.1:1883; "" turns it off.
		Addr string `yaml:"addr"`
		// WSAddr of the WebSocket listener. Default "" (off).
		WSAddr string `yaml:"ws_addr"`
		// WSAllowedOrigins are the browser origins (scheme://host[:port],
		// or "*") the WebSocket listener accepts besides its own host.
		// Default none: a browser page of another site is refused (403);
		// clients that send no Origin are not browsers and pass.
		WSAllowedOrigins []string `yaml:"ws_allowed_origins"`
		// Routes from topic filters to streams; first match wins.
		Routes []Route `yaml:"routes"`
		// DefaultStream receives every topic no route matches. Default mqtt.default.
		DefaultStream string `yaml:"default_stream"`
		// MaxPacketSize in bytes. Default 1 MiB.
		MaxPacketSize ByteSize `yaml:"max_packet_size"`
		// ReceiveMaximum is the QoS 1/2 window per client. Default 64.
		ReceiveMaximum uint16 `yaml:"receive_maximum"`
		// MaxConnections caps the open MQTT connections of each listener
		// (TCP, WebSocket); MaxConnectionsPerIP those from one address;
		// ConnectTimeout is how long a connection may take to send an
		// accepted CONNECT. Defaults 10000, 1000 and 10s; -1 = no cap.
		// MaxRetained and MaxRetainedBytes cap the retained messages (topics
		// and payload bytes; a retained publish beyond is refused with 0x97);
		// MaxSessions the client sessions, connected or kept (CONNACK 0x97
		// beyond). Defaults 100000, 64MiB and 100000; -1 = no cap.
		MaxRetained         int           `yaml:"max_retained"`
		MaxRetainedBytes    ByteSize      `yaml:"max_retained_bytes"`
		MaxSessions         int           `yaml:"max_sessions"`
		MaxConnections      int           `yaml:"max_connections"`
		MaxConnectionsPerIP int           `yaml:"max_connections_per_ip"`
		ConnectTimeout      time.Duration `yaml:"connect_timeout"`
		// MaxKeepAlive caps a client's keep-alive (a client asking for
		// none or more gets this, and MQTT 5 clients are told). Default 10m.
		MaxKeepAlive time.Duration `yaml:"max_keep_alive"`
		// MaxQueuedMessages caps the deliveries queued for one client and
		// not yet written to its socket (beyond it a delivery to that
		// client is dropped); WriteTimeout closes a client whose socket
		// takes nothing for that long (it does not read, or is gone).
		// Defaults 1024 and 30s; write_timeout -1 = none.
		MaxQueuedMessages int           `yaml:"max_queued_messages"`
		WriteTimeout      time.Duration `yaml:"write_timeout"`
		// BlockingAcks makes each connection wait for the fsync of one
		// QoS 1/2 publish before it reads the next (the design before
		// asynchronous acknowledgements; for comparison). Default false:
		// a connection keeps reading while its publishes wait for the
		// group commit, and their acknowledgements follow in order.
		BlockingAcks bool `yaml:"blocking_acks"`
		// RemovedUsers is the old plain-text users map, kept only so that
		// a file still carrying it gets an error that says where users
		// live now (security.users_file).
		RemovedUsers map[string]string `yaml:"users"`
	} `yaml:"mqtt"`

	Kafka struct {
		// Addr of the Kafka produce listener. Default "" (off) for edge
		// configs; tributary dev turns it on at 127.0.0.1:9092.
		Addr string `yaml:"addr"`
		// Listener is advertised_addr, max_inflight_bytes and
		// body_timeout (package kafka's section, shared with the cloud).
		kafka.Listener `yaml:",inline"`
		// AutoCreate creates a stream on first produce or metadata request.
		// Default true.
		AutoCreate *bool `yaml:"auto_create"`
		// MaxStreams caps the streams auto-creation may reach (counting
		// every stream of the catalog); beyond, POLICY_VIOLATION. Default 1000.
		MaxStreams int `yaml:"max_streams"`
		// MaxBatchBytes is the largest record batch accepted. Default
		// 1048588 (Kafka's message.max.bytes: 1 MiB and the 12-byte log
		// overhead).
		MaxBatchBytes ByteSize `yaml:"max_batch_bytes"`
		// Pipelining is max_pipelined_requests (package kafka's).
		kafka.Pipelining `yaml:",inline"`
	} `yaml:"kafka"`

	Uplink struct {
		// CommitInterval between commits of a stream. Default 1s.
		CommitInterval time.Duration `yaml:"commit_interval"`
		// MaxBatchBytes of one partition per commit; reaching it commits
		// early. Default 64 MiB.
		MaxBatchBytes ByteSize `yaml:"max_batch_bytes"`
		// ZstdLevel of the Parquet data files the uplink writes, 1–22.
		// Default 1 (tables.DefaultZstdLevel).
		ZstdLevel int `yaml:"zstd_level"`
		// ContinuousEncoding encodes streams' records (raw and typed)
		// into Parquet as they land, in small slices that yield to ingest,
		// instead of in one burst per commit (see package uplink).
		// Default false.
		ContinuousEncoding bool `yaml:"continuous_encoding"`
		// ContinuousEncodingMaxBytes caps the records (payloads, keys,
		// topics, headers) all in-progress files of continuous encoding
		// hold at once, across every partition. Default 64MiB, at least
		// 1MiB.
		ContinuousEncodingMaxBytes ByteSize `yaml:"continuous_encoding_max_bytes"`
		// Formats are the table formats of every stream no MQTT route
		// sets formats for (Kafka topics, HTTP and gRPC produce, the MQTT
		// default stream): [iceberg] or [iceberg, delta]. Default [iceberg].
		Formats []string `yaml:"formats"`
		// DeltaCheckpointInterval: a Delta log gets a Parquet checkpoint
		// every this many versions. Default 10.
		DeltaCheckpointInterval int `yaml:"delta_checkpoint_interval"`
	} `yaml:"uplink"`

	// Maintenance of the tables (compaction, manifest merging, snapshot
	// expiry, orphan cleanup).
	Maintenance MaintenanceConfig `yaml:"maintenance"`

	Cluster struct {
		// GossipAddr is the memberlist gossip listener, host:port (UDP and
		// TCP; port 0 picks a free one). Default "" (single node, no
		// gossip).
		GossipAddr string `yaml:"gossip_addr"`
		// AdvertiseAddr is the gossip host:port peers use to reach this
		// node. Default: the bound address.
		AdvertiseAddr string `yaml:"advertise_addr"`
		// Join lists peers' gossip addresses (host:port), retried with
		// backoff until one answers, so nodes may start in any order.
		Join []string `yaml:"join"`
		// GossipProfile: lan (memberlist's LAN timing, the default) or
		// local (faster failure detection; one host, tests).
		GossipProfile string `yaml:"gossip_profile"`
		// PeerAddr is the data-plane listener (TCP, package peer) for
		// forwarded MQTT publishes, WAL replication and takeover, host:port.
		// Default: the gossip host with port 0 (a free port, gossiped to
		// the other members).
		PeerAddr string `yaml:"peer_addr"`
		// PeerAdvertiseAddr is the peer host:port other nodes dial.
		// Default: the bound address.
		PeerAdvertiseAddr string `yaml:"peer_advertise_addr"`
		// ReplicationFactor is how many nodes hold each record before it
		// is acknowledged: the owner and the next factor-1 live members
		// in id order. Default 2; 1 turns replication off. Effective
		// factor: at most the number of live members.
		ReplicationFactor int `yaml:"replication_factor"`
		// ReplicationPolicy when replicas are missing: degrade (keep
		// accepting with fewer copies; tributary_replication_degraded = 1,
		// logged) or refuse (QoS 1/2 publishes and Kafka acks>=1 are
		// refused as for a full WAL). Default degrade.
		ReplicationPolicy string `yaml:"replication_policy"`
		// ReplicationTimeout is how long an acknowledgement waits for a
		// replica before it counts as missing. Default 5s.
		ReplicationTimeout time.Duration `yaml:"replication_timeout"`
		// TakeoverGrace is how long a member declared dead by gossip must
		// also be unreachable on its peer link before its replica holders
		// take its partitions over. Gossip loss alone never moves
		// ownership: a node cut off from gossip but still answering on its
		// data link keeps its partitions. Default 5s.
		TakeoverGrace time.Duration `yaml:"takeover_grace"`
		// OwnerLease is how long an owner's lease in the catalog lasts
		// (with replication on): every node renews its own every
		// owner_lease/5 (a property of the catalog namespace
		// tributary_leases), a node that can neither renew it nor reach a
		// majority of the site stops accepting writes after 70% of it,
		// and a peer takes a silent node's partitions over only once its
		// lease has stayed unchanged for a whole owner_lease and the peer
		// sees a majority of the site alive. Default 10s; at least 1s.
		OwnerLease time.Duration `yaml:"owner_lease"`
		// GossipKey encrypts and authenticates gossip: base64 of 16, 24
		// or 32 random bytes (AES-128/192/256), the same on every node,
		// e.g. from `openssl rand -base64 32`. GossipKeyFile names a file
		// holding it instead. GossipSecondaryKeys are accepted for
		// decryption, never used to encrypt (key rotation, see docs/security.md).
		// Default none: gossip in clear, allowed on loopback only unless
		// security.allow_anonymous is true.
		GossipKey           string   `yaml:"gossip_key"`
		GossipKeyFile       string   `yaml:"gossip_key_file"`
		GossipSecondaryKeys []string `yaml:"gossip_secondary_keys"`
		// Secret authenticates peer links without certificates: every
		// node proves it in the link's hello (HMAC over fresh nonces; it
		// is never sent). At least 16 bytes, the same on every node.
		// SecretFile names a file holding it instead (trailing newline
		// ignored). Mutual TLS on peer links (security.tls with a
		// client_ca_file) is used when configured, the secret as well
		// when set. Default none.
		Secret     string `yaml:"secret"`
		SecretFile string `yaml:"secret_file"`
	} `yaml:"cluster"`

	// HTTPAddr serves /healthz, /readyz, /status and /metrics. Default
	// 127.0.0.1:8080; "" turns it off.
	HTTPAddr string `yaml:"http_addr"`
	// HTTPAPI caps the HTTP produce API served on http_addr
	// (POST /v3/clusters/{catalog}/topics/{stream}/records).
	HTTPAPI httpapi.Config `yaml:"http_api"`

	// CatalogAddr, CloudKafkaAddr and CloudPulsarAddr, when any is set,
	// run a cloud server (package cloud) in the same process over the
	// node's catalog, as "tributary dev" does; the node itself only
	// carries them (cmd/tributary composes the two). The catalog must be
	// SQL (SQLite or Postgres): group offsets and Pulsar cursors are
	// stored in it. Each is "" (off) by default.
	//
	// CatalogAddr serves the node's catalog as an Iceberg REST catalog
	// (what 'tributary cloud' serves), so query engines can attach to the
	// tables; tributary dev serves 127.0.0.1:8181.
	CatalogAddr string `yaml:"catalog_addr"`
	// CloudKafkaAddr serves Kafka consumers reading the stream tables.
	// Default "" (off).
	CloudKafkaAddr string `yaml:"cloud_kafka_addr"`
	// CloudPulsarAddr serves Pulsar consumers reading the stream tables.
	// Default "" (off).
	CloudPulsarAddr string `yaml:"cloud_pulsar_addr"`
	// CloudMQTTAddr and CloudMQTTWSAddr serve MQTT subscribers reading the
	// stream tables (TCP and WebSocket; package cloudmqtt). Default ""
	// (off).
	CloudMQTTAddr   string `yaml:"cloud_mqtt_addr"`
	CloudMQTTWSAddr string `yaml:"cloud_mqtt_ws_addr"`
	// CloudHTTPAddr serves the HTTP read API (long poll, Server-Sent
	// Events, group offsets) over the stream tables. Default "" (off);
	// tributary dev serves 127.0.0.1:18080.
	CloudHTTPAddr string `yaml:"cloud_http_addr"`

	// ShutdownTimeout bounds the final commit on shutdown. Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// DefaultMQTTAddr and DefaultHTTPAddr are the listeners of a config file
// that does not name mqtt.addr or http_addr (a key written as "" turns its
// listener off; in a Config built by a program, "" is off).
const (
	DefaultMQTTAddr = "127.0.0.1:1883"
	DefaultHTTPAddr = "127.0.0.1:8080"
)

// Defaults returns the configuration of an edge node on embedded defaults:
// what a config file without any key means.
func Defaults() Config {
	c := listenerDefaults()
	c.applyDefaults()
	return c
}

// listenerDefaults is the zero Config with the listeners a file that does
// not name them gets; decoding a file over it keeps them unless the file
// sets the key (to "" for off).
func listenerDefaults() Config {
	var c Config
	c.MQTT.Addr, c.HTTPAddr = DefaultMQTTAddr, DefaultHTTPAddr
	return c
}

func (c *Config) applyDefaults() {
	if c.NodeID == "" {
		h, _ := os.Hostname()
		if h == "" {
			h = "edge-1"
		}
		c.NodeID = h
	}
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.WAL.Path == "" {
		c.WAL.Path = filepath.Join(c.DataDir, "wal", "wal.db")
	}
	if c.WAL.MaxBytes == 0 {
		c.WAL.MaxBytes = 1 << 30
	}
	config.DefaultCatalog(c.DataDir, &c.Catalog.Name, &c.Catalog.URI, &c.Catalog.Warehouse)
	c.Catalog.Warehouse = c.Storage.Warehouse(c.Catalog.Warehouse)
	if c.Catalog.PartitionGranularity == "" {
		c.Catalog.PartitionGranularity = "day"
	}
	c.Catalog.SigV4.Defaults()
	if c.MQTT.DefaultStream == "" {
		c.MQTT.DefaultStream = "mqtt.default"
	}
	if c.MQTT.MaxPacketSize == 0 {
		c.MQTT.MaxPacketSize = 1 << 20
	}
	if c.MQTT.MaxKeepAlive == 0 {
		c.MQTT.MaxKeepAlive = 10 * time.Minute
	}
	if c.MQTT.ReceiveMaximum == 0 {
		c.MQTT.ReceiveMaximum = 64
	}
	// The caps the mqtt and listen packages would apply to a zero, so
	// that the effective settings (config check) are the documented ones.
	for _, d := range []struct {
		v   *int
		def int
	}{{&c.MQTT.MaxRetained, mqtt.DefaultMaxRetained}, {&c.MQTT.MaxSessions, mqtt.DefaultMaxSessions},
		{&c.MQTT.MaxConnections, listen.DefaultMaxConns}, {&c.MQTT.MaxConnectionsPerIP, listen.DefaultMaxConnsPerIP},
		{&c.MQTT.MaxQueuedMessages, mqtt.DefaultMaxQueuedMessages}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.MQTT.MaxRetainedBytes == 0 {
		c.MQTT.MaxRetainedBytes = mqtt.DefaultMaxRetainedBytes
	}
	if c.MQTT.ConnectTimeout == 0 {
		c.MQTT.ConnectTimeout = listen.DefaultHandshakeTimeout
	}
	if c.MQTT.WriteTimeout == 0 {
		c.MQTT.WriteTimeout = mqtt.DefaultWriteTimeout
	}
	if c.Kafka.MaxStreams <= 0 {
		c.Kafka.MaxStreams = 1000
	}
	if c.Kafka.AutoCreate == nil {
		t := true
		c.Kafka.AutoCreate = &t
	}
	if c.Kafka.MaxBatchBytes == 0 {
		c.Kafka.MaxBatchBytes = 1048588
	}
	c.Kafka.Listener.Defaults()
	c.Kafka.Pipelining.Defaults()
	c.HTTPAPI.Defaults()
	if c.Uplink.CommitInterval == 0 {
		c.Uplink.CommitInterval = time.Second
	}
	if c.Uplink.MaxBatchBytes == 0 {
		c.Uplink.MaxBatchBytes = 64 << 20
	}
	if c.Uplink.ZstdLevel == 0 {
		c.Uplink.ZstdLevel = tables.DefaultZstdLevel
	}
	if c.Uplink.DeltaCheckpointInterval == 0 {
		c.Uplink.DeltaCheckpointInterval = 10
	}
	if c.Uplink.Formats == nil {
		c.Uplink.Formats = []string{"iceberg"}
	}
	if c.Uplink.ContinuousEncodingMaxBytes == 0 {
		c.Uplink.ContinuousEncodingMaxBytes = uplink.DefaultPreencodeMaxBytes
	}
	c.Maintenance.Defaults()
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.Cluster.GossipProfile == "" {
		c.Cluster.GossipProfile = "lan"
	}
	if c.Cluster.ReplicationFactor == 0 {
		c.Cluster.ReplicationFactor = 2
	}
	if c.Cluster.ReplicationPolicy == "" {
		c.Cluster.ReplicationPolicy = "degrade"
	}
	if c.Cluster.ReplicationTimeout == 0 {
		c.Cluster.ReplicationTimeout = 5 * time.Second
	}
	if c.Cluster.TakeoverGrace == 0 {
		c.Cluster.TakeoverGrace = 5 * time.Second
	}
	if c.Cluster.OwnerLease == 0 {
		c.Cluster.OwnerLease = 10 * time.Second
	}
	if c.Cluster.PeerAddr == "" && c.Cluster.GossipAddr != "" {
		if host, _, err := net.SplitHostPort(c.Cluster.GossipAddr); err == nil {
			c.Cluster.PeerAddr = net.JoinHostPort(host, "0")
		}
	}
}

// Validate checks the configuration; each error names the field and the fix.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if strings.ContainsAny(c.NodeID, " /\t\n") || c.NodeID == "" {
		bad("node_id", "%q must be non-empty without spaces or slashes", c.NodeID)
	}
	if c.MQTT.RemovedUsers != nil {
		bad("mqtt.users", "removed (passwords in plain text): create users with `tributary passwd FILE USER` and name the file in security.users_file")
	}
	if ka := c.MQTT.MaxKeepAlive; ka < time.Second || ka > 65535*time.Second {
		bad("mqtt.max_keep_alive", "%s must be between 1s and 65535s", ka)
	}
	if c.WAL.MaxBytes < 1<<20 {
		bad("wal.max_bytes", "%d is below the minimum of 1MiB", c.WAL.MaxBytes)
	}
	if u := c.Catalog.URI; !strings.HasPrefix(u, "sqlite://") && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") &&
		!strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		bad("catalog.uri", "%q: want sqlite:///path/to/catalog.db, postgres://user:password@host:5432/db or http(s)://host:port (Iceberg REST)", tables.Redact(u))
	}
	if cr := c.Catalog.Credential; cr != "" {
		if id, secret, ok := strings.Cut(cr, ":"); !ok || id == "" || secret == "" {
			bad("catalog.credential", "want client_id:client_secret")
		}
		if !strings.HasPrefix(c.Catalog.URI, "http://") && !strings.HasPrefix(c.Catalog.URI, "https://") {
			bad("catalog.credential", "only a REST catalog (catalog.uri http(s)://) takes a credential")
		}
	}
	c.Catalog.SigV4.Validate(c.Catalog.URI, c.Catalog.Token, c.Catalog.Credential, bad)
	c.Storage.Validate(c.Catalog.Warehouse, bad)
	c.HTTPAPI.Validate("http_api", bad)
	c.Security.Validate(bad)
	if err := c.Security.Exposed(map[string]config.Listener{"mqtt.addr": config.Bind(c.MQTT.Addr, "mqtt"), "mqtt.ws_addr": config.Bind(c.MQTT.WSAddr, "mqtt_ws"),
		"kafka.addr": config.Bind(c.Kafka.Addr, "kafka"), "http_addr": config.Bind(c.HTTPAddr, "http"), "catalog_addr": config.Bind(c.CatalogAddr, "rest"),
		"cloud_kafka_addr": config.Bind(c.CloudKafkaAddr, "kafka"), "cloud_pulsar_addr": config.Bind(c.CloudPulsarAddr, "pulsar"),
		"cloud_mqtt_addr": config.Bind(c.CloudMQTTAddr, "mqtt"), "cloud_mqtt_ws_addr": config.Bind(c.CloudMQTTWSAddr, "mqtt_ws"),
		"cloud_http_addr": config.Bind(c.CloudHTTPAddr, "http")}); err != nil {
		bad("security", "%v", err)
	}
	if !strings.Contains(c.Catalog.Warehouse, "://") {
		bad("catalog.warehouse", "%q: want a blob URL such as file:///var/lib/tributary/warehouse or s3://bucket/prefix", c.Catalog.Warehouse)
	}
	if g := c.Catalog.PartitionGranularity; g != "day" && g != "hour" {
		bad("catalog.partition_granularity", "%q: want day or hour", g)
	}
	if _, _, err := tributary.ParseStream(c.MQTT.DefaultStream); err != nil {
		bad("mqtt.default_stream", "%v", err)
	}
	if tables.IsDLQ(c.MQTT.DefaultStream) {
		bad("mqtt.default_stream", "%q: names ending in %s are the dead-letter tables of typed streams", c.MQTT.DefaultStream, tables.DLQSuffix)
	}
	if _, err := c.Payloads(); err != nil {
		bad("mqtt.routes", "%v", err)
	}
	for i, r := range c.MQTT.Routes {
		if _, _, err := tributary.ParseStream(r.Stream); err != nil {
			bad(fmt.Sprintf("mqtt.routes[%d].stream", i), "%v", err)
		}
		if tables.IsDLQ(r.Stream) {
			bad(fmt.Sprintf("mqtt.routes[%d].stream", i), "%q: names ending in %s are the dead-letter tables of typed streams", r.Stream, tables.DLQSuffix)
		}
		if r.Filter == "" {
			bad(fmt.Sprintf("mqtt.routes[%d].filter", i), "empty topic filter")
		}
	}
	if c.Kafka.MaxBatchBytes < 1024 || c.Kafka.MaxBatchBytes > 100<<20 {
		bad("kafka.max_batch_bytes", "%d: want 1KiB to 100MiB", c.Kafka.MaxBatchBytes)
	}
	c.Kafka.Pipelining.Validate("kafka.", bad)
	c.Kafka.Listener.Validate("kafka.", bad)
	if c.Uplink.CommitInterval < 10*time.Millisecond {
		bad("uplink.commit_interval", "%s is below the minimum of 10ms", c.Uplink.CommitInterval)
	}
	if c.Uplink.MaxBatchBytes < 1<<10 {
		bad("uplink.max_batch_bytes", "%d is below the minimum of 1KiB", c.Uplink.MaxBatchBytes)
	}
	if c.Uplink.ZstdLevel < 1 || c.Uplink.ZstdLevel > 22 {
		bad("uplink.zstd_level", "%d: want 1 to 22", c.Uplink.ZstdLevel)
	}
	if c.Uplink.DeltaCheckpointInterval < 1 {
		bad("uplink.delta_checkpoint_interval", "%d: want 1 or more", c.Uplink.DeltaCheckpointInterval)
	}
	if _, err := parseFormats(c.Uplink.Formats); err != nil {
		bad("uplink.formats", "%v", err)
	}
	if _, _, err := c.Formats(); err != nil {
		bad("mqtt.routes", "%v", err)
	}
	if c.Uplink.ContinuousEncodingMaxBytes < 1<<20 {
		bad("uplink.continuous_encoding_max_bytes", "%d is below the minimum of 1MiB", c.Uplink.ContinuousEncodingMaxBytes)
	}
	c.Maintenance.Validate(bad)
	if c.Catalog.CAFile != "" && !strings.HasPrefix(c.Catalog.URI, "https://") {
		bad("catalog.ca_file", "set, but catalog.uri %q is not https://", tables.Redact(c.Catalog.URI))
	}
	if g := c.Cluster; g.GossipAddr != "" {
		if _, _, err := net.SplitHostPort(g.GossipAddr); err != nil {
			bad("cluster.gossip_addr", "%q: want host:port, e.g. 0.0.0.0:7946 (%v)", g.GossipAddr, err)
		}
		if g.AdvertiseAddr != "" {
			if _, _, err := net.SplitHostPort(g.AdvertiseAddr); err != nil {
				bad("cluster.advertise_addr", "%q: want host:port (%v)", g.AdvertiseAddr, err)
			}
		}
		if _, _, err := net.SplitHostPort(g.PeerAddr); err != nil {
			bad("cluster.peer_addr", "%q: want host:port, e.g. 0.0.0.0:7947 (%v)", g.PeerAddr, err)
		}
		if g.PeerAdvertiseAddr != "" {
			if _, port, err := net.SplitHostPort(g.PeerAdvertiseAddr); err != nil || port == "0" {
				bad("cluster.peer_advertise_addr", "%q: want host:port with a fixed port (%v)", g.PeerAdvertiseAddr, err)
			}
		}
		for i, j := range g.Join {
			if _, port, err := net.SplitHostPort(j); err != nil || port == "" || port == "0" {
				bad(fmt.Sprintf("cluster.join[%d]", i), "%q: want a peer's gossip host:port", j)
			}
		}
		if !slices.Contains(cluster.Profiles, g.GossipProfile) {
			bad("cluster.gossip_profile", "%q: want one of %s", g.GossipProfile, strings.Join(cluster.Profiles, ", "))
		}
	}
	if g := c.Cluster; g.ReplicationFactor < 1 || g.ReplicationFactor > 16 {
		bad("cluster.replication_factor", "%d: want 1 (off) to 16", g.ReplicationFactor)
	}
	if g := c.Cluster; g.ReplicationPolicy != "degrade" && g.ReplicationPolicy != "refuse" {
		bad("cluster.replication_policy", "%q: want degrade or refuse", g.ReplicationPolicy)
	}
	if g := c.Cluster; g.ReplicationTimeout < 10*time.Millisecond {
		bad("cluster.replication_timeout", "%s is below the minimum of 10ms", g.ReplicationTimeout)
	}
	if g := c.Cluster; g.TakeoverGrace < 100*time.Millisecond {
		bad("cluster.takeover_grace", "%s is below the minimum of 100ms", g.TakeoverGrace)
	}
	if g := c.Cluster; g.OwnerLease < time.Second {
		bad("cluster.owner_lease", "%s is below the minimum of 1s", g.OwnerLease)
	}
	if g := c.Cluster; g.GossipAddr == "" && (len(g.Join) > 0 || g.AdvertiseAddr != "") {
		bad("cluster.gossip_addr", "empty, but cluster.join or cluster.advertise_addr is set: set gossip_addr (e.g. 0.0.0.0:7946) to gossip")
	}
	c.validateClusterSecurity(bad)
	return errors.Join(errs...)
}

// MaintenancePolicy is the tables.Policy of the maintenance settings.
func (c *Config) MaintenancePolicy() tables.Policy { return c.Maintenance.Policy() }

// LoadConfig reads a YAML file, expanding ${ENV} references, fills in
// defaults and validates.
func LoadConfig(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := ParseConfig(raw)
	return c, config.InFile(path, err)
}

// ParseConfig is LoadConfig on bytes. A file must leave at least one
// listener on (checkListeners).
func ParseConfig(raw []byte) (Config, error) {
	c := listenerDefaults()
	if err := config.Decode(raw, &c); err != nil {
		return Config{}, err
	}
	c.applyDefaults()
	err := c.Validate()
	if err == nil {
		err = c.checkListeners()
	}
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// checkListeners refuses a node that would listen on nothing: no front
// door, no status port, no cluster or cloud listener.
func (c *Config) checkListeners() error {
	for _, a := range []string{c.MQTT.Addr, c.MQTT.WSAddr, c.Kafka.Addr, c.HTTPAddr, c.Cluster.GossipAddr,
		c.CatalogAddr, c.CloudKafkaAddr, c.CloudPulsarAddr, c.CloudMQTTAddr, c.CloudMQTTWSAddr, c.CloudHTTPAddr} {
		if a != "" {
			return nil
		}
	}
	return fmt.Errorf("mqtt.addr, mqtt.ws_addr, kafka.addr and http_addr are all off (\"\"), so the node would listen on nothing: set one of them, e.g. mqtt.addr: %s, or leave the key out for its default", DefaultMQTTAddr)
}

// S3Options are the storage.s3 settings for the uplink and the catalog.
func (c *Config) S3Options() tables.S3Options { return c.Storage.S3Options() }

// WithDefaults fills every unset field of c with its default.
func WithDefaults(c Config) Config {
	c.applyDefaults()
	return c
}
