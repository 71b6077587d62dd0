//go:build bench

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary-io/tributary/auth"
	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
	"github.com/tributary-io/tributary/internal/testkit"
)

// TestBenchSecurity (issue 13): MQTT QoS 1 and Kafka produce with TLS and
// authentication on against off — two nodes, the same load, one run —
// and the connection set-up time each adds.
func TestBenchSecurity(t *testing.T) {
	d := benchSeconds()
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	users := filepath.Join(dir, "passwd")
	if err := auth.SetPassword(users, "bench", []byte("bench-pw")); err != nil {
		t.Fatal(err)
	}
	sec := filepath.Join(dir, "security.yaml")
	if err := os.WriteFile(sec, []byte(fmt.Sprintf(`users_file: %s
tls:
  cert_file: %s
  key_file: %s
acl:
  - principal: bench
    allow: [publish, subscribe, produce]
    client_ids: ["*"]
`, users, srv.CertFile, srv.KeyFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := startDev(t, filepath.Join(dir, "plain"), "--commit-interval", "1s", "--wal-budget", "8GiB")
	locked := startDev(t, filepath.Join(dir, "locked"), "--commit-interval", "1s", "--wal-budget", "8GiB", "--security", sec)
	clientTLS := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}

	mqttLoad := func(broker string, secure bool) firmwaresim.Summary {
		cfg := firmwaresim.Config{Broker: broker, Devices: 100, QoS: 1, PayloadSize: 256, Duration: d,
			ClientIDPrefix: fmt.Sprintf("bench%d", time.Now().UnixNano()%1e6)}
		if secure {
			cfg.Username, cfg.Password, cfg.TLS = "bench", "bench-pw", clientTLS
		}
		ctx, cancel := context.WithTimeout(context.Background(), d+60*time.Second)
		defer cancel()
		sum, err := firmwaresim.Run(ctx, cfg)
		if err != nil {
			t.Fatalf("load against %s: %v", broker, err)
		}
		return sum
	}
	mPlain := mqttLoad("tcp://"+plain.MQTT, false)
	mLocked := mqttLoad("tls://"+locked.MQTT, true)

	// Connection set-up: sequential CONNECT → CONNACK, each on a new
	// connection (TCP, then TLS handshake and password check when on).
	connects := func(addr string, secure bool) time.Duration {
		const n = 200
		var total time.Duration
		for i := 0; i < n; i++ {
			start := time.Now()
			var c net.Conn
			var err error
			if secure {
				c, err = tls.Dial("tcp", addr, clientTLS)
			} else {
				c, err = net.Dial("tcp", addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			cl := paho.NewClient(paho.ClientConfig{Conn: c})
			cp := &paho.Connect{ClientID: fmt.Sprintf("conn-%d", i), CleanStart: true, KeepAlive: 30}
			if secure {
				cp.Username, cp.UsernameFlag, cp.Password, cp.PasswordFlag = "bench", true, []byte("bench-pw"), true
			}
			ca, err := cl.Connect(context.Background(), cp)
			if err != nil || ca.ReasonCode != 0 {
				t.Fatalf("connect %s: %v %v", addr, ca, err)
			}
			total += time.Since(start)
			cl.Disconnect(&paho.Disconnect{})
		}
		return total / n
	}
	cPlain := connects(plain.MQTT, false)
	cLocked := connects(locked.MQTT, true)

	kp := produceLoad(t, plain.Kafka, d)
	kl := produceLoad(t, locked.Kafka, d, kgo.DialTLSConfig(clientTLS),
		kgo.SASL(scram.Auth{User: "bench", Pass: "bench-pw"}.AsSha512Mechanism()))
	kPlain, kPlainP99, kLocked, kLockedP99 := kp.recs, kp.p99, kl.recs, kl.p99

	var b strings.Builder
	fmt.Fprintf(&b, "\nTLS + authentication on against off, same load, %s per run\n", d)
	fmt.Fprintf(&b, "%-34s %12s %12s %8s\n", "load", "off", "on", "on/off")
	fmt.Fprintf(&b, "%-34s %12.0f %12.0f %8.2f\n", "MQTT QoS 1, 100 devices (msgs/s)", mPlain.MsgsPerSec(), mLocked.MsgsPerSec(), mLocked.MsgsPerSec()/mPlain.MsgsPerSec())
	fmt.Fprintf(&b, "%-34s %12s %12s\n", "MQTT QoS 1 p99", mPlain.Latency.P99.Round(10*time.Microsecond), mLocked.Latency.P99.Round(10*time.Microsecond))
	fmt.Fprintf(&b, "%-34s %12.0f %12.0f %8.2f\n", "Kafka produce 1 KiB acks=all (rec/s)", kPlain, kLocked, kLocked/kPlain)
	fmt.Fprintf(&b, "%-34s %12s %12s\n", "Kafka produce p99", kPlainP99.Round(10*time.Microsecond), kLockedP99.Round(10*time.Microsecond))
	fmt.Fprintf(&b, "%-34s %12s %12s %8s\n", "MQTT connection set-up (mean)", cPlain.Round(time.Microsecond), cLocked.Round(time.Microsecond),
		"+"+(cLocked-cPlain).Round(time.Microsecond).String())
	fmt.Fprintf(&b, "target: TLS and authentication cost under 20%% of throughput (ratio on/off >= 0.80)\n")
	t.Log(b.String())
	fmt.Print(b.String())
}
