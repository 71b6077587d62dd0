package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/gorilla/websocket"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/pulsar/pb"
)

// Bounds of TestHostileWire, stated here so that the closing note can
// quote them.
const (
	// wireMemoryBound is the most the node may hold (VmRSS, the WAL's
	// memory map included) with every attack of TestHostileWire running
	// at once. Before the fixes one slow MQTT subscriber held every
	// payload sent to it (8192 copies): 521 MiB anonymous for two, growing
	// with the firehose; one Pulsar consumer up to 256 MiB.
	wireMemoryBound = 768 << 20
	// wireThroughputFactor is how much of its throughput without the
	// attacks the well-behaved MQTT QoS 1 publisher must keep during them.
	wireThroughputFactor = 0.5
	// wireWindow is how long the attacks (and each throughput measure) run.
	wireWindow = 12 * time.Second
	// firehoseRate (bytes/s) is what the firehose publishes for the slow
	// subscribers: 48 MiB over the window, far more than socket buffers.
	firehoseRate = 4 << 20
)

// TestHostileWire runs the wire-level attacks against every protocol of
// one `tributary dev` (MQTT TCP and WebSocket, edge Kafka, cloud Kafka,
// Pulsar, the REST catalog, the HTTP status port and a peer-link
// listener), all at once:
//
//   - slow readers: MQTT subscribers (TCP and WebSocket, QoS 0 and 1) of a
//     firehose that never read their sockets, pipelined Kafka Fetch and
//     Metadata requests whose responses are never read, a Pulsar consumer
//     with a million permits that never reads, pipelined HTTP GETs never
//     read;
//   - half-open connections: part of a handshake or of a frame, then
//     silence (and the socket is neither read nor closed: a peer gone
//     without a FIN);
//   - oversized frames: length prefixes far above every cap;
//   - truncated frames: a length prefix, fewer bytes, then a close or a
//     stall.
//
// Meanwhile a well-behaved MQTT QoS 1 publisher measures its throughput,
// first without the attacks, then with them. The test asserts: the node
// stays up; its RSS stays under wireMemoryBound; the publisher keeps at
// least wireThroughputFactor of its throughput (under make bench; make test
// holds that it is served at all); every half-open, oversized
// or truncated connection is closed by the server (by a cap, a handshake
// deadline or a keep-alive; not an HTTP request whose body stalls, which
// net/http keeps: see httpAttacks); every acknowledged publish is in the
// table and a Kafka consumer of the cloud side reads each of them.
func TestHostileWire(t *testing.T) {
	data := t.TempDir()
	p := startDev(t, data, "--mqtt-ws-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--replication-factor", "1")
	if p.MQTTWS == "" || p.Peer == "" {
		t.Fatalf("listeners missing: ws %q peer %q", p.MQTTWS, p.Peer)
	}
	pid := p.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	l := newLedger()
	good, err := mqttClient(ctx, p.MQTT, "good")
	if err != nil {
		t.Fatal(err)
	}
	defer good.Disconnect(&paho.Disconnect{})
	sentN := 0
	measure := func(d time.Duration) float64 {
		t.Helper()
		start, n := time.Now(), 0
		for time.Since(start) < d {
			k, err := publishN(ctx, good, l, "good", sentN, 10)
			sentN += k
			n += k
			if err != nil {
				t.Fatalf("the well-behaved publisher failed: %v", err)
			}
		}
		return float64(n) / time.Since(start).Seconds()
	}
	// Warm up (the stream's table is created on the first publish), then
	// the throughput without attacks.
	measure(time.Second)
	rssBefore := rssBytes(t, pid)
	before := measure(wireWindow / 2)

	// RSS sampled throughout the attacks.
	var peak, peakAnon atomic.Int64
	peak.Store(rssBefore)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-p.exited:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if r, anon, err := readRSS(pid); err == nil {
				peak.Store(max(peak.Load(), r))
				peakAnon.Store(max(peakAnon.Load(), anon))
			}
		}
	}()

	a := &attacks{t: t}
	defer a.closeAll()
	attackCtx, stopAttacks := context.WithCancel(ctx)
	var wg sync.WaitGroup
	run := func(f func(ctx context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(attackCtx) }()
	}

	// MQTT TCP: a QoS 1 subscriber of the firehose that never reads.
	run(func(ctx context.Context) { a.firehose(ctx, p.MQTT) })
	a.keep("mqtt slow subscriber (qos 1)", a.slowMQTTSubscriber(p.MQTT, "slow-tcp", 1), false)
	a.mqttFrames("mqtt", func() net.Conn { return a.dial(p.MQTT) })
	// MQTT WebSocket: a QoS 0 one, the same MQTT attacks inside WebSocket
	// messages, and attacks on the WebSocket layer itself.
	a.keep("ws slow subscriber (qos 0)", a.slowWSSubscriber(p.MQTTWS, "slow-ws", 0), false)
	a.mqttFrames("ws", func() net.Conn { return a.dialWS(p.MQTTWS) })
	a.wsFrames(p.MQTTWS)
	// Kafka, edge and cloud; Pulsar.
	a.kafkaFrames(p.Kafka, "edge kafka")
	a.kafkaFrames(p.CloudKafka, "cloud kafka")
	a.keep("edge kafka slow reader (metadata)", a.kafkaSlowReader(ctx, p.Kafka, metadataRequest), false)
	a.pulsarFrames(p.Pulsar)
	// The cloud's slow readers read the firehose's stream once it has
	// rows: lots to send.
	run(func(ctx context.Context) {
		select { // the firehose's first commits (every 200ms)
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
		a.keep("cloud kafka slow reader (fetch)", a.kafkaSlowReader(ctx, p.CloudKafka, fetchRequest), false)
		a.keep("pulsar slow consumer", a.pulsarSlowConsumer(p.Pulsar), false)
	})
	// HTTP: the REST catalog and the status port; peer links.
	a.httpAttacks(ctx, p.Catalog, "rest", "/v1/namespaces/factory/tables/telemetry")
	a.httpAttacks(ctx, p.HTTP, "http", "/metrics")
	a.peerFrames(p.Peer)

	with := measure(wireWindow)
	stopAttacks()
	wg.Wait()
	select {
	case <-p.exited:
		t.Fatalf("the node exited during the attacks:\n%s", p.tail(60))
	default:
	}
	// Everything that must be closed by the server is, by now or within
	// the grace of its deadline.
	a.checkClosed(20 * time.Second)
	close(stopSampling)
	<-sampled
	t.Logf("rss before %d MiB, peak %d MiB (anonymous: %d MiB) during %d attack connections (bound %d MiB)",
		rssBefore>>20, peak.Load()>>20, peakAnon.Load()>>20, len(a.conns), wireMemoryBound>>20)
	if peak.Load() > wireMemoryBound {
		t.Errorf("node held %d MiB during the attacks (bound %d MiB)", peak.Load()>>20, wireMemoryBound>>20)
	}
	a.closeAll()
	// The throughput without attacks again, after them: on a machine
	// shared with other work the baseline is the mean of before and after.
	time.Sleep(time.Second)
	after := measure(wireWindow / 2)
	t.Logf("well-behaved MQTT QoS 1 publisher: %.0f msg/s before the attacks, %.0f msg/s during them, %.0f msg/s after (%.2f of the mean, factor required %.2f); firehose %d MiB published",
		before, with, after, with/((before+after)/2), wireThroughputFactor, a.firehoseBytes.Load()>>20)
	// The factor is a throughput figure: held in make bench (benchMode),
	// where the machine is quiet; make test, often beside other work,
	// holds that the publisher is served at all during the attacks.
	switch {
	case benchMode && with < wireThroughputFactor*(before+after)/2:
		t.Errorf("throughput with the attacks %.0f msg/s < %.2f × %.0f msg/s", with, wireThroughputFactor, (before+after)/2)
	case with <= 0:
		t.Errorf("the well-behaved publisher was not served during the attacks (%.0f msg/s before)", before)
	}

	// No acknowledged record lost: in the table, and served by the cloud
	// Kafka side.
	acked := l.acked()
	waitFor(t, 60*time.Second, "every acknowledged publish in the table", func() bool {
		return len(readTable(t, data, "factory.telemetry")) >= acked
	})
	checkRows(t, l, readTable(t, data, "factory.telemetry"))
	kc, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumeTopics("factory.telemetry"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	got := map[string]bool{}
	for len(got) < acked {
		fs := kc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("cloud Kafka consumer: %d of %d records: %v", len(got), acked, err)
		}
		fs.EachRecord(func(r *kgo.Record) { got[idOf(r.Value)] = true })
	}
	for id, s := range l.msgs {
		if s.Acked && !got[id] {
			t.Fatalf("acknowledged %s not served by the cloud Kafka server", id)
		}
	}
	t.Logf("%d acknowledged publishes, all in the table and read back through the cloud Kafka server", acked)
}

// readRSS is the VmRSS and the RssAnon (VmRSS without file-backed pages
// such as the WAL's memory map) of process pid, from /proc.
func readRSS(pid int) (rss, anon int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &rss)
		}
		if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &anon)
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS")
	}
	return rss << 10, anon << 10, nil
}

// attacks holds the attack connections of a test and what each must see.
type attacks struct {
	t             *testing.T
	mu            sync.Mutex
	conns         []attackConn
	firehoseBytes atomic.Int64
}

type attackConn struct {
	name       string
	c          net.Conn
	mustClose  bool // the server must close it (a cap, a deadline)
	closedHere bool
}

// keep records c under name; mustClose says the server has to close it.
func (a *attacks) keep(name string, c net.Conn, mustClose bool) {
	if c == nil {
		return
	}
	a.mu.Lock()
	a.conns = append(a.conns, attackConn{name: name, c: c, mustClose: mustClose})
	a.mu.Unlock()
}

// send writes b on a fresh connection made by dial and keeps it open
// (stalled, never read) for the server to close; with closeAfter the
// attacker closes it at once instead (a truncated frame, then a close).
func (a *attacks) send(name string, dial func() net.Conn, b []byte, closeAfter bool) {
	c := dial()
	if c == nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	c.Write(b) // an error: already closed by the server, which is fine
	if closeAfter {
		c.Close()
		return
	}
	a.keep(name, c, true)
}

func (a *attacks) dial(addr string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		a.t.Errorf("dial %s: %v", addr, err)
		return nil
	}
	return c
}

// checkClosed asserts that every connection the server must close has
// been closed (a read sees EOF or a reset, not a timeout) within d.
func (a *attacks) checkClosed(d time.Duration) {
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, ac := range a.conns {
		if !ac.mustClose {
			continue
		}
		wg.Add(1)
		go func() { // at once: a deadline past makes a Read time out even at EOF
			defer wg.Done()
			ac.c.SetReadDeadline(deadline)
			buf := make([]byte, 64<<10)
			for {
				if _, err := ac.c.Read(buf); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						a.t.Errorf("%s: still open %s after the attacks", ac.name, d)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
}

func (a *attacks) closeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.conns {
		if !a.conns[i].closedHere {
			a.conns[i].c.Close()
			a.conns[i].closedHere = true
		}
	}
}

// MQTT packets (3.1.1: the simplest well-formed ones).

func mqttConnect(id string, keepAlive uint16) []byte {
	body := append(testkit.MQTTString("MQTT"), 4, 0x02)
	body = binary.BigEndian.AppendUint16(body, keepAlive)
	return testkit.MQTTPacket(0x10, append(body, testkit.MQTTString(id)...))
}

func mqttSubscribe(filter string, qos byte) []byte {
	return testkit.MQTTPacket(0x82, append(append([]byte{0, 1}, testkit.MQTTString(filter)...), qos))
}

// firehose publishes 32 KiB QoS 0 messages on hostile/firehose (stream
// mqtt.default) as fast as the node takes them until ctx ends: what the
// slow subscribers are sent.
func (a *attacks) firehose(ctx context.Context, addr string) {
	c, err := mqttClient(ctx, addr, "firehose")
	if err != nil {
		a.t.Errorf("firehose: %v", err)
		return
	}
	defer c.Disconnect(&paho.Disconnect{})
	payload := bytes.Repeat([]byte("f"), 32<<10)
	start := time.Now()
	for ctx.Err() == nil {
		if _, err := c.Publish(ctx, &paho.Publish{Topic: "hostile/firehose", QoS: 0, Payload: payload}); err != nil {
			if ctx.Err() == nil {
				a.t.Errorf("firehose publish: %v", err)
			}
			return
		}
		// At most firehoseRate: lots for a subscriber that does not read,
		// not a flood of the WAL (a QoS 0 flood is another attack).
		if sent := a.firehoseBytes.Add(int64(len(payload))); sent > int64(time.Since(start).Seconds()*firehoseRate) {
			time.Sleep(time.Duration(float64(len(payload)) / firehoseRate * float64(time.Second)))
		}
	}
}

// slowMQTTSubscriber connects, subscribes to the firehose at qos and
// never reads again.
func (a *attacks) slowMQTTSubscriber(addr, id string, qos byte) net.Conn {
	c := a.dial(addr)
	if c == nil {
		return nil
	}
	return a.subscribeThenStall(c, id, qos)
}

func (a *attacks) subscribeThenStall(c net.Conn, id string, qos byte) net.Conn {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(append(mqttConnect(id, 600), mqttSubscribe("hostile/#", qos)...)); err != nil {
		a.t.Errorf("%s: %v", id, err)
		return c
	}
	// CONNACK (4 bytes) and SUBACK (5 bytes).
	buf := make([]byte, 9)
	if _, err := readFull(c, buf); err != nil || buf[0] != 0x20 || buf[4] != 0x90 {
		a.t.Errorf("%s: CONNACK/SUBACK %x: %v", id, buf, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// mqttFrames: half-open, oversized and truncated MQTT packets on the
// connections dial makes.
func (a *attacks) mqttFrames(proto string, dial func() net.Conn) {
	connect := mqttConnect(proto+"-frames", 2) // keep-alive 2s: silence closes it after 3s
	a.send(proto+" half CONNECT, then silence", dial, connect[:7], false)
	a.send(proto+" CONNECT, half a PUBLISH header, then silence", dial, append(append([]byte{}, connect...), 0x32, 0xff), false)
	a.send(proto+" PUBLISH of 256 MiB announced", dial, append(append([]byte{}, connect...), 0x30, 0xff, 0xff, 0xff, 0x7f), false)
	a.send(proto+" CONNECT of 256 MiB announced", dial, []byte{0x10, 0xff, 0xff, 0xff, 0x7f, 0, 4, 'M', 'Q', 'T', 'T'}, false)
	truncated := append(append([]byte{}, connect...), 0x30, 0xe8, 0x07, 0x00, 0x04, 'a', '/', 'b', 'c') // 1000 bytes announced, 6 sent
	a.send(proto+" truncated PUBLISH, then silence", dial, truncated, false)
	a.send(proto+" truncated PUBLISH, then close", dial, truncated, true)
}

// dialWS opens an MQTT WebSocket connection and presents it as a byte
// stream: each Write is one binary message.
func (a *attacks) dialWS(addr string) net.Conn {
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws://"+addr+"/mqtt", nil)
	if err != nil {
		a.t.Errorf("websocket dial %s: %v", addr, err)
		return nil
	}
	return &wsStream{Conn: c.NetConn(), ws: c}
}

type wsStream struct {
	net.Conn
	ws *websocket.Conn
}

func (w *wsStream) Write(b []byte) (int, error) {
	if err := w.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (w *wsStream) Read(b []byte) (int, error) {
	_, m, err := w.ws.ReadMessage()
	return copy(b, m), err
}

func (a *attacks) slowWSSubscriber(addr, id string, qos byte) net.Conn {
	c := a.dialWS(addr)
	if c == nil {
		return nil
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(append(mqttConnect(id, 600), mqttSubscribe("hostile/#", qos)...))
	for got := 0; got < 9; { // CONNACK and SUBACK, in one or two messages
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		if err != nil {
			a.t.Errorf("%s: %v", id, err)
			break
		}
		got += n
	}
	c.SetDeadline(time.Time{})
	return c.(*wsStream).Conn // never read again: the socket underneath
}

// wsFrames: attacks on the WebSocket layer: half an upgrade request, a
// frame header announcing 2^62 bytes, a truncated frame.
func (a *attacks) wsFrames(addr string) {
	dial := func() net.Conn { return a.dial(addr) }
	upgrade := "GET /mqtt HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
	a.send("ws half an upgrade request, then silence", dial, []byte(upgrade[:40]), false)
	raw := func() net.Conn {
		c := dial()
		if c == nil {
			return nil
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte(upgrade))
		buf := make([]byte, 4096)
		n, _ := c.Read(buf)
		if !bytes.Contains(buf[:n], []byte(" 101 ")) {
			a.t.Errorf("ws upgrade: %q", buf[:n])
		}
		c.SetDeadline(time.Time{})
		return c
	}
	huge := []byte{0x82, 0xff, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4} // binary, masked, 2^62 bytes
	a.send("ws frame of 2^62 bytes announced", raw, append(huge, 0, 0, 0, 0), false)
	trunc := []byte{0x82, 0xfe, 0x03, 0xe8, 1, 2, 3, 4, 0x10, 0x10} // 1000 bytes announced, 2 sent
	a.send("ws truncated frame, then silence", raw, trunc, false)
	a.send("ws truncated frame, then close", raw, trunc, true)
}

// Kafka.

func kafkaFrame(req kmsg.Request, corr int32) []byte {
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("hostile")).AppendRequest(nil, req, corr)
}

func metadataRequest() kmsg.Request {
	r := kmsg.NewPtrMetadataRequest()
	r.Version = 9
	return r // all topics
}

func fetchRequest() kmsg.Request {
	r := kmsg.NewPtrFetchRequest()
	r.Version, r.MaxBytes, r.MaxWaitMillis = 11, 16<<20, 0
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "mqtt.default"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 8 << 20
	fp.LogStartOffset = -1
	ft.Partitions = append(ft.Partitions, fp)
	r.Topics = append(r.Topics, ft)
	r.SessionEpoch = -1
	return r
}

// kafkaFrames: half-open, oversized and truncated Kafka frames, before the
// first request (the handshake deadline) and after it (the frame cap).
func (a *attacks) kafkaFrames(addr, name string) {
	dial := func() net.Conn { return a.dial(addr) }
	ready := func() net.Conn { // one good ApiVersions request first
		c := dial()
		if c == nil {
			return nil
		}
		av := kmsg.NewPtrApiVersionsRequest()
		av.Version = 0
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(kafkaFrame(av, 1))
		var sz [4]byte
		if _, err := readFull(c, sz[:]); err != nil {
			a.t.Errorf("%s ApiVersions: %v", name, err)
		}
		readFull(c, make([]byte, binary.BigEndian.Uint32(sz[:])))
		c.SetDeadline(time.Time{})
		return c
	}
	a.send(name+" half a length prefix, then silence", dial, []byte{0, 0}, false)
	a.send(name+" frame of 2 GiB announced", dial, []byte{0x7f, 0xff, 0xff, 0xff, 0, 18}, false)
	a.send(name+" frame of 2 GiB announced after ApiVersions", ready, []byte{0x7f, 0xff, 0xff, 0xff, 0, 0}, false)
	a.send(name+" negative frame length", dial, []byte{0xff, 0xff, 0xff, 0xfe}, false)
	trunc := append([]byte{0, 0, 0x03, 0xe8}, kafkaFrame(metadataRequest(), 7)[4:14]...) // 1000 announced, 10 sent
	a.send(name+" truncated frame, then silence", dial, trunc, false)
	a.send(name+" truncated frame, then close", dial, trunc, true)
	// After the handshake, a truncated frame then silence: the node keeps
	// it until its idle timeout (10 min), one of the connection caps' worth.
	a.keep(name+" truncated frame after ApiVersions, then silence", func() net.Conn {
		c := ready()
		if c != nil {
			c.Write(trunc)
		}
		return c
	}(), false)
}

// kafkaSlowReader pipelines requests whose responses it never reads.
func (a *attacks) kafkaSlowReader(ctx context.Context, addr string, req func() kmsg.Request) net.Conn {
	c := a.dial(addr)
	if c == nil {
		return nil
	}
	go func() {
		for i := int32(0); i < 10000 && ctx.Err() == nil; i++ {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write(kafkaFrame(req(), i)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					continue // the server stopped reading: it is stuck writing to us
				}
				return
			}
		}
	}()
	return c
}

// Pulsar.

func pulsarFrame(cmd *pb.BaseCommand) []byte {
	b, err := proto.Marshal(cmd)
	if err != nil {
		panic(err)
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(4+len(b)))
	out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
	return append(out, b...)
}

func pulsarConnect() []byte {
	return pulsarFrame(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("hostile"), ProtocolVersion: proto.Int32(19)}})
}

// pulsarFrames: half-open, oversized and truncated Pulsar frames.
func (a *attacks) pulsarFrames(addr string) {
	dial := func() net.Conn { return a.dial(addr) }
	connect := pulsarConnect()
	a.send("pulsar half a CONNECT, then silence", dial, connect[:len(connect)/2], false)
	a.send("pulsar frame of 4 GiB announced", dial, []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 4}, false)
	a.send("pulsar frame of 4 GiB announced after CONNECT", dial, append(append([]byte{}, connect...), 0xff, 0xff, 0xff, 0xf0), false)
	a.send("pulsar command size above the frame", dial, []byte{0, 0, 0, 8, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3, 4}, false)
	trunc := append([]byte{0, 0, 0x03, 0xe8}, connect[4:]...) // 1000 announced
	a.send("pulsar truncated frame, then silence", dial, trunc, false)
	a.send("pulsar truncated frame, then close", dial, trunc, true)
}

// pulsarSlowConsumer subscribes to mqtt.default (the firehose), grants a million
// permits and never reads.
func (a *attacks) pulsarSlowConsumer(addr string) net.Conn {
	c := a.dial(addr)
	if c == nil {
		return nil
	}
	var b []byte
	b = append(b, pulsarConnect()...)
	b = append(b, pulsarFrame(&pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String("persistent://tributary/mqtt/default"), Subscription: proto.String("hostile-slow"),
		SubType: pb.CommandSubscribe_Exclusive.Enum(), ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1),
		InitialPosition: pb.CommandSubscribe_Earliest.Enum()}})...)
	b = append(b, pulsarFrame(&pb.BaseCommand{Type: pb.BaseCommand_FLOW.Enum(), Flow: &pb.CommandFlow{
		ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(1_000_000)}})...)
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		a.t.Errorf("pulsar slow consumer: %v", err)
	}
	return c
}

// HTTP.

// httpAttacks: a slowloris request head, a head above the header cap, a
// body announced far above the body cap, a truncated body, and pipelined
// GETs of path never read.
func (a *attacks) httpAttacks(ctx context.Context, addr, name, path string) {
	dial := func() net.Conn { return a.dial(addr) }
	a.send(name+" half a request head, then silence", dial, []byte("GET "+path+" HTTP/1.1\r\nHost: x\r\nX-Slow: "), false)
	big := "GET " + path + " HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 1<<20) + "\r\n\r\n"
	a.send(name+" request head of 1 MiB", dial, []byte(big), false)
	post := "POST /v1/namespaces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
	// A body announced far above the cap whose first 64 KiB come, then
	// nothing: net/http has no deadline on a body (ReadTimeout would cut
	// long handlers), so the node keeps it, one of the connection caps'
	// worth; memory is what the test bounds.
	a.keep(name+" body of 1 TiB announced, 64 KiB sent, then silence", func() net.Conn {
		c := dial()
		if c != nil {
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			c.Write(append([]byte(fmt.Sprintf(post, int64(1)<<40)), bytes.Repeat([]byte("{"), 64<<10)...))
		}
		return c
	}(), false)
	a.send(name+" truncated body, then close", dial, []byte(fmt.Sprintf(post, 1000)+`{"namespace":`), true)
	// Pipelined requests whose responses are never read.
	c := dial()
	if c == nil {
		return
	}
	go func() {
		req := []byte("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		for i := 0; i < 100000 && ctx.Err() == nil; i++ {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write(req); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					continue
				}
				return
			}
		}
	}()
	a.keep(name+" pipelined GETs never read", c, false)
}

// Peer links.

// peerFrames: half-open, oversized and truncated hello frames at the peer
// listener (8-byte header after the length: kind, type, id).
func (a *attacks) peerFrames(addr string) {
	dial := func() net.Conn { return a.dial(addr) }
	a.send("peer half a frame header, then silence", dial, []byte{0, 0}, false)
	a.send("peer frame of 4 GiB announced", dial, []byte{0xff, 0xff, 0xff, 0xff, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1}, false)
	a.send("peer hello of 64 MiB announced", dial, []byte{0x04, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1}, false)
	trunc := []byte{0, 0, 0x03, 0xe8, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 'h', 'i'} // 1000 announced
	a.send("peer truncated hello, then silence", dial, trunc, false)
	a.send("peer truncated hello, then close", dial, trunc, true)
}
