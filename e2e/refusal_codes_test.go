package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRefusalCodesReplication: a node under cluster.replication_policy
// refuse with no member to hold a copy refuses every protocol's write
// with README's "Refusal codes" for too few replicas — MQTT 5 PUBACK
// 0x97 with its reason string, Kafka NOT_ENOUGH_REPLICAS, HTTP 503
// "replication" with Retry-After — over real clients, and nothing it
// refused is appended.
func TestRefusalCodesReplication(t *testing.T) {
	dir := t.TempDir()
	cfg := fmt.Sprintf(`node_id: lone
data_dir: %s
catalog:
  uri: sqlite://%s/catalog.db
  warehouse: file://%s/warehouse
mqtt:
  addr: 127.0.0.1:0
  routes:
    - {filter: "factory/#", stream: factory.telemetry}
kafka:
  addr: 127.0.0.1:0
maintenance:
  enabled: false
http_addr: 127.0.0.1:0
cluster:
  gossip_addr: 127.0.0.1:0
  gossip_profile: local
  replication_factor: 2
  replication_policy: refuse
  join: []
`, dir, dir, dir)
	path := filepath.Join(dir, "lone.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startEdge(t, dir, path)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, err := mqttClient(ctx, p.MQTT, "lone-device")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(&paho.Disconnect{})
	pr, err := c.Publish(ctx, &paho.Publish{Topic: "factory/line1/temp", QoS: 1, Payload: []byte("21.5")})
	if pr == nil || pr.ReasonCode != 0x97 || pr.Properties == nil || !strings.Contains(pr.Properties.ReasonString, "too few replicas") {
		t.Fatalf("MQTT 5 QoS 1 publish: %+v, %v; want PUBACK 0x97 \"too few replicas…\"", pr, err)
	}
	t.Logf("MQTT 5: PUBACK %#x %q", pr.ReasonCode, pr.Properties.ReasonString)

	resp, err := http.Post(fmt.Sprintf("http://%s/v3/clusters/tributary/topics/factory.telemetry/records", p.HTTP), "application/json",
		strings.NewReader(`{"value":{"type":"STRING","data":"h"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var rep httpReport
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if resp.StatusCode != 503 || rep.Reason != "replication" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("HTTP produce: %d %+v (Retry-After %q); want 503 replication with Retry-After", resp.StatusCode, rep, resp.Header.Get("Retry-After"))
	}
	t.Logf("HTTP: %d %q", resp.StatusCode, rep.Reason)

	kc, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka), kgo.RecordRetries(2), kgo.RecordDeliveryTimeout(20*time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	err = kc.ProduceSync(ctx, &kgo.Record{Topic: "factory.telemetry", Value: []byte("k")}).FirstErr()
	if !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("Kafka produce: %v; want NOT_ENOUGH_REPLICAS", err)
	}
	t.Logf("Kafka: %v", err)

	if n := metric(t, p, "tributary_wal_appended_records_total"); n != 0 {
		t.Fatalf("%v refused records were appended to the WAL", n)
	}
	if n := metric(t, p, "tributary_mqtt_publishes_refused_replication_total"); n != 1 {
		t.Fatalf("%v MQTT publishes counted as refused for replication, want 1", n)
	}
}
