//go:build bench

package e2e

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBenchCloudMQTT (issue 19), in `make bench`:
//
//   - Delivery rate: the committed rows of factory.telemetry (256-byte
//     payloads from the firmware simulator) read from earliest by 1, 10
//     and 100 MQTT 5 subscribers of the cloud listener (QoS 1, paho's
//     automatic PUBACKs, Receive Maximum 256), and by as many kgo
//     consumers of the cloud Kafka server: rows/s over all of them.
//   - Latency: 100 devices × 20 msg/s QoS 1 into the edge while one MQTT
//     subscriber (latest) and one kgo consumer (end) tail the stream; a
//     row's latency is its delivery time minus its acceptance timestamp
//     (set by the edge just before the fsync and the PUBACK, so it
//     slightly over-states PUBACK → delivery). Commit interval 200 ms.
func TestBenchCloudMQTT(t *testing.T) {
	d := benchSeconds()
	dir := t.TempDir()
	p := startDev(t, dir)
	fill := load(t, p.MQTT, 1, 100, 200, 3*time.Second, nil)
	var rows int
	waitFor(t, 60*time.Second, "rows committed", func() bool {
		rows = len(readTable(t, dir, cloudStream))
		return rows >= int(fill.Acked)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\nCloud MQTT delivery from earliest, %d committed rows of 256 B each, per reader group:\n", rows)
	fmt.Fprintf(&b, "%-12s %16s %16s\n", "readers", "MQTT rows/s", "Kafka rows/s")
	for _, n := range []int{1, 10, 100} {
		m := mqttReadAll(t, p.CloudMQTT, n, rows)
		k := kafkaReadAll(t, p.CloudKafka, n, rows)
		fmt.Fprintf(&b, "%-12d %16.0f %16.0f\n", n, float64(n*rows)/m.Seconds(), float64(n*rows)/k.Seconds())
	}

	// Latency, tailing.
	var mu sync.Mutex
	var mlat, klat []time.Duration
	cc := connectCloud(t, p.CloudMQTT, paho.Connect{ClientID: "bench-tail", CleanStart: true}, false)
	if code := cc.subscribe(t, "$stream/"+cloudStream+"/#"); code != 1 {
		t.Fatalf("SUBACK 0x%02x", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-cc.msgs:
				now := time.Now()
				ts, err := time.Parse(time.RFC3339Nano, m.Properties.User.Get("timestamp"))
				if err == nil {
					mu.Lock()
					mlat = append(mlat, now.Sub(ts))
					mu.Unlock()
				}
			}
		}
	}()
	kc, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cloudStream: {0: kgo.NewOffset().AtEnd()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kdone := make(chan struct{})
	go func() {
		defer close(kdone)
		for ctx.Err() == nil {
			fs := kc.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				klat = append(klat, now.Sub(r.Timestamp))
				mu.Unlock()
			})
		}
	}()
	time.Sleep(2 * time.Second)
	sum := load(t, p.MQTT, 1, 100, 20, d, nil)
	time.Sleep(3 * time.Second)
	cancel()
	<-kdone
	mu.Lock()
	defer mu.Unlock()
	q := func(l []time.Duration, f float64) time.Duration {
		if len(l) == 0 {
			return 0
		}
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		return l[int(f*float64(len(l)-1))].Round(time.Millisecond)
	}
	fmt.Fprintf(&b, "Latency, %0.f msg/s MQTT QoS 1 (acked %d) for %s, commit interval 200 ms, accepted -> delivered:\n", sum.MsgsPerSec(), sum.Acked, d)
	fmt.Fprintf(&b, "  cloud MQTT subscriber: %d rows, p50 %s, p99 %s, max %s\n", len(mlat), q(mlat, 0.5), q(mlat, 0.99), q(mlat, 1))
	fmt.Fprintf(&b, "  cloud Kafka consumer:  %d rows, p50 %s, p99 %s, max %s\n", len(klat), q(klat, 0.5), q(klat, 0.99), q(klat, 1))
	t.Log(b.String())
	fmt.Print(b.String())
}

// mqttReadAll connects n MQTT 5 subscribers that each read rows rows from
// earliest; it returns the time until the last one has them all.
func mqttReadAll(t *testing.T, addr string, n, rows int) time.Duration {
	t.Helper()
	var left atomic.Int64
	left.Store(int64(n * rows))
	done := make(chan struct{})
	var once sync.Once
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var clients []*paho.Client
	for i := range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) {
				if left.Add(-1) == 0 {
					once.Do(func() { close(done) })
				}
				return true, nil
			}}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rm := uint16(256)
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: fmt.Sprintf("bench-read-%d-%d", n, i), CleanStart: true, KeepAlive: 30,
			Properties: &paho.ConnectProperties{ReceiveMaximum: &rm}}); err != nil {
			t.Fatal(err)
		}
		cancel()
		clients = append(clients, c)
	}
	start := time.Now()
	for _, c := range clients {
		go c.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$stream/" + cloudStream + "/#", QoS: 1}},
			Properties: &paho.SubscribeProperties{User: paho.UserProperties{{Key: "stream-offset", Value: "earliest"}}}})
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("%d MQTT readers: %d rows left", n, left.Load())
	}
	return time.Since(start)
}

// kafkaReadAll runs n kgo consumers that each read rows rows from the
// start; it returns the time until the last one has them all.
func kafkaReadAll(t *testing.T, addr string, n, rows int) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cloudStream: {0: kgo.NewOffset().AtStart()}}))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			for got := 0; got < rows && ctx.Err() == nil; {
				fs := cl.PollFetches(ctx)
				got += fs.NumRecords()
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
