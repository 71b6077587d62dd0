// Package cloud composes the cloud server from its parts: the Iceberg REST
// catalog over the catalog database (with /healthz, /readyz and /metrics
// next to it), the Kafka consume server, the Pulsar consume server, the
// table maintainer, and the one tables.Reader the consume servers share.
// `tributary cloud` runs it on its own catalog (Open); `tributary dev`, and
// an edge config that sets catalog_addr / cloud_kafka_addr /
// cloud_pulsar_addr, run it next to an edge node over the node's catalog
// (OpenOn). It is wiring only: the protocols live in tables/rest,
// kafka/consume and pulsar.
//
// # Invariants
//
//   - The server is stateless: committed group offsets, durable Pulsar
//     cursors and MQTT sessions live in the state database (state.uri: by
//     default the catalog's SQL database; its own SQLite or Postgres when
//     the catalog is a REST catalog that is not ours), table data in the
//     warehouse, so any number of cloud servers sharing that database may
//     serve the same tables and a restart resumes every consumer from there.
//   - The Kafka and Pulsar servers read through one tables.Reader, so a
//     row group decoded for one protocol is cached for the other, and both
//     serve only rows below a partition's committed mark.
//   - Open either returns a server with every configured listener bound
//     or undoes what it opened and returns the error.
//   - Close stops the listeners (the catalog first, then Pulsar, then
//     Kafka), then the maintainer, and closes the catalog only if Open
//     opened it.
//
// # Outline
//
// Open opens the catalog and calls OpenOn; OpenOn binds the REST catalog,
// then starts the Kafka and Pulsar servers (each may be off) and, when enabled,
// the maintainer loop. Addresses of the bound listeners are available from
// CatalogAddr, KafkaAddr and PulsarAddr (useful with port 0). With
// security.tls every listener serves TLS (listen.TLS; ReloadTLS on SIGHUP).
package cloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/cloudmqtt"
	"github.com/tributary-io/tributary/cloudwrite"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/federation"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/consume"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
	"github.com/tributary-io/tributary/tables/rest"
	"github.com/tributary-io/tributary/uplink"
)

// Server is one cloud server.
type Server struct {
	cfg    Config
	log    *slog.Logger
	cat    *tables.Catalog
	ownCat bool // Close closes cat
	reader *tables.Reader
	reg    *prometheus.Registry
	tls    *listen.TLS     // nil without security.tls
	auth   *auth.Authority // identities and the ACL of every listener

	rest   *rest.Server           // nil when Catalog.Addr is ""
	con    *cloudConsole          // the operator's console on the catalog listener
	kafka  *consume.Server        // nil when Kafka.Addr is ""
	pulsar *pulsar.Server         // nil when Pulsar.Addr is ""
	mqtt   *cloudmqtt.Server      // nil when MQTT.Addr and MQTT.WSAddr are ""
	http   *httpServer            // nil when HTTP.Addr is ""
	write  *writePath             // nil unless cloud_produce.enabled
	cwm    *cloudwrite.Metrics    // the write path's, exposed (at zero) when it is off too
	maint  *tables.Maintainer     // nil when maintenance is off
	dbkt   *uplink.BlobBucket     // the warehouse bucket of the maintainer's Delta logs (nil on file://)
	fed    *federation.Federation // nil without federation:
	cancel context.CancelFunc     // stops the maintainer
	wg     sync.WaitGroup         // the maintainer loop
	closed bool
}

// Open opens the catalog of cfg and serves it (see OpenOn). cfg must have
// its defaults applied (ParseConfig, LoadConfig and ApplyDefaults do).
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The cloud reads through iceberg-go's FileIO; opening the uplink's
	// bucket once turns a missing bucket or refused credentials into a
	// start-up error naming the key.
	if !strings.HasPrefix(cfg.Catalog.Warehouse, "file://") && cfg.Catalog.Warehouse != "" {
		b, err := uplink.OpenBucket(ctx, cfg.Catalog.Warehouse, cfg.Storage.Stores())
		if err != nil {
			return nil, err
		}
		b.Close()
	}
	cat, err := OpenCatalog(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	s, err := open(cat, cfg, log)
	if err != nil {
		cat.Close()
		return nil, err
	}
	s.ownCat = true
	return s, nil
}

// OpenCatalog opens the catalog of cfg; a REST catalog that is not ours
// is asked first for what the server needs of it (tables.CheckREST), so
// that a wrong URI, credential, token or warehouse stops the start naming
// its key.
func OpenCatalog(ctx context.Context, cfg Config) (*tables.Catalog, error) {
	if tables.External(cfg.Catalog.URI) {
		return tables.CheckREST(ctx, cfg.CatalogConfig(), CatalogKeys)
	}
	return tables.Open(ctx, cfg.CatalogConfig())
}

// OpenOn serves cat, a catalog the caller has open and closes after
// Close: `tributary dev` shares its edge node's. cfg.State.URI names the
// SQL database group offsets and cursors are stored in (by default
// cat's own); its Name and Warehouse should be cat's.
func OpenOn(cat *tables.Catalog, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return open(cat, cfg, log)
}

func open(cat *tables.Catalog, cfg Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	a, err := auth.Open(cfg.Security.Auth(), log)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, cat: cat, reg: prometheus.NewRegistry(), auth: a, cwm: cloudwrite.NewMetrics()}
	if s.tls, err = listen.NewTLS(cfg.Security.TLS, log.With("component", "cloud-tls")); err != nil {
		return nil, err
	}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.reg.MustRegister(a.Collectors()...)
	s.reg.MustRegister(s.cwm.Collectors()...)
	// The consume servers share one table reader and its caches.
	s.reader = tables.NewReader(cat, tables.ReaderConfig{})
	if err := s.listen(); err != nil {
		s.closeListeners(context.Background())
		return nil, err
	}
	if *cfg.Maintenance.Enabled {
		// Tables with a Delta log are maintained in both logs: the
		// maintainer needs the warehouse's store (put-if-absent) for it.
		var dst delta.Store
		if w := cfg.Catalog.Warehouse; w != "" && !strings.HasPrefix(w, "file://") {
			octx, ocancel := context.WithTimeout(context.Background(), 30*time.Second)
			b, err := uplink.OpenBucket(octx, w, cfg.Storage.Stores())
			ocancel()
			if err != nil {
				s.closeListeners(context.Background())
				return nil, err
			}
			s.dbkt, dst = b, b.DeltaStore()
		}
		s.maint = tables.NewMaintainer(cat, tables.MaintainerConfig{Interval: cfg.Maintenance.Interval,
			Policy: cfg.Maintenance.Policy(), DeltaStore: dst, Logger: log})
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.maint.Run(ctx)
		}()
	}
	if len(cfg.Federation) > 0 {
		// Mirrors in the organisation's catalogs: loops of their own, which
		// nothing else waits for.
		s.fed = federation.New(federation.Config{Source: cat, Targets: cfg.FederationTargets(), Logger: log})
		s.reg.MustRegister(s.fed.Collectors()...)
		if s.con != nil {
			s.con.fed.Store(s.fed)
		}
		s.fed.Start()
	}
	return s, nil
}

// listen binds every configured listener; on an error the caller closes
// what was bound.
func (s *Server) listen() error {
	cfg := s.cfg
	if a := cfg.Catalog.Addr; a != "" {
		var h http.Handler
		if tables.External(cfg.Catalog.URI) {
			h = elsewhere(cfg.Catalog.URI) // engines and edges use that catalog itself
		} else {
			h = rest.NewHandler(s.cat.Iceberg(), rest.Options{Warehouse: cfg.Catalog.Warehouse, Token: cfg.Catalog.Token,
				NodeToken: cfg.Catalog.NodeToken, Auth: s.auth, Logger: s.log.With("component", "rest-catalog"),
				Defaults: cfg.Storage.EngineProperties(cfg.Catalog.Warehouse)})
		}
		s.con = newCloudConsole(s.cat)
		rs, err := rest.Listen(a, rest.RateLimited(h, withProbes(h, s.cat, s.reg, s.auth, s.con)),
			listen.Config{Logger: s.log, TLS: s.tls.Server("rest"), LoopbackHosts: s.openLoopback(a)})
		if err != nil {
			return fmt.Errorf("listen catalog %s: %w", a, err)
		}
		s.rest = rs
		s.con.addr.Store(rs.Addr())
		s.log.Info("listening", "listener", "iceberg-rest-catalog", "addr", rs.Addr(), "uri", rs.URL())
	}
	if cfg.Produce.Enabled {
		wp, err := s.openWritePath(context.Background())
		if err != nil {
			return fmt.Errorf("cloud produce: %w", err)
		}
		s.write = wp
	}
	if a := *cfg.Kafka.Addr; a != "" {
		ccfg := consume.Config{
			Config:    s.kafkaConfig(),
			Peers:     cfg.Kafka.Peers,
			MaxGroups: cfg.Kafka.MaxGroups, MaxGroupMembers: cfg.Kafka.MaxGroupMembers, MaxGroupOffsets: cfg.Kafka.MaxGroupOffsets,
			OffsetsRetention: cfg.Kafka.OffsetsRetention,
			OffsetsDB:        cfg.State.URI,
			Reader:           s.reader,
			BatchCacheBytes:  int64(cfg.Kafka.BatchCacheBytes),
		}
		if s.write != nil {
			ccfg.Producer, ccfg.Tail = s.write.kafka, s.write.tail
		}
		ks, err := consume.NewServer(ccfg, s.cat)
		if err != nil {
			return fmt.Errorf("cloud kafka: %w", err)
		}
		if err := ks.Start(); err != nil {
			ks.Close(context.Background())
			return fmt.Errorf("start cloud kafka: %w", err)
		}
		s.kafka = ks
		s.reg.MustRegister(ks.Collectors()...)
		if s.con != nil {
			s.con.ks.Store(ks)
		}
	}
	if a := *cfg.Pulsar.Addr; a != "" {
		var produce pulsar.ProduceBackend
		if s.write != nil {
			produce = s.write.pulsar
		}
		ps, err := pulsar.NewServer(pulsar.Config{Addr: a, AdvertisedAddr: cfg.Pulsar.AdvertisedAddr, Produce: produce,
			Peers: cfg.Pulsar.Peers, Catalog: cfg.Catalog.Name, CursorsDB: cfg.State.URI, Auth: s.auth, Logger: s.log,
			Limits:              listen.Config{TLS: s.tls.Server("pulsar")},
			MaxConsumersPerConn: cfg.Pulsar.MaxConsumersPerConnection, MaxSubscriptions: cfg.Pulsar.MaxSubscriptions,
			MaxUnackedPerConsumer: cfg.Pulsar.MaxUnackedPerConsumer, MaxAckedRanges: cfg.Pulsar.MaxAckedRanges,
			MaxConnectionBacklog: int(cfg.Pulsar.MaxConnectionBacklog), MessageCacheBytes: int64(cfg.Pulsar.MessageCacheBytes)}, s.reader)
		if err != nil {
			return fmt.Errorf("cloud pulsar: %w", err)
		}
		if err := ps.Listen(); err != nil {
			ps.Close(context.Background())
			return fmt.Errorf("start cloud pulsar: %w", err)
		}
		s.pulsar = ps
		s.reg.MustRegister(ps.Collectors()...)
		if s.con != nil {
			s.con.ps.Store(ps)
		}
	}
	if err := s.listenMQTT(); err != nil {
		return err
	}
	// After Pulsar: gRPC Subscribe serves the Pulsar server's subscriptions.
	return s.listenHTTP()
}

// kafkaConfig is the Kafka listener's configuration.
func (s *Server) kafkaConfig() kafka.Config {
	cfg := s.cfg
	return kafka.Config{Addr: *cfg.Kafka.Addr, Listener: cfg.Kafka.Listener, ClusterID: cfg.Catalog.Name, Auth: s.auth, Logger: s.log,
		Limits: listen.Config{TLS: s.tls.Server("kafka")}}
}

// elsewhere answers the Iceberg REST routes of a server whose catalog is
// another REST catalog: 404 with an Iceberg error naming it, so that an
// engine pointed here is told where the tables are.
func elsewhere(uri string) http.Handler {
	body := fmt.Sprintf(`{"error":{"message":%q,"type":"NoSuchCatalogException","code":404}}`,
		"this Tributary cloud server serves the tables of the Iceberg REST catalog at "+tables.Redact(uri)+": point engines there")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(body))
	})
}

// CatalogAddr is the bound address of the REST catalog ("" when off).
func (s *Server) CatalogAddr() string {
	if s.rest == nil {
		return ""
	}
	return s.rest.Addr()
}

// CatalogURL is the URI of the REST catalog (http:// or, over TLS,
// https://; "" when off).
func (s *Server) CatalogURL() string {
	if s.rest == nil {
		return ""
	}
	return s.rest.URL()
}

// TLS tells whether the named listener (rest, kafka, pulsar) serves TLS.
func (s *Server) TLS(listener string) bool { return s.tls.Server(listener) != nil }

// openLoopback tells whether an HTTP listener at addr answers only
// requests for a loopback Host: when the server lets anyone in and addr
// is loopback (tributary dev), so that DNS rebinding cannot reach it.
func (s *Server) openLoopback(addr string) bool { return s.auth.Open() && config.Loopback(addr) }

// ReloadTLS reads the certificates, keys and CAs again (SIGHUP); on an
// error the old ones stay (see listen.TLS.Reload).
func (s *Server) ReloadTLS() error { return s.tls.Reload() }

// ReloadAuth reads the password file and the JWT keys again (SIGHUP); on
// an error the old ones stay (see auth.Authority.Reload).
func (s *Server) ReloadAuth() error { return s.auth.Reload() }

// KafkaAddr is the bound address of the Kafka consume server ("" when off).
func (s *Server) KafkaAddr() string {
	if s.kafka == nil {
		return ""
	}
	return s.kafka.Addr()
}

// PulsarAddr is the bound address of the Pulsar consume server ("" when off).
func (s *Server) PulsarAddr() string {
	if s.pulsar == nil {
		return ""
	}
	return s.pulsar.Addr()
}

// Config is the server's effective configuration.
func (s *Server) Config() Config { return s.cfg }

// Collectors are the server's own metrics (consumer-group lag, the Kafka
// caps), for a
// process that serves /metrics elsewhere too (an edge node's HTTP
// endpoint in `tributary dev`). The catalog listener's /metrics has them.
func (s *Server) Collectors() []prometheus.Collector {
	out := s.cwm.Collectors()
	if s.kafka != nil {
		out = append(out, s.kafka.Collectors()...)
	}
	if s.pulsar != nil {
		out = append(out, s.pulsar.Collectors()...)
	}
	if s.mqtt != nil {
		out = append(out, s.mqtt.Collectors()...)
	}
	if s.http != nil {
		out = append(out, s.http.reader.Collectors()...)
		out = append(out, s.http.grpc.Collectors()...)
	}
	if s.fed != nil {
		out = append(out, s.fed.Collectors()...)
	}
	return out
}

// Done reports a failure of the catalog listener after Open (nil channel,
// never ready, when it is off).
func (s *Server) Done() <-chan error {
	if s.rest == nil {
		return nil
	}
	return s.rest.Done()
}

// Federation is the state of the mirrors in external catalogs (nil
// without federation:).
func (s *Server) Federation() []federation.CatalogStatus {
	if s.fed == nil {
		return nil
	}
	return s.fed.Status()
}

// Close stops the listeners, the maintainer and the federation and, if Open opened it,
// closes the catalog. ctx bounds the graceful part.
func (s *Server) Close(ctx context.Context) error {
	if s.closed {
		return nil
	}
	s.closed = true
	errs := s.closeListeners(ctx)
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.fed != nil {
		s.fed.Close()
	}
	if s.dbkt != nil {
		s.dbkt.Close()
	}
	if s.ownCat {
		errs = errors.Join(errs, s.cat.Close())
	}
	return errs
}

func (s *Server) closeListeners(ctx context.Context) error {
	errs := []error{s.closeMQTT(ctx)}
	if s.rest != nil {
		if err := s.rest.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close catalog listener: %w", err))
		}
	}
	if s.http != nil {
		if err := s.http.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close cloud http: %w", err))
		}
	}
	if s.pulsar != nil {
		if err := s.pulsar.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close cloud pulsar: %w", err))
		}
	}
	if s.kafka != nil {
		if err := s.kafka.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close cloud kafka: %w", err))
		}
	}
	if s.write != nil {
		s.write.close()
		s.write = nil
	}
	return errors.Join(errs...)
}
