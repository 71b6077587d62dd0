package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tributary-io/tributary/cloud"
	"github.com/tributary-io/tributary/cloudmqtt"
	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/node"
	"github.com/tributary-io/tributary/pulsar"
)

func cmdDev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./data", "data directory: WAL, SQLite catalog (catalog.db) and warehouse")
	mqttAddr := fs.String("mqtt-addr", "127.0.0.1:1883", "MQTT TCP listener")
	wsAddr := fs.String("mqtt-ws-addr", "127.0.0.1:1884", "MQTT WebSocket listener (\"\" = off)")
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "HTTP status page and /metrics")
	kafkaAddr := fs.String("kafka-addr", "127.0.0.1:9092", "Kafka produce listener (\"\" = off)")
	catalogAddr := fs.String("catalog-addr", "127.0.0.1:8181", "Iceberg REST catalog for query engines (\"\" = off)")
	cloudKafkaAddr := fs.String("cloud-kafka-addr", "127.0.0.1:19092", "cloud Kafka consume server reading the tables (\"\" = off)")
	pulsarAddr := fs.String("pulsar-addr", pulsar.DefaultAddr, "cloud Pulsar consume server reading the tables (\"\" = off)")
	cloudMQTTAddr := fs.String("cloud-mqtt-addr", cloudmqtt.DefaultDevAddr, "cloud MQTT listener: subscribers read the tables ($stream/<namespace.stream>/<filter>; \"\" = off)")
	cloudMQTTWSAddr := fs.String("cloud-mqtt-ws-addr", "", "cloud MQTT-over-WebSocket listener (\"\" = off)")
	cloudHTTPAddr := fs.String("cloud-http-addr", cloud.DefaultHTTPAddr, "cloud HTTP read API over the tables: long poll, Server-Sent Events, group offsets (\"\" = off); HTTP produce is on --http-addr")
	devices := fs.Int("sim-devices", 8, "simulated devices publishing telemetry (0 = no simulator)")
	simRate := fs.Float64("sim-rate", 2, "messages per second per simulated device")
	simUser := fs.String("sim-username", "", "MQTT user of the simulated devices, when --security turns authentication on (client ids sim-device-N: name the user sim-device or allow them in its rules)")
	simPassword := fs.String("sim-password", "", "the simulated devices' MQTT password or JWT (default $TRIBUTARY_SIM_PASSWORD)")
	commit := fs.Duration("commit-interval", time.Second, "commit interval of each stream")
	contEnc := fs.Bool("continuous-encoding", false, "encode records into Parquet as they land instead of in one burst per commit (uplink.continuous_encoding)")
	payload := fs.String("payload", "infer", "how factory.telemetry's payloads become columns: infer (typed columns inferred from the JSON, RFC 3339 strings as timestamps; bad payloads also in factory.telemetry_dlq) or raw (the envelope only)")
	blockingAcks := fs.Bool("mqtt-blocking-acks", false, "acknowledge each QoS 1/2 publish before reading the connection's next one (mqtt.blocking_acks; for comparison)")
	walBudget := fs.String("wal-budget", "1GiB", "WAL disk budget; beyond it QoS 1/2 publishes are refused")
	maintain := fs.Bool("maintenance", true, "run table maintenance (compaction, manifest merging, snapshot expiry, orphan cleanup)")
	maintainEvery := fs.Duration("maintenance-interval", time.Minute, "interval between table maintenance passes")
	nodeID := fs.String("node-id", "dev-1", "node id")
	gossipAddr := fs.String("gossip-addr", "", "gossip (memberlist) listener host:port for a cluster of nodes (\"\" = single node)")
	peerAddr := fs.String("peer-addr", "", "data-plane listener host:port for forwarding and replication between nodes (default: the gossip host, port 0)")
	gossipProfile := fs.String("gossip-profile", "lan", "gossip timing: lan, or local (faster failure detection on one host)")
	replFactor := fs.Int("replication-factor", 2, "nodes that hold each record before it is acknowledged, in a cluster (1 = off)")
	replPolicy := fs.String("replication-policy", "degrade", "when replicas are missing: degrade (keep accepting) or refuse")
	takeoverGrace := fs.Duration("takeover-grace", 5*time.Second, "how long a dead member's peer link must be down before its partitions are taken over")
	var join stringList
	fs.Var(&join, "join", "a peer's gossip host:port to join (repeatable)")
	gossipKeyFile := fs.String("gossip-key-file", "", "file holding the gossip encryption key (base64 of 16, 24 or 32 bytes; cluster.gossip_key_file); required off loopback")
	secretFile := fs.String("cluster-secret-file", "", "file holding the cluster secret peer links prove in their hello (cluster.secret_file); required off loopback")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	securityFile := fs.String("security", "", "YAML file with the keys of the security section (tls: ..., see deploy/edge.yaml): TLS on every listener")
	readyFile := fs.String("ready-file", "", "once every listener is bound, write their addresses to this file as a JSON object (atomically)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "tributary dev:", err)
		return 2
	}
	budget, err := node.ParseByteSize(*walBudget)
	if err != nil {
		fmt.Fprintln(stderr, "tributary dev: -wal-budget:", err)
		return 2
	}
	abs, err := filepath.Abs(*data)
	if err != nil {
		fmt.Fprintln(stderr, "tributary dev:", err)
		return 2
	}
	cfg := node.Config{NodeID: *nodeID, DataDir: abs, HTTPAddr: *httpAddr, CatalogAddr: *catalogAddr, CloudKafkaAddr: *cloudKafkaAddr, CloudPulsarAddr: *pulsarAddr,
		CloudHTTPAddr: *cloudHTTPAddr}
	cfg.CloudMQTTAddr, cfg.CloudMQTTWSAddr = *cloudMQTTAddr, *cloudMQTTWSAddr
	cfg.MQTT.Addr = *mqttAddr
	cfg.MQTT.WSAddr = *wsAddr
	cfg.MQTT.BlockingAcks = *blockingAcks
	cfg.Kafka.Addr = *kafkaAddr
	cfg.MQTT.Routes = []node.Route{{Filter: "factory/#", Stream: "factory.telemetry", Payload: *payload, Timestamps: *payload == "infer"}}
	cfg.Uplink.CommitInterval = *commit
	cfg.Uplink.ContinuousEncoding = *contEnc
	cfg.WAL.MaxBytes = budget
	cfg.Maintenance.Enabled = maintain
	cfg.Maintenance.Interval = *maintainEvery
	cfg.Cluster.GossipAddr = *gossipAddr
	cfg.Cluster.GossipProfile = *gossipProfile
	cfg.Cluster.PeerAddr = *peerAddr
	cfg.Cluster.Join = join
	cfg.Cluster.ReplicationFactor = *replFactor
	cfg.Cluster.ReplicationPolicy = *replPolicy
	cfg.Cluster.TakeoverGrace = *takeoverGrace
	cfg.Cluster.GossipKeyFile = *gossipKeyFile
	cfg.Cluster.SecretFile = *secretFile
	if err := readSecurity(*securityFile, &cfg.Security); err != nil {
		fmt.Fprintln(stderr, "tributary dev:", err)
		return 2
	}
	cfg = node.WithDefaults(cfg)
	err = cfg.Validate()
	if err == nil {
		err = loadSecurityFiles(cfg.Security) // before the banner, which would announce listeners that cannot start
	}
	if err != nil {
		fmt.Fprintln(stderr, "tributary dev:", err)
		return 2
	}
	var sim *firmwaresim.Config
	if *devices > 0 {
		sim = &firmwaresim.Config{Devices: *devices, Rate: *simRate, QoS: 1, UserProperties: true,
			TopicPattern: "factory/line{line}/device{device}/telemetry", ClientIDPrefix: "sim-device",
			Username: *simUser, Password: *simPassword}
		if sim.Password == "" {
			sim.Password = os.Getenv("TRIBUTARY_SIM_PASSWORD")
		}
	}
	printDev(stdout, cfg, *data, *devices, *simRate, *simUser)
	return runNode(cfg, sim, *readyFile, log, stdout, stderr, map[string]string{"--mqtt-addr": cfg.MQTT.Addr, "--mqtt-ws-addr": cfg.MQTT.WSAddr,
		"--http-addr": cfg.HTTPAddr, "--kafka-addr": cfg.Kafka.Addr, "--catalog-addr": cfg.CatalogAddr, "--cloud-kafka-addr": cfg.CloudKafkaAddr,
		"--pulsar-addr": cfg.CloudPulsarAddr, "--cloud-mqtt-addr": cfg.CloudMQTTAddr, "--cloud-mqtt-ws-addr": cfg.CloudMQTTWSAddr,
		"--cloud-http-addr": cfg.CloudHTTPAddr, "--gossip-addr": cfg.Cluster.GossipAddr, "--peer-addr": cfg.Cluster.PeerAddr})
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}

// stringList is a repeatable string flag; each use may also list
// comma-separated values.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// printDev prints where to connect: with TLS on a listener, its URL says
// so (mqtts://, wss://, https://, pulsar+ssl://) and the example commands
// take a CA file.
//
// With authentication on (security.users_file or JWT keys, anonymous
// clients refused), the commands carry USER and PASSWORD placeholders, and
// the simulator line says when it will not start (no --sim-username).
func printDev(w io.Writer, cfg node.Config, data string, devices int, simRate float64, simUser string) {
	tc := cfg.Security.TLS
	scheme := func(listener, plain, secure string) string {
		if tc.On(listener) {
			return secure
		}
		return plain
	}
	ca := tc.ClientCAFile
	if ca == "" {
		ca = "CA_FILE"
	}
	anon := cfg.Security.UsersFile == "" && !cfg.Security.JWT.Enabled()
	if cfg.Security.AllowAnonymous != nil {
		anon = *cfg.Security.AllowAnonymous
	}
	mosq, kcat, kafkaTLS, curl := "", "", "", ""
	if tc.On("mqtt") {
		mosq = " --cafile " + ca
	}
	if tc.On("kafka") {
		kcat = " -X security.protocol=SSL -X ssl.ca.location=" + ca
		kafkaTLS = " over TLS"
	}
	if tc.On("http") {
		curl = " --cacert " + ca
	}
	kcatProduce := kcat
	if !anon {
		mosq += " -u USER -P PASSWORD"
		curl += " -u USER:PASSWORD"
		proto := "SASL_PLAINTEXT"
		if tc.On("kafka") {
			proto = "SASL_SSL -X ssl.ca.location=" + ca
		}
		kcatProduce = " -X security.protocol=" + proto + " -X sasl.mechanisms=PLAIN -X sasl.username=USER -X sasl.password=PASSWORD"
	}
	sim := fmt.Sprintf("%d devices at %.1f msg/s each, topics factory/lineN/deviceM/telemetry -> stream factory.telemetry", devices, simRate)
	switch {
	case devices == 0:
		sim = "off (--sim-devices 0)"
	case !anon && simUser == "":
		sim = "not started: anonymous MQTT clients are refused; give it a user with --sim-username and --sim-password"
	}
	ck := cfg.CloudKafkaAddr
	fmt.Fprintf(w, `Tributary dev: edge node on embedded defaults
  data dir   %s  (WAL wal/wal.db, catalog catalog.db named %q, warehouse warehouse/)
  MQTT       %s%s, %s%s (WebSocket)
  Kafka      %s (produce%s; topic = stream name, e.g. factory.telemetry)
  status     %s%s/   metrics %s%s/metrics
  catalog    %s%s (Iceberg REST; warehouse file://%s/warehouse)
  consume    %s (Kafka consumers%s read the tables, e.g. kcat -b %s%s -C -t factory.telemetry)
             %s%s (Pulsar consumers, topic persistent://%s/factory/telemetry)
  simulator  %s

Publish:      mosquitto_pub -h 127.0.0.1 -p %s%s -t factory/line1/temp -m '{"c":21.5}' -q 1
              echo 'k1:{"c":22}' | kcat -b %s%s -P -t factory.telemetry -K:
              curl%s -H 'Content-Type: application/json' %s%s/v3/clusters/%s/topics/factory.telemetry/records -d '{"value":{"data":{"c":23}}}'
Look at rows: bin/tributary tables scan factory.telemetry --data %s --tail 5
Other topics go to stream %s. Ctrl-C stops with a final commit.
%s
`, cfg.DataDir, cfg.Catalog.Name,
		scheme("mqtt", "", "mqtts://"), cfg.MQTT.Addr+scheme("mqtt", " (TCP)", ""),
		scheme("mqtt_ws", "", "wss://"), cfg.MQTT.WSAddr,
		cfg.Kafka.Addr, kafkaTLS,
		scheme("http", "http://", "https://"), cfg.HTTPAddr, scheme("http", "http://", "https://"), cfg.HTTPAddr,
		scheme("rest", "http://", "https://"), cfg.CatalogAddr, cfg.DataDir,
		ck, kafkaTLS, ck, kcat,
		scheme("pulsar", "pulsar://", "pulsar+ssl://"), cfg.CloudPulsarAddr, cfg.Catalog.Name,
		sim,
		portOf(cfg.MQTT.Addr), mosq, cfg.Kafka.Addr, kcatProduce,
		curl, scheme("http", "http://", "https://"), cfg.HTTPAddr, cfg.Catalog.Name,
		data, cfg.MQTT.DefaultStream, devCloudReads(cfg, scheme, mosq))
}

// devCloudReads is printDev's part for the cloud's other read doors (MQTT
// subscribers, the HTTP read API with gRPC), each when it is on.
func devCloudReads(cfg node.Config, scheme func(listener, plain, secure string) string, mosq string) string {
	var b strings.Builder
	if a := cfg.CloudMQTTAddr; a != "" {
		fmt.Fprintf(&b, "Subscribe:    mosquitto_sub -h 127.0.0.1 -p %s%s -V mqttv5 -t '$stream/factory.telemetry/#' -D subscribe user-property stream-offset earliest   (%s%s, MQTT from the tables)\n",
			portOf(a), mosq, scheme("mqtt", "", "mqtts://"), a)
	}
	if a := cfg.CloudHTTPAddr; a != "" {
		fmt.Fprintf(&b, "Read (HTTP):  curl -N -H 'Accept: text/event-stream' '%s%s/v1/streams/factory.telemetry/partitions/0/records?offset=earliest&format=json'   (gRPC Fetch and Subscribe on the same port)\n",
			scheme("http", "http://", "https://"), a)
	}
	return b.String()
}
