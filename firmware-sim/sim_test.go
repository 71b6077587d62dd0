package firmwaresim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary/internal/testkit"
)

// received is one PUBLISH as seen by the test broker.
type received struct {
	topic   string
	payload []byte
	qos     byte
	user    map[string]string
}

// recorder collects publishes. As an OnPublish hook it sees every message
// before the broker acks it (like Tributary's WAL); as an inline
// subscription it sees what a subscriber gets.
type recorder struct {
	mqtt.HookBase
	mu   sync.Mutex
	msgs []received
}

func (r *recorder) ID() string { return "recorder" }

func (r *recorder) Provides(b byte) bool { return b == mqtt.OnPublish }

func (r *recorder) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if !cl.Net.Inline {
		r.add(pk)
	}
	return pk, nil
}

func (r *recorder) add(pk packets.Packet) {
	m := received{topic: pk.TopicName, payload: bytes.Clone(pk.Payload), qos: pk.FixedHeader.Qos}
	if len(pk.Properties.User) > 0 {
		m.user = map[string]string{}
		for _, u := range pk.Properties.User {
			m.user[u.Key] = u.Val
		}
	}
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.msgs...)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

type testBroker struct {
	srv   *mqtt.Server
	addr  string
	close func()
	hook  *recorder // every publish, recorded before its ack
	sub   *recorder // what an inline subscriber to # received
}

// startBroker starts a mochi broker on addr ("127.0.0.1:0" for any port).
func startBroker(t *testing.T, addr string) *testBroker {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.DiscardHandler)})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		t.Fatal(err)
	}
	b := &testBroker{srv: srv, hook: &recorder{}, sub: &recorder{}}
	if err := srv.AddHook(b.hook, nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "t", Address: addr})
	if err := srv.AddListener(l); err != nil { // binds the socket
		t.Fatal(err)
	}
	b.addr = l.Address()
	if err := srv.Subscribe("#", 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		if !strings.HasPrefix(pk.TopicName, "$") { // skip $SYS
			b.sub.add(pk)
		}
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	var once sync.Once
	b.close = func() { once.Do(func() { _ = srv.Close() }) }
	t.Cleanup(b.close)
	return b
}

type telemetry struct {
	Device    string   `json:"device"`
	Line      string   `json:"line"`
	Seq       *uint64  `json:"seq"`
	TS        string   `json:"ts"`
	TempC     *float64 `json:"temp_c"`
	Humidity  *float64 `json:"humidity"`
	Vibration *float64 `json:"vibration_mm_s"`
	Status    string   `json:"status"`
	Pad       string   `json:"pad"`
}

func decode(t *testing.T, p []byte) telemetry {
	t.Helper()
	var m telemetry
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("payload %q: %v", p, err)
	}
	if m.Seq == nil || m.Device == "" {
		t.Fatalf("payload %q lacks device or seq", p)
	}
	if _, err := time.Parse(time.RFC3339Nano, m.TS); err != nil {
		t.Fatalf("payload %q: ts: %v", p, err)
	}
	return m
}

func run(t *testing.T, cfg Config) Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sum, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("summary:\n%s", sum)
	if sum.Sent != sum.Acked+sum.Failed {
		t.Errorf("sent %d != acked %d + failed %d", sum.Sent, sum.Acked, sum.Failed)
	}
	return sum
}

func TestFleetQoS1Complete(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	sum := run(t, Config{Broker: "tcp://" + b.addr, Devices: 5, Messages: 20, Seed: 7})
	if sum.Sent != 100 || sum.Acked != 100 || sum.Failed != 0 || sum.Reconnects != 0 {
		t.Fatalf("sent %d acked %d failed %d reconnects %d, want 100/100/0/0", sum.Sent, sum.Acked, sum.Failed, sum.Reconnects)
	}
	if sum.QoS != 1 || sum.Latency.Count != 100 || sum.Latency.P50 <= 0 || sum.Latency.Max < sum.Latency.P99 ||
		sum.Response.P50 < sum.Latency.P50 || sum.MsgsPerSec() <= 0 {
		t.Errorf("implausible summary %+v", sum)
	}
	testkit.Eventually(t, 5*time.Second, "subscriber to get 100 messages", func() bool { return b.sub.len() >= 100 })

	last := map[string]uint64{}
	for _, m := range b.sub.snapshot() {
		if m.qos != 1 {
			t.Errorf("qos %d", m.qos)
		}
		tm := decode(t, m.payload)
		if tm.TempC == nil || tm.Humidity == nil || tm.Vibration == nil || tm.Line == "" || tm.Status == "" {
			t.Fatalf("payload %s lacks fields", m.payload)
		}
		if *tm.TempC < 0 || *tm.TempC > 60 || *tm.Humidity < 0 || *tm.Humidity > 100 || *tm.Vibration < 0 {
			t.Errorf("implausible reading %s", m.payload)
		}
		idx, _ := strconv.Atoi(strings.TrimPrefix(tm.Device, "device"))
		wantTopic := fmt.Sprintf("factory/line%d/device%d/telemetry", idx%4, idx)
		if m.topic != wantTopic || tm.Line != fmt.Sprintf("line%d", idx%4) {
			t.Errorf("device %s: topic %q line %q", tm.Device, m.topic, tm.Line)
		}
		if *tm.Seq != last[tm.Device]+1 {
			t.Errorf("%s: seq %d after %d", tm.Device, *tm.Seq, last[tm.Device])
		}
		last[tm.Device] = *tm.Seq
	}
	if len(last) != 5 {
		t.Errorf("%d devices seen", len(last))
	}
	for d, s := range last {
		if s != 20 {
			t.Errorf("%s: last seq %d", d, s)
		}
	}
}

func TestFixedPayloadSize(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	for _, size := range []int{256, 16} {
		before := b.hook.len()
		sum := run(t, Config{Broker: b.addr, Devices: 2, Messages: 10, PayloadSize: size, InFlight: 4, ClientIDPrefix: "fixed" + strconv.Itoa(size)})
		if sum.Acked != 20 {
			t.Fatalf("size %d: acked %d", size, sum.Acked)
		}
		msgs := b.hook.snapshot()[before:]
		if len(msgs) != 20 {
			t.Fatalf("size %d: broker got %d", size, len(msgs))
		}
		seen := map[string]bool{}
		for _, m := range msgs {
			if len(m.payload) != size {
				t.Errorf("size %d: payload is %d bytes", size, len(m.payload))
			}
			if size == 256 {
				tm := decode(t, m.payload)
				key := fmt.Sprintf("%s/%d", tm.Device, *tm.Seq)
				if seen[key] || *tm.Seq < 1 || *tm.Seq > 10 || tm.Pad == "" {
					t.Errorf("bad message %s", m.payload)
				}
				seen[key] = true
			}
		}
	}
}

func TestUserPropertiesQoS2(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	sum := run(t, Config{Broker: b.addr, Devices: 3, Messages: 10, QoS: 2, UserProperties: true,
		TopicPattern: "plant/{line}/{device}", Lines: 2})
	if sum.Acked != 30 || sum.QoS != 2 || sum.Latency.Count != 30 {
		t.Fatalf("acked %d qos %d latency n %d", sum.Acked, sum.QoS, sum.Latency.Count)
	}
	msgs := b.hook.snapshot()
	if len(msgs) != 30 {
		t.Fatalf("broker got %d", len(msgs))
	}
	for _, m := range msgs {
		tm := decode(t, m.payload)
		if m.qos != 2 || m.user["device"] != tm.Device || m.user["line"] != tm.Line ||
			m.user["seq"] != strconv.FormatUint(*tm.Seq, 10) {
			t.Errorf("qos %d user properties %v for %s", m.qos, m.user, m.payload)
		}
		idx, _ := strconv.Atoi(strings.TrimPrefix(tm.Device, "device"))
		if m.topic != fmt.Sprintf("plant/%d/%d", idx%2, idx) {
			t.Errorf("topic %q", m.topic)
		}
	}
}

func TestQoS0AndDuration(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	start := time.Now()
	sum := run(t, Config{Broker: b.addr, Devices: 2, QoS: QoS0, Rate: 200, Duration: 300 * time.Millisecond})
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("run took %s", el)
	}
	// 2 devices × 200/s × elapsed (≈ 0.3 s, longer on a loaded machine):
	// an open loop never sends more than its rate allows.
	limit := int64(2*200*sum.Elapsed.Seconds()) + 10
	if sum.QoS != 0 || sum.Acked < 10 || sum.Acked > limit || sum.Latency.Count != 0 {
		t.Errorf("qos %d acked %d latency n %d", sum.QoS, sum.Acked, sum.Latency.Count)
	}
	testkit.Eventually(t, 5*time.Second, "broker to see every QoS 0 message", func() bool { return int64(b.hook.len()) == sum.Acked })
}

func TestCancelStopsOpenEndedRun(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	sum, err := Run(ctx, Config{Broker: b.addr, Devices: 3, InFlight: 8, ProgressEvery: 10 * time.Millisecond,
		Progress: func(s Summary) {
			if s.Acked >= 200 {
				once.Do(cancel)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Acked < 200 || sum.Sent != sum.Acked+sum.Failed || sum.Failed != 0 {
		t.Errorf("sent %d acked %d failed %d", sum.Sent, sum.Acked, sum.Failed)
	}
	testkit.Eventually(t, 5*time.Second, "broker count to settle", func() bool { return int64(b.hook.len()) >= sum.Acked })
}

func TestReconnectContinues(t *testing.T) {
	b1 := startBroker(t, "127.0.0.1:0")
	const devices, perDevice = 5, 100
	type result struct {
		sum Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := Run(ctx, Config{Broker: b1.addr, Devices: devices, Messages: perDevice, Rate: 200,
			ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, AckTimeout: 2 * time.Second})
		done <- result{s, err}
	}()

	testkit.Eventually(t, 10*time.Second, "first broker to get 150 messages", func() bool { return b1.hook.len() >= 150 })
	b1.close()
	b2 := startBroker(t, b1.addr)

	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	sum := res.sum
	t.Logf("summary:\n%s", sum)
	if sum.Reconnects < devices {
		t.Errorf("reconnects %d, want >= %d", sum.Reconnects, devices)
	}
	if sum.Acked != devices*perDevice || sum.Sent != sum.Acked+sum.Failed {
		t.Errorf("sent %d acked %d failed %d", sum.Sent, sum.Acked, sum.Failed)
	}
	if b2.hook.len() == 0 {
		t.Fatal("fleet did not continue on the new broker")
	}
	// At least once: every seq of every device reached a broker (before
	// its ack), duplicates allowed.
	got := map[string]map[uint64]bool{}
	for _, m := range append(b1.hook.snapshot(), b2.hook.snapshot()...) {
		tm := decode(t, m.payload)
		if got[tm.Device] == nil {
			got[tm.Device] = map[uint64]bool{}
		}
		got[tm.Device][*tm.Seq] = true
	}
	for i := range devices {
		d := fmt.Sprintf("device%d", i)
		for s := uint64(1); s <= perDevice; s++ {
			if !got[d][s] {
				t.Errorf("%s seq %d never reached a broker", d, s)
			}
		}
	}
}

func TestConnectFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	_, err = Run(context.Background(), Config{Broker: addr, Devices: 2, ConnectTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "0 of 2 devices connected") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	for _, cfg := range []Config{{MQTTVersion: 4}, {QoS: 3}, {Broker: "http://x:1"}, {Rate: -1}} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestMain_(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	var out, errOut bytes.Buffer
	code := Main([]string{"-broker", "tcp://" + b.addr, "-devices", "2", "-messages", "5", "-rate", "0", "-inflight", "2", "-json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	var s struct {
		Acked      int64   `json:"acked"`
		MsgsPerSec float64 `json:"msgs_per_sec"`
		Latency    Latency `json:"latency"`
	}
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if s.Acked != 10 || s.MsgsPerSec <= 0 || s.Latency.Count != 10 {
		t.Errorf("json summary %s", out.String())
	}

	out.Reset()
	if code := Main([]string{"-broker", b.addr, "-devices", "1", "-messages", "3", "-rate", "100", "-qos", "2"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "acked 3") || !strings.Contains(out.String(), "p99=") {
		t.Errorf("text summary %q", out.String())
	}
	for _, args := range [][]string{{"-qos", "5"}, {"-nope"}, {"extra"}, {"-devices", "0"}} {
		if code := Main(args, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
