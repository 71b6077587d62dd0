package e2e

// TLS on every listener of `tributary dev --security FILE`: real clients
// over TLS (mosquitto_pub/mosquitto_sub over mqtts, paho.golang over wss,
// kcat with security.protocol=SSL, franz-go with a TLS dialer, the Pulsar
// Go client over pulsar+ssl://, iceberg-go's REST catalog over https, and
// /metrics over https), and on every TLS port a plain-text client closed
// at once.

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kgo"

	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/internal/testkit"
)

func TestTLSListeners(t *testing.T) {
	dir := t.TempDir()
	p, ca := startSecureDev(t, dir)
	if !p.logged("tls=mqtt,mqtt_ws,kafka,pulsar,http,rest", 5*time.Second) {
		t.Errorf("ready line does not list the TLS listeners:\n%s", p.tail(5))
	}
	roots := &tls.Config{RootCAs: ca.Pool}

	// A plain-text client on each TLS port is closed at once.
	for name, addr := range map[string]string{"mqtt": p.MQTT, "mqtt_ws": p.MQTTWS, "kafka": p.Kafka, "http": p.HTTP,
		"rest": p.Catalog, "cloud kafka": p.CloudKafka, "pulsar": p.Pulsar} {
		start := time.Now()
		if err := expectClosedWithin(addr, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), false, 3*time.Second); err != nil {
			t.Errorf("%s (%s): %v", name, addr, err)
		} else if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: plain-text client closed after %s", name, d)
		}
	}

	// mosquitto_sub and mosquitto_pub over mqtts, trusting the CA file.
	_, port, _ := strings.Cut(p.MQTT, ":")
	mosq := []string{"-h", "127.0.0.1", "-p", port, "--cafile", ca.Files(), "-q", "1"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := exec.CommandContext(ctx, "mosquitto_sub", append(mosq, "-t", "factory/tls/#", "-C", "1", "-W", "15")...)
	subOut := make(chan string, 1)
	subOutput := &strings.Builder{}
	sub.Stdout, sub.Stderr = subOutput, subOutput
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sub.Wait(); subOut <- subOutput.String() }()
	waitFor(t, 10*time.Second, "mosquitto_sub subscribed", func() bool {
		return metric(t, p, "tributary_mqtt_clients") >= 1
	})
	if out, err := exec.Command("mosquitto_pub", append(mosq, "-t", "factory/tls/mosq", "-m", `{"via":"mqtts"}`)...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub over mqtts: %v %s", err, out)
	}
	if got := <-subOut; !strings.Contains(got, `{"via":"mqtts"}`) {
		t.Fatalf("mosquitto_sub over mqtts got %q", got)
	}

	// paho.golang (the simulator's autopaho) over wss.
	sum, err := firmwaresim.Run(ctx, firmwaresim.Config{Broker: "wss://" + p.MQTTWS + "/mqtt", TLS: roots, Devices: 1,
		Messages: 5, QoS: 1, ClientIDPrefix: "wss", TopicPattern: "factory/tls/wss{device}"})
	if err != nil || sum.Acked != 5 {
		t.Fatalf("paho over wss: %+v %v", sum, err)
	}

	// kcat produces at the edge over TLS.
	kcat := exec.Command(kcatPath(t), "-b", p.Kafka, "-X", "security.protocol=SSL", "-X", "ssl.ca.location="+ca.Files(),
		"-P", "-t", "factory.telemetry", "-K:")
	kcat.Stdin = strings.NewReader("k1:kcat-1\nk2:kcat-2\nk3:kcat-3\n")
	if out, err := kcat.CombinedOutput(); err != nil {
		t.Fatalf("kcat over TLS: %v %s", err, out)
	}
	const rows = 1 + 5 + 3
	waitRows(t, dir, "factory.telemetry", rows)

	// franz-go consumes from the cloud Kafka over TLS.
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.DialTLSConfig(roots.Clone()),
		kgo.ConsumeTopics("factory.telemetry"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	for got < rows && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
			t.Fatalf("kgo over TLS: %v", errs)
		}
		got += fs.NumRecords()
	}
	if got != rows {
		t.Fatalf("kgo over TLS read %d records, want %d", got, rows)
	}

	// The Pulsar Go client over pulsar+ssl:// (LOOKUP answers
	// brokerServiceUrlTls).
	pc := pulsarClientWith(t, pulsar.ClientOptions{URL: "pulsar+ssl://" + p.Pulsar, TLSTrustCertsFilePath: ca.Files()})
	cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: pulsarTopic, SubscriptionName: "tls",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("pulsar+ssl subscribe: %v", err)
	}
	defer cons.Close()
	for i := range rows {
		if _, err := cons.Receive(ctx); err != nil {
			t.Fatalf("pulsar+ssl receive %d: %v", i, err)
		}
	}

	// iceberg-go's REST catalog over https loads the table.
	if n := len(readTableURI(t, "https://"+p.Catalog, "factory.telemetry", rest.WithTLSConfig(roots.Clone()))); n != rows {
		t.Fatalf("REST over https: %d rows, want %d", n, rows)
	}

	// /metrics over https counted the plain-text client refused above.
	if v, _ := scrapeMetrics(t, p); v["tributary_listener_tls_handshake_failures_total"] < 2 {
		t.Fatalf("/metrics over https: tributary_listener_tls_handshake_failures_total %v, want the mqtt and mqtt-ws ones",
			v["tributary_listener_tls_handshake_failures_total"])
	}
}

// TestTLSEdgeToCloud: an edge node commits through the cloud server's REST
// catalog over https (catalog.ca_file), each with a security section in
// its config file; on SIGHUP the cloud server serves a new certificate
// without a restart.
func TestTLSEdgeToCloud(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	security := "security:\n" + indentYAML(securityYAML(srv))
	const token = "edge-node-token"
	cloudCfg := filepath.Join(dir, "cloud.yaml")
	writeFile(t, cloudCfg, fmt.Sprintf("role: cloud\ndata_dir: %s/cloud\ncatalog:\n  addr: 127.0.0.1:0\n  node_token: %s\n"+
		"kafka:\n  addr: \"\"\npulsar:\n  addr: \"\"\nmaintenance:\n  enabled: false\n%s", dir, token, security))
	cloud := startProc(t, dir, "cloud", "-config", cloudCfg)
	edgeCfg := filepath.Join(dir, "edge.yaml")
	writeFile(t, edgeCfg, fmt.Sprintf("node_id: edge-tls\ndata_dir: %s/edge\ncatalog:\n  uri: https://%s\n  token: %s\n  ca_file: %s\n"+
		"  warehouse: file://%s/cloud/warehouse\nmqtt:\n  addr: 127.0.0.1:0\n  routes:\n    - {filter: \"factory/#\", stream: factory.telemetry}\n"+
		"http_addr: 127.0.0.1:0\nuplink:\n  commit_interval: 200ms\nmaintenance:\n  enabled: false\n%s",
		dir, cloud.Catalog, token, ca.Files(), dir, security))
	edge := startEdge(t, dir, edgeCfg)
	roots := &tls.Config{RootCAs: ca.Pool}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if sum, err := firmwaresim.Run(ctx, firmwaresim.Config{Broker: "tls://" + edge.MQTT, TLS: roots, Devices: 1, Messages: 5,
		QoS: 1, ClientIDPrefix: "edge-tls"}); err != nil || sum.Acked != 5 {
		t.Fatalf("paho over mqtts to the edge: %+v %v", sum, err)
	}
	waitFor(t, 20*time.Second, "5 rows through the https catalog", func() bool {
		return len(readTableURI(t, "https://"+cloud.Catalog, "factory.telemetry", rest.WithTLSConfig(roots.Clone()))) == 5
	})

	served := func() string { return ca.Served(t, cloud.Catalog).SerialNumber.String() }
	if got := served(); got != srv.Cert.SerialNumber.String() {
		t.Fatalf("cloud serves certificate %s, want %s", got, srv.Cert.SerialNumber)
	}
	next := ca.Server(t)
	for from, to := range map[string]string{next.CertFile: srv.CertFile, next.KeyFile: srv.KeyFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, to, string(b))
	}
	cloud.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 10*time.Second, "the new certificate after SIGHUP", func() bool { return served() == next.Cert.SerialNumber.String() })
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
