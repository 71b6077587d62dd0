package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tributary-io/tributary/cloud"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
)

// cmdCloud runs the cloud server (package cloud): the Iceberg REST catalog over the
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
	mqttAddr := fs.String("mqtt-addr", "", "cloud MQTT listener: MQTT 3.1.1/5 subscribers read the tables ($stream/<namespace.stream>/<filter>; \"\" = off)")
	mqttWSAddr := fs.String("mqtt-ws-addr", "", "cloud MQTT-over-WebSocket listener (\"\" = off)")
	httpAddr := fs.String("http-addr", "", "HTTP read API listener, e.g. 127.0.0.1:18080: long poll, Server-Sent Events, group offsets, /openapi.yaml (default \"\": off)")
	data := fs.String("data", "./data", "data directory: SQLite catalog (catalog.db) and warehouse (warehouse/)")
	catURI := fs.String("catalog", "", "backing catalog URI: sqlite:///path or postgres://... (default sqlite://DIR/catalog.db)")
	warehouse := fs.String("warehouse", "", "warehouse URL (default file://DIR/warehouse)")
	catName := fs.String("catalog-name", "tributary", "catalog name")
	token := fs.String("token", os.Getenv("TRIBUTARY_CATALOG_TOKEN"), "require this bearer token (default $TRIBUTARY_CATALOG_TOKEN; empty = no auth)")
	nodeToken := fs.String("node-token", os.Getenv("TRIBUTARY_NODE_TOKEN"), "the bearer token edge nodes commit with; only it may write tables' tributary.* properties (default $TRIBUTARY_NODE_TOKEN; empty = edge nodes cannot commit through this catalog)")
	maintain := fs.Bool("maintenance", true, "run table maintenance (compaction, manifest merging, snapshot expiry, orphan cleanup)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	securityFile := fs.String("security", "", "YAML file with the keys of the security section (TLS, authentication, ACL); replaces the config file's section")
	readyFile := fs.String("ready-file", "", "once every listener is bound, write their addresses to this file as a JSON object (atomically)")
	check := fs.Bool("check", false, "build the configuration from the flags, --config and --security as a start would, load its TLS, password and JWT files, print the effective settings and exit (0: it would start)")
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
	var cfg cloud.Config
	if *cfgPath != "" {
		if cfg, err = cloud.LoadConfig(*cfgPath); err != nil {
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
			cfg.Catalog.URI, cfg.Catalog.Warehouse, cfg.State.URI = "", "", "" // re-derive from the new data dir
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
	if use("http-addr") {
		cfg.HTTP.Addr = httpAddr
	}
	if use("pulsar-advertised-addr") {
		cfg.Pulsar.AdvertisedAddr = *pulsarAdv
	}
	if use("pulsar-peers") {
		cfg.Pulsar.Peers = splitList(*pulsarPeers)
	}
	if use("mqtt-addr") {
		cfg.MQTT.Addr = *mqttAddr
	}
	if use("mqtt-ws-addr") {
		cfg.MQTT.WSAddr = *mqttWSAddr
	}
	if use("catalog") && *catURI != "" {
		if cfg.State.URI == cfg.Catalog.URI {
			cfg.State.URI = "" // it was the default: follow the new catalog
		}
		cfg.Catalog.URI = *catURI
	}
	if use("warehouse") && *warehouse != "" {
		cfg.Catalog.Warehouse = *warehouse
	}
	if use("catalog-name") {
		cfg.Catalog.Name = *catName
	}
	if use("node-token") && *nodeToken != "" {
		cfg.Catalog.NodeToken = *nodeToken
	}
	if use("token") && *token != "" {
		cfg.Catalog.Token = *token
	}
	if use("maintenance") {
		cfg.Maintenance.Enabled = maintain
	}
	if *securityFile != "" {
		cfg.Security = config.Security{}
		if err := readSecurity(*securityFile, &cfg.Security); err != nil {
			fmt.Fprintln(stderr, "tributary cloud:", err)
			return 2
		}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "tributary cloud:", err)
		return 2
	}
	if *check {
		if err := loadSecurityFiles(cfg.Security); err != nil {
			fmt.Fprintln(stderr, "tributary cloud:", err)
			return 1
		}
		printCloudConfig(stdout, cfg)
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := cloud.Open(ctx, cfg, log)
	if err != nil {
		log.Error("open", "err", err)
		return 1
	}
	onSIGHUP(ctx, log, srv.ReloadTLS, srv.ReloadAuth)
	code := 0
	// The ready file before the ready line: whoever saw the line finds the file.
	if err := writeReadyFile(*readyFile, map[string]string{"catalog": srv.CatalogAddr(), "kafka": srv.KafkaAddr(), "pulsar": srv.PulsarAddr(),
		"mqtt": srv.MQTTAddr(), "mqtt_ws": srv.MQTTWSAddr(), "http": srv.HTTPAddr()}); err != nil {
		log.Error("ready file", "err", err)
		code = 1
		stop()
	}
	log.Info("ready", "catalog", srv.CatalogAddr(), "uri", srv.CatalogURL(), "tls", tlsListeners(cfg.Security.TLS, "rest", "kafka", "pulsar", "mqtt", "mqtt_ws"), "kafka", srv.KafkaAddr(), "pulsar", srv.PulsarAddr(), "mqtt", srv.MQTTAddr(), "mqtt_ws", srv.MQTTWSAddr(), "http", srv.HTTPAddr(), "backing", tables.Redact(cfg.Catalog.URI), "warehouse", cfg.Catalog.Warehouse,
		"auth", cfg.Catalog.Token != "", "maintenance", *cfg.Maintenance.Enabled)
	select {
	case <-ctx.Done():
	case err := <-srv.Done():
		log.Error("catalog server stopped", "err", err)
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Close(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	log.Info("stopped")
	return code
}

// printCloudConfig prints the effective settings of a cloud config
// (`tributary cloud --check`, `tributary config check`), one "key: value"
// a line; secrets are not printed.
func printCloudConfig(w io.Writer, c cloud.Config) {
	fmt.Fprintf(w, "state: %s\n", tables.Redact(c.State.URI))
	fmt.Fprintf(w, "catalog: %s (%s)\nwarehouse: %s\nkafka.peers: %v\nmaintenance: %v every %s\ntls: %s\nauthentication: %v\n",
		tables.Redact(c.Catalog.URI), c.Catalog.Name, tables.Redact(c.Catalog.Warehouse),
		c.Kafka.Peers, *c.Maintenance.Enabled, c.Maintenance.Interval,
		tlsListeners(c.Security.TLS, "rest", "kafka", "pulsar"),
		c.Security.UsersFile != "" || c.Security.JWT.Enabled() || c.Security.TLS.RequireClientCert)
	m, k, h := c.MQTT, c.Kafka, c.HTTP
	printListener(w, "catalog.addr", c.Catalog.Addr, "Iceberg REST catalog, /healthz, /metrics, console")
	printListener(w, "kafka.addr", *k.Addr, "Kafka consumers reading the tables")
	printListener(w, "pulsar.addr", *c.Pulsar.Addr, "Pulsar consumers reading the tables")
	printListener(w, "mqtt.addr", m.Addr, "MQTT subscribers reading the tables")
	printListener(w, "mqtt.ws_addr", m.WSAddr, "MQTT over WebSocket subscribers reading the tables")
	printListener(w, "http.addr", *h.Addr, "HTTP read API: long poll, Server-Sent Events, gRPC")
	fmt.Fprintf(w, "mqtt caps: max_inflight=%d max_subscriptions=%d max_session_expiry=%s write_timeout=%s\n",
		m.MaxInflight, m.MaxSubscriptions, m.MaxSessionExpiry, m.WriteTimeout)
	fmt.Fprintf(w, "kafka caps: max_groups=%d max_group_members=%d max_group_offsets=%d offsets_retention=%s max_inflight_bytes=%d\n",
		k.MaxGroups, k.MaxGroupMembers, k.MaxGroupOffsets, k.OffsetsRetention, k.MaxInflightBytes)
	fmt.Fprintf(w, "http caps: max_record_bytes=%d max_streams=%d idle_timeout=%s write_timeout=%s\n",
		h.MaxRecordBytes, h.MaxStreams, h.IdleTimeout, h.WriteTimeout)
}

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
