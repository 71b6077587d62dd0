package produce

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka/kafkatest"
	"github.com/tributary-io/tributary/wal"
)

// fakeBackend is an in-memory Backend and tributary.Appender. It keeps every appended record, so
// its ProducerRuns (RunsFromRecords over them) plays the part of the WAL
// plus snapshot that the node persists: a new Server over the same
// fakeBackend is a restart.
type fakeBackend struct {
	node    string
	brokers []Broker

	mu      sync.Mutex
	streams map[string][]PartitionInfo
	parts   map[string][]*tributary.Record // stream/partition -> records, index = offset
	nextPID int64
	appends int
	budget  atomic.Bool // true: an append fails with wal.ErrBudgetExceeded
	unrepl  atomic.Bool // true: an append fails as too few replicas (refuse policy)
	// unreplAfter, true: Submit stores the batch, then reports that
	// the replicas did not confirm it (tributary.ErrAfterAppend), as the
	// node does when the replication wait fails after the WAL's fsync.
	unreplAfter atomic.Bool
	// fencedAfter, true: Submit stores the batch, then reports that a
	// replica owns the partition now (replica.ErrFenced after the append).
	fencedAfter atomic.Bool
	lost        atomic.Bool // true: an append fails with ErrNotLeader (ownership moved)
	appendFn    func()      // called inside Append (delays, fault injection)
	// refuse, when set, decides each append in turn (its records):
	// non-nil refuses it (fault injection in the middle of a pipeline).
	refuse func([]*tributary.Record) error

	queueOnce  sync.Once
	queued     atomic.Int64     // Submit calls
	topicCalls atomic.Int64     // Topic calls
	queue      chan *fakeAppend // Submit's, applied in order by one goroutine, as the WAL's committer does
}

// fakeAppend is one queued Submit; failed is set once it was not
// appended (read by the applier only).
type fakeAppend struct {
	ctx    context.Context
	after  *fakeAppend
	batch  *tributary.Batch
	done   func(error)
	failed bool
}

// Submit queues the append to the fake's
// applier, which applies appends one at a time in queue order (Append's
// checks, then after's chain) and calls done after each. It keeps the
// batch's records as the WAL's Read gives them (wal.Batch.Decode).
func (f *fakeBackend) Submit(ctx context.Context, w *tributary.Write, _ tributary.Wait, done func(error)) (tributary.Ticket, error) {
	b, after := w.Batch, w.After
	f.queueOnce.Do(func() {
		f.queue = make(chan *fakeAppend, 1024)
		go func() {
			for a := range f.queue {
				a.batch.Node = f.node
				recs, err := (*wal.Batch)(a.batch).Decode(0)
				if err == nil && a.after != nil && a.after.failed {
					err = fmt.Errorf("fake: %w", ErrPredecessorFailed)
				} else if err == nil && f.refuse != nil {
					err = f.refuse(recs)
				}
				if err == nil {
					err = f.store(a.ctx, recs...)
				}
				if err == nil {
					a.batch.Offset = recs[0].Offset
				}
				a.failed = err != nil
				a.after = nil
				if err == nil && f.unreplAfter.Load() {
					err = fmt.Errorf("%w: %w", tributary.ErrAfterAppend, fmt.Errorf("replica: replication_policy refuse: %w", tributary.ErrNotReplicated))
				}
				if err == nil && f.fencedAfter.Load() {
					err = fmt.Errorf("%w: %w", tributary.ErrAfterAppend, fmt.Errorf("replica: partition fenced: another node took it over: %w", tributary.ErrFenced))
				}
				a.done(err)
			}
		}()
	})
	f.queued.Add(1)
	a := &fakeAppend{ctx: ctx, batch: b, done: done}
	if t, ok := after.(*fakeAppend); ok {
		a.after = t
	}
	f.queue <- a
	return a, nil
}

// Append is Submit, waiting.
func (f *fakeBackend) Append(ctx context.Context, w *tributary.Write) error {
	ch := make(chan error, 1)
	if _, err := f.Submit(ctx, w, tributary.Durable, func(err error) { ch <- err }); err != nil {
		return err
	}
	return <-ch
}

// Confirm confirms at once: the fake has no replicas to wait for.
func (f *fakeBackend) Confirm(context.Context, *tributary.Record) error { return nil }

func newFakeBackend(node string) *fakeBackend {
	return &fakeBackend{
		node:    node,
		brokers: []Broker{{NodeID: node}},
		streams: make(map[string][]PartitionInfo),
		parts:   make(map[string][]*tributary.Record),
		nextPID: 1000,
	}
}

func pkeyOf(stream string, p int32) string { return fmt.Sprintf("%s/%d", stream, p) }

func (f *fakeBackend) NodeID() string    { return f.node }
func (f *fakeBackend) Brokers() []Broker { return append([]Broker(nil), f.brokers...) }

func (f *fakeBackend) Topics(ctx context.Context) ([]TopicInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []TopicInfo
	for s, ps := range f.streams {
		out = append(out, TopicInfo{Stream: s, Partitions: append([]PartitionInfo(nil), ps...)})
	}
	return out, nil
}

func (f *fakeBackend) Topic(ctx context.Context, stream string) (TopicInfo, error) {
	f.topicCalls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	ps, ok := f.streams[stream]
	if !ok {
		return TopicInfo{}, ErrUnknownStream
	}
	return TopicInfo{Stream: stream, Partitions: append([]PartitionInfo(nil), ps...)}, nil
}

func (f *fakeBackend) EnsureStream(ctx context.Context, stream string) (TopicInfo, error) {
	f.mu.Lock()
	if _, ok := f.streams[stream]; !ok {
		f.streams[stream] = []PartitionInfo{{Partition: 0, Leader: f.node}}
	}
	f.mu.Unlock()
	return f.Topic(ctx, stream)
}

// addStream adds a stream with the given partition owners.
func (f *fakeBackend) addStream(stream string, owners ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ps []PartitionInfo
	for i, o := range owners {
		ps = append(ps, PartitionInfo{Partition: int32(i), Leader: o})
	}
	f.streams[stream] = ps
}

// store keeps recs (an append's records) or fails as set.
func (f *fakeBackend) store(ctx context.Context, recs ...*tributary.Record) error {
	if f.appendFn != nil {
		f.appendFn()
	}
	if f.budget.Load() {
		return wal.ErrBudgetExceeded
	}
	if f.unrepl.Load() {
		return fmt.Errorf("replica: replication_policy refuse: %w", tributary.ErrNotReplicated)
	}
	if f.lost.Load() {
		return fmt.Errorf("%w: partition taken over", ErrNotLeader)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.appends++
	for _, r := range recs {
		k := pkeyOf(r.Stream, r.Partition)
		c := *r
		c.Key = clone(r.Key)
		c.Value = clone(r.Value)
		c.Headers = nil
		for _, h := range r.Headers {
			c.Headers = append(c.Headers, tributary.Header{Key: h.Key, Value: clone(h.Value)})
		}
		c.Offset = int64(len(f.parts[k]))
		r.Offset = c.Offset
		f.parts[k] = append(f.parts[k], &c)
	}
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (f *fakeBackend) AllocateProducerID(ctx context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextPID++
	return f.nextPID, nil
}

func (f *fakeBackend) ProducerRuns(ctx context.Context) ([]ProducerRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.parts))
	for k := range f.parts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var all []*tributary.Record
	for _, k := range keys {
		all = append(all, f.parts[k]...)
	}
	return RunsFromRecords(all, dedupWindow), nil
}

func (f *fakeBackend) records(stream string, p int32) []*tributary.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*tributary.Record(nil), f.parts[pkeyOf(stream, p)]...)
}

// startServer starts a server on 127.0.0.1:0 and closes it with the test.
func startServer(t testing.TB, cfg Config, b interface {
	Backend
	tributary.Appender
}) *Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	s, err := NewServer(cfg, b, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// produceReq builds a Produce request for one partition.
func produceReq(version int16, topic string, partition int32, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version = version
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// produceOne sends one batch and returns the partition response.
func produceOne(rc *kafkatest.Conn, topic string, partition int32, batch []byte) kmsg.ProduceResponseTopicPartition {
	rc.T.Helper()
	resp := rc.RoundTrip(produceReq(9, topic, partition, batch)).(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		rc.T.Fatalf("produce response shape: %+v", resp)
	}
	return resp.Topics[0].Partitions[0]
}

// testWriter sends server logs to t.Log (shown for failing tests only).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The record-batch layout (kafka/batch.go) for tests that build batches.
const (
	batchHeaderLen = 61
	crcOffset      = 17
	crcStart       = 21
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
