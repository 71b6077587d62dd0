package consume

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/tabletest"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/tables"
)

const cloudStream = "factory.telemetry"

// cloudEnv is a temp SQLite catalog + file warehouse with one stream.
type cloudEnv struct {
	t    testing.TB
	cat  *tables.Catalog
	dir  string
	mu   sync.Mutex
	next map[int32]int64
	rows map[int32][]*tributary.Record
	ts   int64
	// quiet discards the server's log (fuzz targets may not log through
	// testing.F).
	quiet bool
	// auth, when set, is the servers' Authority.
	auth *auth.Authority
}

func newCloudEnv(t testing.TB, nodes ...string) *cloudEnv {
	t.Helper()
	dir := t.TempDir()
	cat, err := tables.Open(context.Background(), tables.Config{
		URI:       "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	e := &cloudEnv{t: t, cat: cat, dir: dir, next: map[int32]int64{}, rows: map[int32][]*tributary.Record{},
		ts: time.Now().Add(-time.Hour).UnixMicro()}
	for _, n := range nodes {
		if _, err := cat.AllocatePartition(context.Background(), cloudStream, n); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// commit writes n records of partition p as one data file and commits it.
func (e *cloudEnv) commit(p int32, n int, valueSize int) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	from := e.next[p]
	recs := make([]*tributary.Record, n)
	for i := range recs {
		off := from + int64(i)
		e.ts += 1000 // 1 ms apart
		r := &tributary.Record{Stream: cloudStream, Partition: p, Offset: off, Timestamp: e.ts,
			Topic: "factory/x", Value: bytes.Repeat([]byte{byte(off)}, valueSize), Source: "kafka", ClientID: "c", Node: "n"}
		copy(r.Value, fmt.Sprintf("p%d-o%d", p, off))
		if off%3 == 0 {
			r.Key = []byte(fmt.Sprintf("k%d", off))
			r.Headers = []tributary.Header{{Key: "h", Value: []byte("v")}, {Key: "h", Value: nil}}
			r.ProducerTimestamp = 1700000000000 + off
		}
		recs[i] = r
	}
	tabletest.Commit(e.t, e.cat, cloudStream, recs)
	e.next[p] = from + int64(n)
	e.rows[p] = append(e.rows[p], recs...)
}

func (e *cloudEnv) start(t testing.TB) *Server {
	t.Helper()
	return e.startWith(t, nil)
}

// startWith starts a server whose config set (if not nil) changes first.
func (e *cloudEnv) startWith(t testing.TB, set func(*Config)) *Server {
	t.Helper()
	var w io.Writer = testWriter{t}
	if e.quiet {
		w = io.Discard
	}
	cfg := Config{Config: kafka.Config{Addr: "127.0.0.1:0", Auth: e.auth, Logger: slog.New(slog.NewTextHandler(w, nil))},
		OffsetsDB: "sqlite://" + filepath.Join(e.dir, "catalog.db")}
	if set != nil {
		set(&cfg)
	}
	cs, err := NewServer(cfg, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cs.Close(ctx)
	})
	return cs
}

// checkServed compares a fetched record with the row it came from.
func checkServed(t *testing.T, want *tributary.Record, got *kgo.Record) {
	t.Helper()
	ts := want.Timestamp / 1000
	if want.ProducerTimestamp != 0 {
		ts = want.ProducerTimestamp
	}
	switch {
	case got.Partition != want.Partition || got.Offset != want.Offset:
		t.Fatalf("got %d@%d, want %d@%d", got.Offset, got.Partition, want.Offset, want.Partition)
	case !bytes.Equal(got.Value, want.Value) || !bytes.Equal(got.Key, want.Key) || (got.Key == nil) != (want.Key == nil):
		t.Fatalf("offset %d: key/value differ", want.Offset)
	case got.Timestamp.UnixMilli() != ts:
		t.Fatalf("offset %d: timestamp %d, want %d", want.Offset, got.Timestamp.UnixMilli(), ts)
	case len(got.Headers) != len(want.Headers):
		t.Fatalf("offset %d: %d headers, want %d", want.Offset, len(got.Headers), len(want.Headers))
	}
	for i, h := range want.Headers {
		if got.Headers[i].Key != h.Key || !bytes.Equal(got.Headers[i].Value, h.Value) {
			t.Fatalf("offset %d: header %d differs", want.Offset, i)
		}
	}
}

// consume polls cl until n records arrived (or the timeout passes).
func consume(t *testing.T, cl *kgo.Client, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d records before the timeout", len(out), n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

func TestCloudGroupConsumeAndResume(t *testing.T) {
	e := newCloudEnv(t, "n1", "n2")
	// Two files in partition 0 (the second spans two row groups), one in 1.
	e.commit(0, 100, 50)
	e.commit(0, tables.RowGroupRows+10, 20)
	e.commit(1, 300, 1000)
	cs := e.start(t)

	opts := []kgo.Opt{kgo.SeedBrokers(cs.Addr()), kgo.ConsumerGroup("g1"), kgo.ConsumeTopics(cloudStream),
		kgo.DisableAutoCommit(), kgo.FetchMaxBytes(256 << 10), kgo.FetchMaxPartitionBytes(64 << 10)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	total := len(e.rows[0]) + len(e.rows[1])
	got := consume(t, cl, 5000, 30*time.Second)
	if err := cl.CommitRecords(context.Background(), got...); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// A new server on the same database resumes from the committed offsets.
	cs2 := e.start(t)
	opts[0] = kgo.SeedBrokers(cs2.Addr())
	cl2, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	got = append(got, consume(t, cl2, total-len(got), 30*time.Second)...)
	next := map[int32]int64{}
	for _, r := range got {
		if r.Offset != next[r.Partition] {
			t.Fatalf("partition %d: offset %d, want %d (lost or redelivered)", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
		checkServed(t, e.rows[r.Partition][r.Offset], r)
	}
	if len(got) != total {
		t.Fatalf("got %d records, want %d", len(got), total)
	}
}

func TestCloudListOffsetsAndFetchEdges(t *testing.T) {
	e := newCloudEnv(t, "n1")
	e.commit(0, 50, 10)
	e.commit(0, 50, 10)
	cs := e.start(t)
	rc := kafkatest.Dial(t, cs.Addr())

	lo := func(ts int64) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		req.SetVersion(4)
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = cloudStream
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = 0, ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return rc.RoundTrip(req).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	}
	if p := lo(-2); p.ErrorCode != 0 || p.Offset != 0 {
		t.Fatalf("earliest: %+v", p)
	}
	if p := lo(-1); p.ErrorCode != 0 || p.Offset != 100 {
		t.Fatalf("latest: %+v", p)
	}
	want := e.rows[0][73]
	if p := lo(want.Timestamp / 1000); p.Offset != 73 {
		t.Fatalf("by time: offset %d, want 73", p.Offset)
	}
	if p := lo(e.ts/1000 + 1); p.Offset != -1 {
		t.Fatalf("after the last record: offset %d, want -1", p.Offset)
	}

	fetch := func(off int64, wait int32, partMax int32) kmsg.FetchResponseTopicPartition {
		return rawFetchWait(t, rc, off, wait, 1<<20, partMax)
	}
	// A tiny partition max still returns one batch, with a correct CRC:
	// the whole stored batch holding offset 42 (the client skips the
	// records before its offset, as from a Kafka broker).
	p := fetch(42, 0, 1)
	if p.ErrorCode != 0 || p.HighWatermark != 100 {
		t.Fatalf("fetch: %+v", p)
	}
	var b kmsg.RecordBatch
	if err := b.ReadFrom(p.RecordBatches); err != nil {
		t.Fatal(err)
	}
	if b.FirstOffset > 42 || b.FirstOffset+int64(b.NumRecords) <= 42 || int32(crc32c(p.RecordBatches[21:])) != b.CRC ||
		len(p.RecordBatches) != int(b.Length)+12 {
		t.Fatalf("batch: first %d, %d records, crc %x", b.FirstOffset, b.NumRecords, b.CRC)
	}
	// At the mark: empty with the high-water mark, after the long poll.
	start := time.Now()
	if p := fetch(100, 300, 1<<20); p.ErrorCode != 0 || len(p.RecordBatches) != 0 || p.HighWatermark != 100 {
		t.Fatalf("fetch at mark: %+v", p)
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Fatalf("long poll returned after %v", el)
	}
	// A long poll returns as soon as a new commit brings data.
	go func() { time.Sleep(300 * time.Millisecond); e.commit(0, 5, 10) }()
	start = time.Now()
	p = fetch(100, 10000, 1<<20)
	if el := time.Since(start); len(p.RecordBatches) == 0 || el > 3*time.Second {
		t.Fatalf("long poll: %d bytes after %v", len(p.RecordBatches), el)
	}
	if p.HighWatermark != 105 {
		t.Fatalf("high-water mark %d, want 105", p.HighWatermark)
	}
	// Unknown partition and topic.
	if p := fetch(0, 0, 100); p.ErrorCode != 0 {
		t.Fatalf("fetch 0: %+v", p)
	}
}

func TestCloudApiVersionsAdvertiseConsumeOnly(t *testing.T) {
	e := newCloudEnv(t, "n1")
	cs := e.start(t)
	rc := kafkatest.Dial(t, cs.Addr())
	resp := rc.RoundTrip(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
	keys := map[int16]bool{}
	for _, k := range resp.ApiKeys {
		keys[k.ApiKey] = true
	}
	for _, k := range []int16{1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18} {
		if !keys[k] {
			t.Errorf("key %d not advertised", k)
		}
	}
	if keys[22] || len(keys) != len(apis) {
		t.Errorf("advertised %v", keys)
	}
}

// TestCloudCoordinatorAgreement: two cloud servers configured with the
// same peer list name the same coordinator for every group, and only
// that one accepts the group's requests.
func TestCloudCoordinatorAgreement(t *testing.T) {
	e := newCloudEnv(t, "n1")
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	var servers []*Server
	for _, a := range addrs {
		cfg := Config{Config: kafka.Config{Addr: a, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))},
			Peers: addrs, OffsetsDB: "sqlite://" + filepath.Join(e.dir, "catalog.db")}
		cs, err := NewServer(cfg, e.cat)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close(context.Background()) })
		servers = append(servers, cs)
	}
	conns := []*kafkatest.Conn{kafkatest.Dial(t, addrs[0]), kafkatest.Dial(t, addrs[1])}
	owners := map[int32]int{}
	for g := range 20 {
		group := fmt.Sprintf("group-%d", g)
		var ids []int32
		for _, rc := range conns {
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.SetVersion(3)
			req.CoordinatorKey = group
			resp := rc.RoundTrip(req).(*kmsg.FindCoordinatorResponse)
			if resp.ErrorCode != 0 {
				t.Fatalf("find coordinator: %d", resp.ErrorCode)
			}
			ids = append(ids, resp.NodeID)
		}
		if ids[0] != ids[1] {
			t.Fatalf("%s: servers disagree: %v", group, ids)
		}
		owners[ids[0]]++
		for i, rc := range conns {
			req := kmsg.NewPtrHeartbeatRequest()
			req.SetVersion(3)
			req.Group, req.MemberID = group, "m"
			code := rc.RoundTrip(req).(*kmsg.HeartbeatResponse).ErrorCode
			isCoord := kafka.BrokerID(addrs[i]) == ids[0]
			if isCoord && code != kafka.CodeUnknownMemberID || !isCoord && code != kafka.CodeNotCoordinator {
				t.Fatalf("%s on server %d (coordinator %v): heartbeat error %d", group, i, isCoord, code)
			}
		}
	}
	if len(owners) != 2 {
		t.Fatalf("20 groups all on one server: %v", owners)
	}
	_ = servers
}
