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

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/rest"
)

// cmdCloud runs the cloud server: the Iceberg REST catalog over the
// catalog database and the Kafka consume server reading the tables
// (committed group offsets in the same SQLite database). The Pulsar
// consume side is not part of it yet.
func cmdCloud(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cloud", flag.ContinueOnError)
	fs.SetOutput(stderr)
	catAddr := fs.String("catalog-addr", "127.0.0.1:8181", "Iceberg REST catalog listener (clients use http://ADDR)")
	kafkaAddr := fs.String("kafka-addr", "127.0.0.1:19092", "Kafka consume listener (\"\" = off)")
	kafkaAdv := fs.String("kafka-advertised-addr", "", "host:port announced to Kafka clients (default: the listener's)")
	kafkaPeers := fs.String("kafka-peers", "", "comma-separated advertised host:port of every cloud server, for group coordinator placement (default: this one alone)")
	data := fs.String("data", "./data", "data directory: SQLite catalog (catalog.db) and warehouse (warehouse/)")
	catURI := fs.String("catalog", "", "backing catalog URI (default sqlite://DIR/catalog.db)")
	warehouse := fs.String("warehouse", "", "warehouse URL (default file://DIR/warehouse)")
	catName := fs.String("catalog-name", "tributary", "catalog name")
	token := fs.String("token", os.Getenv("TRIBUTARY_CATALOG_TOKEN"), "require this bearer token (default $TRIBUTARY_CATALOG_TOKEN; empty = no auth)")
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
	abs, err := filepath.Abs(*data)
	if err != nil {
		fmt.Fprintln(stderr, "tributary cloud:", err)
		return 2
	}
	if *catURI == "" {
		*catURI = "sqlite://" + filepath.Join(abs, "catalog.db")
	}
	if *warehouse == "" {
		*warehouse = "file://" + filepath.Join(abs, "warehouse")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cat, err := tables.Open(ctx, tables.Config{Name: *catName, URI: *catURI, Warehouse: *warehouse})
	if err != nil {
		log.Error("open catalog", "err", err)
		return 1
	}
	defer cat.Close()
	h := rest.NewHandler(cat.Iceberg(), rest.Options{Warehouse: *warehouse, Token: *token, Logger: log})
	srv, err := rest.Listen(*catAddr, withProbes(h, cat))
	if err != nil {
		log.Error("listen", "addr", *catAddr, "err", err)
		return 1
	}
	var ks *kafka.CloudServer
	if *kafkaAddr != "" {
		var peers []string
		for _, p := range strings.Split(*kafkaPeers, ",") {
			if p = strings.TrimSpace(p); p != "" {
				peers = append(peers, p)
			}
		}
		ks, err = kafka.NewCloudServer(kafka.CloudConfig{
			Config:    kafka.Config{Addr: *kafkaAddr, AdvertisedAddr: *kafkaAdv, ClusterID: *catName, Logger: log},
			Peers:     peers,
			OffsetsDB: *catURI,
		}, cat)
		if err == nil {
			err = ks.Start()
		}
		if err != nil {
			log.Error("kafka", "addr", *kafkaAddr, "err", err)
			srv.Shutdown(context.Background())
			return 1
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ks.Close(sctx)
		}()
	}
	kafkaBound := ""
	if ks != nil {
		kafkaBound = ks.Addr()
	}
	log.Info("ready", "catalog", srv.Addr(), "kafka", kafkaBound, "backing", *catURI, "warehouse", *warehouse, "auth", *token != "")
	code := 0
	select {
	case <-ctx.Done():
	case err := <-srv.Done():
		log.Error("catalog server stopped", "err", err)
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	log.Info("stopped")
	return code
}

// withProbes serves /healthz (the process answers) and /readyz (the backing
// catalog answers a namespace listing) next to the REST catalog h, without
// authentication, for load balancers and Kubernetes probes.
func withProbes(h http.Handler, cat *tables.Catalog) http.Handler {
	mux := http.NewServeMux()
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
