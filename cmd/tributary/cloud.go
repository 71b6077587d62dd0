package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/node"
	"github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/rest"
)

// cmdCloud runs the cloud server: the Iceberg REST catalog over the
// catalog database and the Kafka consume server reading the tables
// (committed group offsets in the same database) and the Pulsar consume
// server (durable cursors in the same database), sharing one table reader.
func cmdCloud(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML config file (role: cloud; see deploy/cloud.yaml); flags given on the command line override it")
	catAddr := fs.String("catalog-addr", "127.0.0.1:8181", "Iceberg REST catalog listener (clients use http://ADDR)")
	kafkaAddr := fs.String("kafka-addr", "127.0.0.1:19092", "Kafka consume listener (\"\" = off)")
	kafkaAdv := fs.String("kafka-advertised-addr", "", "host:port announced to Kafka clients (default: the listener's)")
	kafkaPeers := fs.String("kafka-peers", "", "comma-separated advertised host:port of every cloud server, for group coordinator placement (default: this one alone)")
	pulsarAddr := fs.String("pulsar-addr", pulsar.DefaultAddr, "Pulsar consume listener (\"\" = off)")
	pulsarAdv := fs.String("pulsar-advertised-addr", "", "host:port LOOKUP answers with (default: the listener's)")
	pulsarPeers := fs.String("pulsar-peers", "", "comma-separated advertised Pulsar host:port of every cloud server; LOOKUP spreads topic partitions over them (default: this one alone)")
	data := fs.String("data", "./data", "data directory: SQLite catalog (catalog.db) and warehouse (warehouse/)")
	catURI := fs.String("catalog", "", "backing catalog URI: sqlite:///path or postgres://... (default sqlite://DIR/catalog.db)")
	warehouse := fs.String("warehouse", "", "warehouse URL (default file://DIR/warehouse)")
	catName := fs.String("catalog-name", "tributary", "catalog name")
	token := fs.String("token", os.Getenv("TRIBUTARY_CATALOG_TOKEN"), "require this bearer token (default $TRIBUTARY_CATALOG_TOKEN; empty = no auth)")
	maintain := fs.Bool("maintenance", true, "run table maintenance (compaction, manifest merging, snapshot expiry, orphan cleanup)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tributary cloud: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "tributary cloud:", err)
		return 2
	}
	var cfg node.CloudConfig
	if *cfgPath != "" {
		if cfg, err = node.LoadCloudConfig(*cfgPath); err != nil {
			fmt.Fprintln(stderr, "tributary cloud:", err)
			return 2
		}
	}
	// Flags given on the command line win over the file; without a file
	// every flag (default or not) applies.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	use := func(name string) bool { return *cfgPath == "" || set[name] }
	if use("data") {
		abs, err := filepath.Abs(*data)
		if err != nil {
			fmt.Fprintln(stderr, "tributary cloud:", err)
			return 2
		}
		if cfg.DataDir != abs && *cfgPath != "" {
			cfg.Catalog.URI, cfg.Catalog.Warehouse = "", "" // re-derive from the new data dir
		}
		cfg.DataDir = abs
	}
	if use("catalog-addr") {
		cfg.Catalog.Addr = *catAddr
	}
	if use("kafka-addr") {
		cfg.Kafka.Addr = kafkaAddr
	}
	if use("kafka-advertised-addr") {
		cfg.Kafka.AdvertisedAddr = *kafkaAdv
	}
	if use("kafka-peers") {
		cfg.Kafka.Peers = splitList(*kafkaPeers)
	}
	if use("pulsar-addr") {
		cfg.Pulsar.Addr = pulsarAddr
	}
	if use("pulsar-advertised-addr") {
		cfg.Pulsar.AdvertisedAddr = *pulsarAdv
	}
	if use("pulsar-peers") {
		cfg.Pulsar.Peers = splitList(*pulsarPeers)
	}
	if use("catalog") && *catURI != "" {
		cfg.Catalog.URI = *catURI
	}
	if use("warehouse") && *warehouse != "" {
		cfg.Catalog.Warehouse = *warehouse
	}
	if use("catalog-name") {
		cfg.Catalog.Name = *catName
	}
	if use("token") && *token != "" {
		cfg.Catalog.Token = *token
	}
	if use("maintenance") {
		cfg.Maintenance.Enabled = maintain
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "tributary cloud:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cat, err := tables.Open(ctx, tables.Config{Name: cfg.Catalog.Name, URI: cfg.Catalog.URI, Warehouse: cfg.Catalog.Warehouse,
		Properties: cfg.Storage.CatalogProperties(cfg.Catalog.Warehouse)})
	if err != nil {
		log.Error("open catalog", "err", err)
		return 1
	}
	defer cat.Close()
	h := rest.NewHandler(cat.Iceberg(), rest.Options{Warehouse: cfg.Catalog.Warehouse, Token: cfg.Catalog.Token, Logger: log})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	con := newCloudConsole(cat) // the operator's console at GET /
	srv, err := rest.Listen(cfg.Catalog.Addr, con.handler(withProbes(h, cat, reg)))
	if err != nil {
		log.Error("listen", "addr", cfg.Catalog.Addr, "err", err)
		return 1
	}
	con.addr.Store(srv.Addr())
	// The consume servers share one table reader and its caches.
	reader := tables.NewReader(cat, tables.ReaderConfig{})
	var ks *kafka.CloudServer
	if *cfg.Kafka.Addr != "" {
		ks, err = kafka.NewCloudServer(kafka.CloudConfig{
			Config:    kafka.Config{Addr: *cfg.Kafka.Addr, AdvertisedAddr: cfg.Kafka.AdvertisedAddr, ClusterID: cfg.Catalog.Name, Logger: log},
			Peers:     cfg.Kafka.Peers,
			OffsetsDB: cfg.Catalog.URI,
			Reader:    reader,
		}, cat)
		if err == nil {
			err = ks.Start()
		}
		if err == nil {
			reg.MustRegister(ks.LagCollector())
			con.ks.Store(ks)
		}
		if err != nil {
			log.Error("kafka", "addr", *cfg.Kafka.Addr, "err", err)
			srv.Shutdown(context.Background())
			return 1
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			ks.Close(sctx)
		}()
	}
	var ps *pulsar.Server
	if *cfg.Pulsar.Addr != "" {
		ps, err = pulsar.NewServer(pulsar.Config{Addr: *cfg.Pulsar.Addr, AdvertisedAddr: cfg.Pulsar.AdvertisedAddr,
			Peers: cfg.Pulsar.Peers, Catalog: cfg.Catalog.Name, CursorsDB: cfg.Catalog.URI, Logger: log}, reader)
		if err == nil {
			err = ps.Listen()
		}
		if err == nil {
			con.ps.Store(ps)
		}
		if err != nil {
			log.Error("pulsar", "addr", *cfg.Pulsar.Addr, "err", err)
			srv.Shutdown(context.Background())
			return 1
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			ps.Close(sctx)
		}()
	}
	if *cfg.Maintenance.Enabled {
		m := tables.NewMaintainer(cat, tables.MaintainerConfig{Interval: cfg.Maintenance.Interval,
			Policy: cfg.Maintenance.Policy(), Logger: log})
		mctx, mcancel := context.WithCancel(context.Background())
		mdone := make(chan struct{})
		go func() {
			defer close(mdone)
			m.Run(mctx)
		}()
		defer func() {
			mcancel()
			<-mdone
		}()
	}
	kafkaBound := ""
	if ks != nil {
		kafkaBound = ks.Addr()
	}
	pulsarBound := ""
	if ps != nil {
		pulsarBound = ps.Addr()
	}
	conCtx, conStop := context.WithCancel(ctx)
	defer conStop()
	go con.Run(conCtx)
	log.Info("ready", "catalog", srv.Addr(), "kafka", kafkaBound, "pulsar", pulsarBound, "backing", redactURI(cfg.Catalog.URI), "warehouse", cfg.Catalog.Warehouse,
		"auth", cfg.Catalog.Token != "", "maintenance", *cfg.Maintenance.Enabled)
	code := 0
	select {
	case <-ctx.Done():
	case err := <-srv.Done():
		log.Error("catalog server stopped", "err", err)
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	log.Info("stopped")
	return code
}

// withProbes serves /healthz (the process answers), /readyz (the backing
// catalog answers a namespace listing) and /metrics (consumer-group lag,
// process figures) next to the REST catalog h, without authentication, for
// load balancers, Kubernetes probes and Prometheus.
func withProbes(h http.Handler, cat *tables.Catalog, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if _, err := cat.Iceberg().ListNamespaces(ctx, nil); err != nil {
			http.Error(w, "backing catalog unavailable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("/", h)
	return mux
}

// redactURI hides a password in a catalog URI for logs.
func redactURI(uri string) string { return tables.Redact(uri) }

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
