// Package node composes an edge node from its parts: the write-ahead log
// (wal), the ownership book (owner), the write path (ingest), the MQTT,
// Kafka, HTTP and gRPC front doors, the uplink to the tables, replication
// and the cluster, and the HTTP endpoint for health, status and metrics.
// It is wiring: the decisions live in the parts.
//
// # Invariants
//
//   - Every front door writes through one tributary.Appender, the
//     ingest.Ingest: a record reaches the WAL admitted and with its
//     partition and ownership epoch already resolved by the owner.Book
//     (see package owner for how that belief is formed and corrected by
//     the fence).
//   - Close stops the listeners first, then makes a final commit (bounded by
//     ShutdownTimeout), then closes the WAL: nothing accepted is dropped, and
//     what could not be committed stays in the WAL for the next start.
//
// # Outline
//
// New opens the WAL, the catalog, the object store and the ownership book;
// Start opens the listeners, the uplink loop and (unless turned off) the
// table maintainer, which runs a maintenance pass over every stream each
// interval under a per-table lease, and last (when cluster.gossip_addr is
// set) joins the gossip cluster; Close undoes both in reverse, leaving the
// cluster first. With security.tls, New loads the certificates
// (listen.NewTLS) and every listener gets its *tls.Config through its
// listen.Config; ReloadTLS (SIGHUP) swaps them without a restart.
package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/console"
	"github.com/tributary-io/tributary/ingest"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/mqtt"
	"github.com/tributary-io/tributary/owner"
	"github.com/tributary-io/tributary/peer"
	"github.com/tributary-io/tributary/replica"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/uplink"
	"github.com/tributary-io/tributary/wal"
)

// Node is one edge node.
type Node struct {
	cfg    Config
	log    *slog.Logger
	wal    *wal.WAL
	cat    *tables.Catalog
	bucket *uplink.BlobBucket
	up     *uplink.Uplink
	maint  *tables.Maintainer // nil when maintenance is off
	mqtt   *mqtt.Server
	kafka  *produce.Server
	kb     *kafkaBackend
	book   *owner.Book     // which partitions this node writes, at which epoch
	auth   *auth.Authority // identities and the ACL of every listener
	ingest *ingest.Ingest  // the write path of every front door
	http   *http.Server
	httpLn net.Listener
	tls    *listen.TLS // nil without security.tls
	// consumers (a Consumers) is the in-process cloud server's view of
	// consumer groups for the console (ShowConsumers); unset on an edge.
	consumers atomic.Value
	// collectors are more metrics for /metrics (AddCollector).
	collectors []prometheus.Collector
	// cluster is the gossip membership (nil without cluster.gossip_addr);
	// set in Start while the Kafka server may already serve Metadata.
	cluster atomic.Pointer[cluster.Cluster]
	// peer is the data plane between nodes (nil without
	// cluster.gossip_addr); set in Start before the cluster is joined.
	peer *peer.Peer
	// console is the operator's console on the HTTP port (console.go).
	console       *console.Console
	consoleTables *console.TableCache

	started     time.Time
	startFailed bool // Start returned an error: Close makes no final commit
	cancel      context.CancelFunc
	wg          sync.WaitGroup
}

// CatalogConfig is how the node opens its catalog: URI, warehouse,
// credentials and TLS (also used by `tributary config check`).
func (c Config) CatalogConfig() (tables.Config, error) {
	catTLS, err := catalogTLS(c.Catalog.CAFile)
	if err != nil {
		return tables.Config{}, err
	}
	props := map[string]string{}
	switch {
	case c.Catalog.Token != "":
		props["token"] = c.Catalog.Token
	case c.Catalog.Credential != "":
		props["credential"] = c.Catalog.Credential
	}
	for k, v := range c.Storage.CatalogProperties(c.Catalog.Warehouse) {
		props[k] = v
	}
	return tables.Config{Name: c.Catalog.Name, URI: c.Catalog.URI, Warehouse: c.Catalog.Warehouse,
		Granularity: c.Catalog.PartitionGranularity, Properties: props, TLS: catTLS, SigV4: c.Catalog.SigV4.Signer(c.Storage)}, nil
}

// CatalogKeys are the edge config keys a REST catalog's errors name.
var CatalogKeys = tables.CheckKeys{URI: "catalog.uri", Token: "catalog.token", Credential: "catalog.credential",
	SigV4: "catalog.sigv4", Warehouse: "catalog.warehouse"}

// OpenCatalog opens the node's catalog; a REST catalog is asked first
// for what the node needs of it (tables.CheckREST), so that a wrong URI,
// credential, token or warehouse stops the start naming its key; leases:
// the node keeps owner leases there (cluster.replication_factor > 1).
func OpenCatalog(ctx context.Context, cfg tables.Config, leases bool) (*tables.Catalog, error) {
	if tables.External(cfg.URI) {
		keys := CatalogKeys
		keys.Leases = leases
		return tables.CheckREST(ctx, cfg, keys)
	}
	return tables.Open(ctx, cfg)
}

// New opens the WAL, the catalog and the object store.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Node, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	n := &Node{cfg: cfg, log: log}
	var err error
	if n.auth, err = auth.Open(cfg.Security.Auth(), log); err != nil {
		return nil, err
	}
	if n.tls, err = listen.NewTLS(cfg.Security.TLS, log.With("component", "tls")); err != nil {
		return nil, err
	}
	catCfg, err := cfg.CatalogConfig()
	if err != nil {
		return nil, err
	}
	n.wal, err = wal.Open(wal.Options{Path: cfg.WAL.Path, MaxBytes: int64(cfg.WAL.MaxBytes), Logger: log,
		TestTapDelay: testTapDelay(log)})
	if errors.Is(err, wal.ErrLocked) {
		dir, _ := filepath.Abs(cfg.DataDir)
		return nil, fmt.Errorf("another process holds DATA_DIR (%s): its WAL %s is locked; stop that process, or give this one another data_dir (tributary dev --data DIR): %w",
			dir, cfg.WAL.Path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open wal: %w", err)
	}
	n.cat, err = OpenCatalog(ctx, catCfg, cfg.Cluster.GossipAddr != "" && cfg.Cluster.ReplicationFactor > 1)
	if err != nil {
		n.wal.Close()
		return nil, err
	}
	n.bucket, err = uplink.OpenBucket(ctx, cfg.Catalog.Warehouse, cfg.Storage.Stores())
	if err != nil {
		n.cat.Close()
		n.wal.Close()
		return nil, err
	}
	n.book = owner.New(cfg.NodeID, n.wal, n.cat, log)
	n.ingest = ingest.New(ingest.Config{Node: cfg.NodeID, AutoCreate: *cfg.Kafka.AutoCreate, MaxStreams: cfg.Kafka.MaxStreams,
		Streams: slices.Collect(maps.Keys(routeFilters(cfg))), RefuseUntilReplicating: cfg.Cluster.GossipAddr != "" && cfg.Cluster.ReplicationFactor > 1 &&
			cfg.Cluster.ReplicationPolicy == string(replica.Refuse)}, n.wal, n.book, n.cat)
	n.kb, err = newKafkaBackend(n)
	if err != nil {
		n.bucket.Close()
		n.cat.Close()
		n.wal.Close()
		return nil, err
	}
	deltaStreams, deltaDefault, err := cfg.Formats()
	if err != nil { // Validate refused it already
		n.bucket.Close()
		n.cat.Close()
		n.wal.Close()
		return nil, err
	}
	payloads, err := cfg.Payloads()
	if err != nil { // Validate refused it already
		n.bucket.Close()
		n.cat.Close()
		n.wal.Close()
		return nil, err
	}
	n.up = uplink.New(uplink.Config{Interval: cfg.Uplink.CommitInterval, MaxBatchBytes: int64(cfg.Uplink.MaxBatchBytes),
		Node: cfg.NodeID, Logger: log, QuarantineDir: filepath.Join(cfg.DataDir, "quarantine"), Payloads: payloads,
		Parquet:            tables.ParquetOptions{ZstdLevel: cfg.Uplink.ZstdLevel},
		ContinuousEncoding: cfg.Uplink.ContinuousEncoding, PreencodeMaxBytes: int64(cfg.Uplink.ContinuousEncodingMaxBytes),
		Delta: deltaStreams, DeltaDefault: deltaDefault, DeltaStore: n.bucket.DeltaStore(), DeltaCheckpointInterval: int64(cfg.Uplink.DeltaCheckpointInterval)}, n.wal, n.cat, n.bucket)
	n.up.OnFence(n.book)                    // a fenced partition is no longer written here
	n.up.ReadmitInto(n.book)                // and what only this node held of it goes to its own partition
	n.book.UseQuarantine(n.up.Quarantine()) // stale records a take-over drops are kept, as the fence's are
	n.up.OnRelease(n.kb.store)              // idempotent producers' state outlives released records
	if cfg.Kafka.Addr != "" {
		n.kafka, err = produce.NewServer(produce.Config{Config: kafka.Config{Addr: cfg.Kafka.Addr, Listener: cfg.Kafka.Listener,
			ClusterID: cfg.Catalog.Name, Auth: n.auth, Logger: log.With("component", "kafka"), Limits: listen.Config{TLS: n.tls.Server("kafka")},
			Pipelining: cfg.Kafka.Pipelining},
			AutoCreate: *cfg.Kafka.AutoCreate, MaxBatchBytes: int32(cfg.Kafka.MaxBatchBytes)}, n.kb, n.ingest)
		if err != nil {
			n.bucket.Close()
			n.cat.Close()
			n.wal.Close()
			return nil, err
		}
	}
	n.book.Watch(n.kb) // producer state from the records of an adopted partition
	if *cfg.Maintenance.Enabled {
		n.maint = tables.NewMaintainer(n.cat, tables.MaintainerConfig{Interval: cfg.Maintenance.Interval,
			Policy: cfg.MaintenancePolicy(), DeltaStore: n.bucket.DeltaStore(), Logger: log})
	}
	routes := make([]mqtt.Route, len(cfg.MQTT.Routes))
	for i, r := range cfg.MQTT.Routes {
		routes[i] = mqtt.Route{Filter: r.Filter, Stream: r.Stream}
	}
	n.mqtt, err = mqtt.New(mqtt.Config{TCPAddr: cfg.MQTT.Addr, WSAddr: cfg.MQTT.WSAddr, NodeID: cfg.NodeID, Auth: n.auth,
		Routes: routes, DefaultStream: cfg.MQTT.DefaultStream,
		MaxPacketSize: uint32(cfg.MQTT.MaxPacketSize), ReceiveMaximum: cfg.MQTT.ReceiveMaximum,
		MaxKeepAlive: uint16(cfg.MQTT.MaxKeepAlive / time.Second), Logger: log,
		MaxRetained: cfg.MQTT.MaxRetained, MaxRetainedBytes: int(cfg.MQTT.MaxRetainedBytes), MaxSessions: cfg.MQTT.MaxSessions,
		MaxQueuedMessages: cfg.MQTT.MaxQueuedMessages, BlockingAcks: cfg.MQTT.BlockingAcks,
		Limits: listen.Config{MaxConns: cfg.MQTT.MaxConnections, MaxConnsPerIP: cfg.MQTT.MaxConnectionsPerIP,
			HandshakeTimeout: cfg.MQTT.ConnectTimeout, WriteTimeout: cfg.MQTT.WriteTimeout, TLS: n.tls.Server("mqtt"),
			LoopbackHosts: n.openLoopback(cfg.MQTT.WSAddr)},
		WSTLS: n.tls.Server("mqtt_ws"), WSAllowedOrigins: cfg.MQTT.WSAllowedOrigins}, n.ingest)
	if err != nil {
		n.bucket.Close()
		n.cat.Close()
		n.wal.Close()
		return nil, err
	}
	return n, nil
}

// ListenError is Start's error when a listener cannot bind: Key is its
// setting as written in the edge config (mqtt.addr, mqtt.ws_addr,
// kafka.addr, http_addr), which a caller with flags may name instead.
type ListenError struct {
	Key, Addr string
	Err       error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("%s %s: %v (is another process listening there? stop it, or set %s to another address)", e.Key, e.Addr, e.Err, e.Key)
}

func (e *ListenError) Unwrap() error { return e.Err }

// Start opens the listeners and starts the uplink. After an error the
// node is not running: Close releases what it opened without a final
// commit (what is in the WAL stays for the next start), as it does for a
// node never started.
func (n *Node) Start(ctx context.Context) error {
	err := n.start()
	if err != nil {
		n.startFailed = true
	}
	return err
}

func (n *Node) start() error {
	n.started = time.Now()
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.up.Run(runCtx)
	}()
	if n.maint != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.maint.Run(runCtx)
		}()
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.publishRoutes(runCtx)
	}()
	if err := n.mqtt.Start(); err != nil {
		if le, ok := errors.AsType[*mqtt.ListenError](err); ok {
			key := map[string]string{mqtt.ListenerTCP: "mqtt.addr", mqtt.ListenerWS: "mqtt.ws_addr"}[le.Listener]
			return &ListenError{Key: key, Addr: le.Addr, Err: le.Err}
		}
		return fmt.Errorf("start mqtt: %w", err)
	}
	if n.kafka != nil {
		if err := n.kafka.Start(); err != nil {
			if _, ok := errors.AsType[*net.OpError](err); ok {
				return &ListenError{Key: "kafka.addr", Addr: n.cfg.Kafka.Addr, Err: err}
			}
			return fmt.Errorf("start kafka: %w", err)
		}
	}
	if n.cfg.HTTPAddr != "" {
		ln, err := listen.Listen(n.cfg.HTTPAddr, listen.Config{Name: "http", HandshakeTimeout: -1, Logger: n.log,
			TLS: n.tls.ServerH2("http"), LoopbackHosts: n.openLoopback(n.cfg.HTTPAddr)})
		if err != nil {
			return &ListenError{Key: "http_addr", Addr: n.cfg.HTTPAddr, Err: err}
		}
		n.httpLn = ln
		n.http = listen.NewHTTPServer(ln, n.handler())
		n.http.Protocols = httpProtocols()
		n.log.Info("listening", "listener", "http", "addr", ln.Addr().String(), "tls", n.TLS("http"),
			"endpoints", "/ (console) /console/api /status /cluster /metrics /healthz /readyz")
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("http server", "err", err)
			}
		}()
	}
	if err := n.startCluster(); err != nil {
		return err
	}
	if n.console != nil {
		// Sampled from here on (every part is set): the history behind
		// the console's charts.
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.console.Run(runCtx)
		}()
	}
	return nil
}

// AddCollector adds c to the node's /metrics; call it before Start. A
// process that runs a cloud server next to the node (tributary dev) adds
// the cloud server's metrics this way.
func (n *Node) AddCollector(c prometheus.Collector) { n.collectors = append(n.collectors, c) }

// MQTTAddr is the bound address of the MQTT TCP listener.
func (n *Node) MQTTAddr() string { return n.mqtt.Addrs()[mqtt.ListenerTCP] }

// MQTTWSAddr is the bound address of the MQTT WebSocket listener ("" when
// off).
func (n *Node) MQTTWSAddr() string { return n.mqtt.Addrs()[mqtt.ListenerWS] }

// KafkaAddr is the bound address of the Kafka listener ("" when off).
func (n *Node) KafkaAddr() string {
	if n.kafka == nil {
		return ""
	}
	return n.kafka.Addr()
}

// HTTPAddr is the bound address of the HTTP listener.
func (n *Node) HTTPAddr() string {
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// TLS tells whether the named listener (mqtt, mqtt_ws, kafka, http, peer)
// serves TLS.
func (n *Node) TLS(listener string) bool { return n.tls.Server(listener) != nil }

// openLoopback tells whether an HTTP listener at addr answers only
// requests for a loopback Host: when the node lets anyone in and addr is
// loopback (tributary dev), so that DNS rebinding cannot reach it.
func (n *Node) openLoopback(addr string) bool { return n.auth.Open() && config.Loopback(addr) }

// ListenerTLS is the node's TLS (nil without security.tls), for the
// listeners and dials composed around it (peer links).
func (n *Node) ListenerTLS() *listen.TLS { return n.tls }

// Auth is the node's identities and ACL (security section).
func (n *Node) Auth() *auth.Authority { return n.auth }

// ReloadTLS reads the certificates, keys and CAs again (SIGHUP); on an
// error the old ones stay (see listen.TLS.Reload).
func (n *Node) ReloadTLS() error { return n.tls.Reload() }

// ReloadAuth reads the password file and the JWT keys again (SIGHUP); on
// an error the old ones stay (see auth.Authority.Reload).
func (n *Node) ReloadAuth() error { return n.auth.Reload() }

// catalogTLS is the client TLS of an https:// REST catalog whose
// certificate is verified against caFile (nil without one: the system's
// roots).
func catalogTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("catalog.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("catalog.ca_file %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// Catalog is the node's catalog.
func (n *Node) Catalog() *tables.Catalog { return n.cat }

// Maintainer is the node's table maintainer (nil when maintenance is off);
// its Stats are per-table figures for metrics.
func (n *Node) Maintainer() *tables.Maintainer { return n.maint }

// WAL is the node's write-ahead log.
func (n *Node) WAL() *wal.WAL { return n.wal }

// Config returns the node's effective configuration.
func (n *Node) Config() Config { return n.cfg }

// Close stops accepting, makes a final commit and closes everything.
func (n *Node) Close(ctx context.Context) error {
	var errs []error
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ShutdownTimeout)
	defer cancel()
	n.mqtt.StopCluster() // before the peer links close under it
	leaveCtx, leaveCancel := context.WithTimeout(ctx, 5*time.Second)
	if err := n.closeCluster(leaveCtx); err != nil {
		n.log.Warn("cluster leave", "err", err)
	}
	leaveCancel()
	if err := n.closeReplicas(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close replicas: %w", err))
	}
	if n.peer != nil {
		if err := n.peer.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close peer: %w", err))
		}
	}
	if err := n.mqtt.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close mqtt: %w", err))
	}
	if n.kafka != nil {
		if err := n.kafka.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close kafka: %w", err))
		}
	}
	if n.cancel != nil {
		n.cancel()
	}
	if n.http != nil {
		n.http.Shutdown(ctx)
	}
	n.wg.Wait()
	if n.startFailed || n.started.IsZero() {
		n.log.Info("not started: no final commit; what the WAL holds stays for the next start")
	} else if err := n.up.SyncAll(ctx); err != nil {
		n.log.Warn("final commit incomplete; records stay in the WAL for the next start", "err", err)
	} else {
		n.log.Info("final commit done")
	}
	errs = append(errs, n.wal.Close(), n.bucket.Close(), n.cat.Close())
	return errors.Join(errs...)
}
