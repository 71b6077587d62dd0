package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tributary-io/tributary/cloud"
	"github.com/tributary-io/tributary/config"
	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/node"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/typed"
)

func cmdEdge(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML config file (see deploy/edge.yaml); required")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	readyFile := fs.String("ready-file", "", "once every listener is bound, write their addresses to this file as a JSON object (atomically)")
	var join stringList
	fs.Var(&join, "join", "a peer's gossip host:port to join, added to cluster.join (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, "tributary edge: -config FILE is required")
		return 2
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "tributary edge:", err)
		return 2
	}
	cfg, err := node.LoadConfig(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "tributary edge:", err)
		return 2
	}
	if len(join) > 0 {
		cfg.Cluster.Join = append(cfg.Cluster.Join, join...)
		if err := cfg.Validate(); err != nil {
			fmt.Fprintln(stderr, "tributary edge: -join:", err)
			return 2
		}
	}
	return runNode(cfg, nil, *readyFile, log, stdout, stderr, edgeListenerKeys(cfg))
}

// edgeListenerKeys maps each listener key of an edge config to its address.
func edgeListenerKeys(cfg node.Config) map[string]string {
	return map[string]string{"mqtt.addr": cfg.MQTT.Addr, "mqtt.ws_addr": cfg.MQTT.WSAddr, "kafka.addr": cfg.Kafka.Addr,
		"http_addr": cfg.HTTPAddr, "cluster.gossip_addr": cfg.Cluster.GossipAddr, "cluster.peer_addr": cfg.Cluster.PeerAddr,
		"catalog_addr": cfg.CatalogAddr, "cloud_kafka_addr": cfg.CloudKafkaAddr, "cloud_pulsar_addr": cfg.CloudPulsarAddr,
		"cloud_mqtt_addr": cfg.CloudMQTTAddr, "cloud_mqtt_ws_addr": cfg.CloudMQTTWSAddr, "cloud_http_addr": cfg.CloudHTTPAddr}
}

// containsAddr reports whether msg names addr (not merely a longer port
// that starts with its port).
func containsAddr(msg, addr string) bool {
	for i := strings.Index(msg, addr); i >= 0; i = strings.Index(msg, addr) {
		msg = msg[i+len(addr):]
		if msg == "" || msg[0] < '0' || msg[0] > '9' {
			return true
		}
	}
	return false
}

// startError is what a failed start prints: for an address in use, the
// setting (YAML key or flag, in listeners: setting -> address) that
// moves the listener.
func startError(err error, listeners map[string]string) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err.Error()
	}
	var names []string
	for name, addr := range listeners {
		if addr != "" && !strings.HasSuffix(addr, ":0") && containsAddr(err.Error(), addr) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return err.Error()
	}
	sort.Strings(names)
	if le, ok := errors.AsType[*node.ListenError](err); ok {
		err = le.Err // its hint names the YAML key; this one the setting of this command
	}
	return fmt.Sprintf("%v\n  %s is in use by another process: stop it, or move this listener with %s", err,
		listeners[names[0]], strings.Join(names, " or "))
}

func cmdConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) >= 1 && args[0] == "reference" {
		return cmdConfigReference(args[1:], stdout, stderr)
	}
	// --offline leaves out what needs the network (asking a REST catalog
	// for its config and namespaces): for a file written for a site whose
	// names do not resolve where it is checked (a CI job, a laptop).
	offline := len(args) == 3 && args[0] == "check" && (args[1] == "--offline" || args[1] == "-offline")
	if offline {
		args = []string{args[0], args[2]}
	}
	if len(args) != 2 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: tributary config check [--offline] FILE | tributary config reference [SOURCE_DIR] (the reference of every key, as docs/configuration.md)\n  --offline: do not ask a REST catalog for its config (for a file written for another network)")
		return 2
	}
	raw, err := os.ReadFile(args[1])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if cloud.RoleOf(raw) == "cloud" {
		cc, err := cloud.ParseConfig(raw)
		if err == nil {
			err = loadSecurityFiles(cc.Security) // the files are there and load
		}
		if err == nil && !offline && tables.External(cc.Catalog.URI) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var cat *tables.Catalog
			if cat, err = cloud.OpenCatalog(ctx, cc); err == nil {
				cat.Close()
			}
			cancel()
		}
		if err != nil {
			fmt.Fprintln(stderr, config.InFile(args[1], err))
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok (cloud)\n", args[1])
		printCloudConfig(stdout, cc)
		if !offline {
			checkFederation(stdout, cc)
		}
		return 0
	}
	cfg, err := node.ParseConfig(raw)
	if err == nil {
		err = loadSecurityFiles(cfg.Security)
	}
	if err == nil && cfg.Catalog.CAFile != "" {
		err = loadCAFile("catalog.ca_file", cfg.Catalog.CAFile)
	}
	if err == nil && !offline && tables.External(cfg.Catalog.URI) {
		err = checkRESTCatalog(cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, config.InFile(args[1], err))
		return 1
	}
	if refused := checkSchemaChanges(cfg, stdout); len(refused) > 0 {
		for _, r := range refused {
			fmt.Fprintln(stderr, r)
		}
		fmt.Fprintf(stderr, "%s: %d schema change(s) refused: the tables keep their columns, and payloads that do not fit them go to the dead-letter tables\n", args[1], len(refused))
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (edge)\n", args[1])
	printConfig(stdout, cfg)
	return 0
}

// checkRESTCatalog asks a REST catalog (within 10 s) for what a node
// needs of it, as the start does (node.OpenCatalog).
func checkRESTCatalog(cfg node.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	catCfg, err := cfg.CatalogConfig()
	if err != nil {
		return err
	}
	cat, err := node.OpenCatalog(ctx, catCfg, cfg.Cluster.GossipAddr != "" && cfg.Cluster.ReplicationFactor > 1)
	if err != nil {
		return err
	}
	return cat.Close()
}

// checkSchemaChanges compares each schema-mode stream's schema file with
// its table (when the catalog answers within 10 s), prints the columns a
// node would add and returns the changes it refuses, each naming the
// route, the stream and the column.
func checkSchemaChanges(cfg node.Config, stdout io.Writer) []string {
	pols, err := cfg.Payloads()
	if err != nil {
		return []string{err.Error()} // not reached: ParseConfig validated them
	}
	var streams []string
	for s, p := range pols {
		if p.Mode == typed.Declared {
			streams = append(streams, s)
		}
	}
	if len(streams) == 0 {
		return nil
	}
	sort.Strings(streams)
	if path, ok := strings.CutPrefix(cfg.Catalog.URI, "sqlite://"); ok {
		if _, err := os.Stat(path); err != nil {
			fmt.Fprintf(stdout, "schema files: no catalog at %s yet, nothing to compare\n", path)
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	catCfg, err := cfg.CatalogConfig()
	var cat *tables.Catalog
	if err == nil {
		cat, err = tables.Open(ctx, catCfg)
	}
	if err != nil {
		fmt.Fprintf(stdout, "schema files: not compared with the tables (catalog: %v)\n", err)
		return nil
	}
	defer cat.Close()
	var refused []string
	for _, s := range streams {
		adds, ref, err := cat.SchemaChanges(ctx, s, pols[s].Columns)
		if err != nil {
			fmt.Fprintf(stdout, "schema file of %s: not compared with its table (%v)\n", s, err)
			continue
		}
		for _, a := range adds {
			fmt.Fprintf(stdout, "schema file of %s: adds column %s %s\n", s, strings.Join(a.Path, "."), a.Type)
		}
		for _, r := range ref {
			refused = append(refused, fmt.Sprintf("schema file %s of %s: refused change: %s", pols[s].SchemaFile, s, r))
		}
	}
	return refused
}

func printConfig(w io.Writer, c node.Config) {
	fmt.Fprintf(w, "node_id: %s\ndata_dir: %s\nwal: %s (budget %d bytes)\ncatalog: %s (%s)\nwarehouse: %s\nmqtt: default_stream=%s routes=%d\ncommit_interval: %s\n",
		c.NodeID, c.DataDir, c.WAL.Path, c.WAL.MaxBytes, tables.Redact(c.Catalog.URI), c.Catalog.Name, tables.Redact(c.Catalog.Warehouse),
		c.MQTT.DefaultStream, len(c.MQTT.Routes), c.Uplink.CommitInterval)
	for _, l := range []struct{ key, addr, what string }{
		{"mqtt.addr", c.MQTT.Addr, "MQTT over TCP"},
		{"mqtt.ws_addr", c.MQTT.WSAddr, "MQTT over WebSocket"},
		{"kafka.addr", c.Kafka.Addr, "Kafka produce"},
		{"http_addr", c.HTTPAddr, "health, status, console, /metrics, HTTP and gRPC produce"},
		{"cluster.gossip_addr", c.Cluster.GossipAddr, "gossip with the other nodes of a cluster"},
	} {
		printListener(w, l.key, l.addr, l.what)
	}
}

// printListener prints a listener's effective address and what it
// serves, or that it is off and which key turns it on.
func printListener(w io.Writer, key, addr, what string) {
	if addr == "" {
		fmt.Fprintf(w, "%s: off (%s; set %s to turn it on)\n", key, what, key)
		return
	}
	fmt.Fprintf(w, "%s: %s (%s)\n", key, addr, what)
}

// runNode starts a node (and, when the config asks for catalog_addr,
// cloud_kafka_addr or cloud_pulsar_addr, a cloud server over the node's
// catalog, and optionally a simulated fleet against it), waits for
// SIGINT/SIGTERM, and shuts down with a final commit.
//
// listeners maps the settings that move each listener (YAML keys, or the
// flags of tributary dev) to their addresses, for a start that fails on
// an address in use.
func runNode(cfg node.Config, sim *firmwaresim.Config, readyFile string, log *slog.Logger, stdout, stderr io.Writer, listeners map[string]string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.New(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "tributary:", err)
		return 1
	}
	var cs *cloud.Server
	if ccfg, ok := cloudOf(cfg); ok {
		if cs, err = cloud.OpenOn(n.Catalog(), ccfg, log); err != nil {
			fmt.Fprintln(stderr, "tributary:", startError(err, listeners))
			n.Close(context.Background())
			return 1
		}
		for _, c := range cs.Collectors() {
			n.AddCollector(c)
		}
		n.ShowConsumers(cs) // the node's console shows the consumer groups too
	}
	closeCloud := func() {
		if cs == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := cs.Close(cctx); err != nil {
			log.Warn("close cloud server", "err", err)
		}
	}
	if err := n.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "tributary:", startError(err, listeners))
		closeCloud()
		n.Close(context.Background())
		return 1
	}
	reloads := []func() error{n.ReloadTLS, n.ReloadAuth}
	if cs != nil {
		reloads = append(reloads, cs.ReloadTLS, cs.ReloadAuth)
	}
	onSIGHUP(ctx, log, reloads...)
	simDone := make(chan struct{})
	if sim != nil && sim.Username == "" && sim.Password == "" && !n.Auth().AnonymousAllowed() {
		log.Warn("simulator not started: anonymous MQTT clients are refused; give it a user with --sim-username and --sim-password (or run with --sim-devices 0)")
		sim = nil
	}
	if sim != nil {
		sim.Broker = "tcp://" + n.MQTTAddr()
		if n.TLS("mqtt") {
			sim.Broker, sim.TLS = "tls://"+n.MQTTAddr(), n.ListenerTLS().Self("mqtt")
		}
		sim.Logger = log.With("component", "sim")
		go func() {
			defer close(simDone)
			sum, err := firmwaresim.Run(ctx, *sim)
			if err != nil && ctx.Err() == nil {
				log.Error("simulator stopped", "err", err)
				return
			}
			log.Info("simulator stopped", "sent", sum.Sent, "acked", sum.Acked, "failed", sum.Failed)
		}()
	} else {
		close(simDone)
	}
	addrs := map[string]string{"mqtt": n.MQTTAddr(), "mqtt_ws": n.MQTTWSAddr(), "http": n.HTTPAddr(), "kafka": n.KafkaAddr(),
		"catalog": "", "cloud_kafka": "", "gossip": n.GossipAddr(), "peer": n.PeerAddr(), "pulsar": "", "cloud_http": ""}
	if cs != nil {
		addrs["catalog"], addrs["cloud_kafka"], addrs["pulsar"] = cs.CatalogAddr(), cs.KafkaAddr(), cs.PulsarAddr()
		addrs["cloud_mqtt"], addrs["cloud_mqtt_ws"] = cs.MQTTAddr(), cs.MQTTWSAddr()
		addrs["cloud_http"] = cs.HTTPAddr()
	}
	code := 0
	// The ready file before the ready line: whoever saw the line finds the file.
	if err := writeReadyFile(readyFile, addrs); err != nil {
		log.Error("ready file", "err", err)
		code = 1
		stop()
	}
	log.Info("ready", "node", cfg.NodeID, "mqtt", addrs["mqtt"], "http", addrs["http"], "kafka", addrs["kafka"], "catalog", addrs["catalog"], "cloud_kafka", addrs["cloud_kafka"], "gossip", addrs["gossip"], "peer", addrs["peer"], "pulsar", addrs["pulsar"],
		"tls", tlsListeners(cfg.Security.TLS, servedTLS...))
	<-ctx.Done()
	stop()
	log.Info("shutting down: stop listeners, final commit")
	<-simDone
	closeCloud()
	if err := n.Close(context.Background()); err != nil {
		log.Error("shutdown", "err", err)
		return 1
	}
	log.Info("stopped")
	return code
}

// servedTLS are the client-facing listeners of a node (and the cloud
// server it may run) that serve TLS when configured; peer links, which
// need a client CA too, say mutual_tls on their own "listening" line.
var servedTLS = []string{"mqtt", "mqtt_ws", "kafka", "pulsar", "http", "rest"}

// tlsListeners lists those of names that serve TLS in c ("" when none
// do), for the ready line.
func tlsListeners(c listen.TLSConfig, names ...string) string {
	var on []string
	for _, name := range names {
		if c.On(name) {
			on = append(on, name)
		}
	}
	return strings.Join(on, ",")
}

// cloudOf is the configuration of the cloud server an edge config asks to
// run next to the node (catalog_addr, cloud_kafka_addr,
// cloud_pulsar_addr), over the node's catalog; false when it asks for none.
// The node maintains the tables itself, so the cloud server does not.
func cloudOf(cfg node.Config) (cloud.Config, bool) {
	if cfg.CatalogAddr == "" && cfg.CloudKafkaAddr == "" && cfg.CloudPulsarAddr == "" && cfg.CloudMQTTAddr == "" && cfg.CloudMQTTWSAddr == "" && cfg.CloudHTTPAddr == "" {
		return cloud.Config{}, false
	}
	var c cloud.Config
	c.DataDir = cfg.DataDir
	c.Catalog.Name, c.Catalog.URI, c.Catalog.Warehouse = cfg.Catalog.Name, cfg.Catalog.URI, cfg.Catalog.Warehouse
	c.Storage = cfg.Storage
	kafkaAddr, pulsarAddr, maintain := cfg.CloudKafkaAddr, cfg.CloudPulsarAddr, false
	c.Kafka.Addr, c.Pulsar.Addr, c.Maintenance.Enabled = &kafkaAddr, &pulsarAddr, &maintain
	c.MQTT.Addr, c.MQTT.WSAddr = cfg.CloudMQTTAddr, cfg.CloudMQTTWSAddr
	c.MQTT.WSAllowedOrigins = cfg.MQTT.WSAllowedOrigins
	httpAddr := cfg.CloudHTTPAddr
	c.HTTP.Addr, c.HTTP.Config = &httpAddr, cfg.HTTPAPI // http_api caps its reads too
	c.ShutdownTimeout = cfg.ShutdownTimeout
	c.Security = cfg.Security
	c.ApplyDefaults()
	c.Catalog.Addr = cfg.CatalogAddr // "" = off, which only a program can say
	return c, true
}
