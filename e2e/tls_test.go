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
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kgo"

	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
)

func TestTLSListeners(t *testing.T) {
	dir := t.TempDir()
	p, ca := startSecureDev(t, dir)
	if !strings.Contains(p.logs(), "tls=mqtt,mqtt_ws,kafka,pulsar,http,rest,peer") {
		t.Errorf("ready line does not list the TLS listeners:\n%s", p.tail(5))
	}
	roots := &tls.Config{RootCAs: ca.Pool()}

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
