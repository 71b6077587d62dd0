package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/node"
	"github.com/tributary-io/tributary/tables"
)

func cmdEdge(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML config file (see deploy/edge.yaml); required")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
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
	return runNode(cfg, nil, log, stdout, stderr)
}

func cmdConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: tributary config check FILE")
		return 2
	}
	raw, err := os.ReadFile(args[1])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if node.RoleOf(raw) == "cloud" {
		cc, err := node.ParseCloudConfig(raw)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok (cloud)\ncatalog: %s (%s) on %s\nwarehouse: %s\nkafka: %q peers=%v\nmaintenance: %v every %s\n",
			args[1], redactURI(cc.Catalog.URI), cc.Catalog.Name, cc.Catalog.Addr, cc.Catalog.Warehouse,
			*cc.Kafka.Addr, cc.Kafka.Peers, *cc.Maintenance.Enabled, cc.Maintenance.Interval)
		return 0
	}
	cfg, err := node.ParseConfig(raw)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (edge)\n", args[1])
	printConfig(stdout, cfg)
	return 0
}

func printConfig(w io.Writer, c node.Config) {
	fmt.Fprintf(w, "node_id: %s\ndata_dir: %s\nwal: %s (budget %d bytes)\ncatalog: %s (%s)\nwarehouse: %s\nmqtt: %s ws=%q default_stream=%s routes=%d\ncommit_interval: %s\nhttp: %s\n",
		c.NodeID, c.DataDir, c.WAL.Path, c.WAL.MaxBytes, tables.Redact(c.Catalog.URI), c.Catalog.Name, tables.Redact(c.Catalog.Warehouse),
		c.MQTT.Addr, c.MQTT.WSAddr, c.MQTT.DefaultStream, len(c.MQTT.Routes), c.Uplink.CommitInterval, c.HTTPAddr)
}

// runNode starts a node (and optionally a simulated fleet against it),
// waits for SIGINT/SIGTERM, and shuts down with a final commit.
func runNode(cfg node.Config, sim *firmwaresim.Config, log *slog.Logger, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.New(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "tributary:", err)
		return 1
	}
	if err := n.Start(ctx); err != nil {
		fmt.Fprintln(stderr, "tributary:", err)
		n.Close(context.Background())
		return 1
	}
	simDone := make(chan struct{})
	if sim != nil {
		sim.Broker = "tcp://" + n.MQTTAddr()
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
	log.Info("ready", "node", cfg.NodeID, "mqtt", n.MQTTAddr(), "http", n.HTTPAddr(), "kafka", n.KafkaAddr(), "catalog", n.CatalogAddr(), "cloud_kafka", n.CloudKafkaAddr(), "gossip", n.GossipAddr(), "peer", n.PeerAddr(), "pulsar", n.CloudPulsarAddr())
	<-ctx.Done()
	stop()
	log.Info("shutting down: stop listeners, final commit")
	<-simDone
	if err := n.Close(context.Background()); err != nil {
		log.Error("shutdown", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}
