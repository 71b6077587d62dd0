package produce

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

func initProducerID(t *testing.T, rc *kafkatest.Conn) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.Version = 4
	resp := rc.RoundTrip(req).(*kmsg.InitProducerIDResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("InitProducerId error %d", resp.ErrorCode)
	}
	return resp.ProducerID, resp.ProducerEpoch
}

func recs(n int, tag string) []kafkatest.Rec {
	out := make([]kafkatest.Rec, n)
	for i := range out {
		out[i] = kafkatest.Rec{Key: []byte(tag), Value: []byte{byte(i)}, TSDelta: int64(i)}
	}
	return out
}

// TestIdempotenceScript drives one producer through the sequence rules with
// raw requests, then restarts the server over the same backend (which
// recovers producer state from the stored records) and checks that retries
// are still deduplicated.
func TestIdempotenceScript(t *testing.T) {
	be := newFakeBackend("edge-1")
	const topic = "factory.idem"
	be.addStream(topic, "edge-1")
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	pid, epoch := initProducerID(t, rc)
	if epoch != 0 || pid <= 0 {
		t.Fatalf("pid %d epoch %d", pid, epoch)
	}
	b0 := kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 0, FirstTS: 1700000000000}, recs(3, "a")...)
	b1 := kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 3, FirstTS: 1700000000000}, recs(2, "b")...)
	b2 := kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 5}, recs(4, "c")...)
	steps := []struct {
		name   string
		batch  []byte
		code   int16
		offset int64
		total  int
	}{
		{"first batch", b0, 0, 0, 3},
		{"replay of first batch", b0, 0, 0, 3},
		{"second batch", b1, 0, 3, 5},
		{"replay of older batch", b0, 0, 0, 5},
		{"replay of second batch", b1, 0, 3, 5},
		{"gap in sequence", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 10}, recs(1, "x")...), kafka.CodeOutOfOrderSequence, -1, 5},
		{"overlapping, not a known batch", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 4}, recs(3, "x")...), kafka.CodeOutOfOrderSequence, -1, 5},
		{"third batch", b2, 0, 5, 9},
		{"new epoch must start at 0", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 1, Seq: 9}, recs(1, "x")...), kafka.CodeOutOfOrderSequence, -1, 9},
		{"new epoch", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 1, Seq: 0}, recs(2, "e1")...), 0, 9, 11},
		{"stale epoch", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 9}, recs(1, "x")...), kafka.CodeInvalidProducerEpoch, -1, 11},
		{"stale epoch replay", b2, kafka.CodeInvalidProducerEpoch, -1, 11},
		{"unknown producer, any sequence", kafkatest.Batch(kafkatest.BatchOpts{PID: 77, Epoch: 3, Seq: 41}, recs(2, "u")...), 0, 11, 13},
		{"non-idempotent", kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(2, "n")...), 0, 13, 15},
		{"non-idempotent again appends again", kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(2, "n")...), 0, 15, 17},
	}
	for _, st := range steps {
		p := produceOne(rc, topic, 0, st.batch)
		if p.ErrorCode != st.code || (st.code == 0 && p.BaseOffset != st.offset) {
			t.Fatalf("%s: code %d offset %d, want code %d offset %d (%v)", st.name, p.ErrorCode, p.BaseOffset, st.code, st.offset, p.ErrorMessage)
		}
		if n := len(be.records(topic, 0)); n != st.total {
			t.Fatalf("%s: backend has %d records, want %d", st.name, n, st.total)
		}
	}
	got := be.records(topic, 0)
	if r := got[1]; r.ProducerID != pid || r.ProducerEpoch != 0 || r.Sequence != 1 || r.ProducerTimestamp != 1700000000001 || r.ClientID != "raw-client" {
		t.Fatalf("record 1 producer fields %+v", r)
	}
	if st := s.Stats(); st.DuplicateBatch != 3 {
		t.Fatalf("stats %+v", st)
	}

	// Restart: a new server over the same backend.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, Config{}, be)
	rc2 := kafkatest.Dial(t, s2.Addr())
	after := []struct {
		name   string
		batch  []byte
		code   int16
		offset int64
		total  int
	}{
		{"replay of new-epoch batch after restart", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 1, Seq: 0}, recs(2, "e1")...), 0, 9, 17},
		{"replay of unknown-producer batch after restart", kafkatest.Batch(kafkatest.BatchOpts{PID: 77, Epoch: 3, Seq: 41}, recs(2, "u")...), 0, 11, 17},
		{"stale epoch after restart", b2, kafka.CodeInvalidProducerEpoch, -1, 17},
		{"gap after restart", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 1, Seq: 5}, recs(1, "x")...), kafka.CodeOutOfOrderSequence, -1, 17},
		{"next batch after restart", kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 1, Seq: 2}, recs(1, "e1b")...), 0, 17, 18},
	}
	for _, st := range after {
		p := produceOne(rc2, topic, 0, st.batch)
		if p.ErrorCode != st.code || (st.code == 0 && p.BaseOffset != st.offset) {
			t.Fatalf("%s: code %d offset %d, want code %d offset %d", st.name, p.ErrorCode, p.BaseOffset, st.code, st.offset)
		}
		if n := len(be.records(topic, 0)); n != st.total {
			t.Fatalf("%s: backend has %d records, want %d", st.name, n, st.total)
		}
	}
}

// TestStoredButNotReplicated: a batch the WAL made durable whose replicas
// did not confirm it is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND; it stays
// stored, and the producer's retry of it is answered as a duplicate with
// its offset, never stored twice; the next batch follows it. A
// non-idempotent batch in the same state is stored again on retry, as
// with Kafka.
func TestStoredButNotReplicated(t *testing.T) {
	be := newFakeBackend("edge-1")
	const topic = "factory.after"
	be.addStream(topic, "edge-1")
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	pid, _ := initProducerID(t, rc)
	b0 := kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 0}, recs(3, "a")...)
	b1 := kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Epoch: 0, Seq: 3}, recs(2, "b")...)
	plain := kafkatest.Batch(kafkatest.BatchOpts{PID: -1, Epoch: -1, Seq: -1}, recs(1, "n")...)

	be.unreplAfter.Store(true)
	p := produceOne(rc, topic, 0, b0)
	if p.ErrorCode != kafka.CodeNotEnoughReplicasAfterAppend {
		t.Fatalf("code %d (%v), want %d", p.ErrorCode, p.ErrorMessage, kafka.CodeNotEnoughReplicasAfterAppend)
	}
	if n := len(be.records(topic, 0)); n != 3 {
		t.Fatalf("backend has %d records, want 3 (stored)", n)
	}
	// Still not replicated: the retry is a duplicate all the same.
	if p := produceOne(rc, topic, 0, b0); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("retry: code %d offset %d, want a duplicate at 0", p.ErrorCode, p.BaseOffset)
	}
	be.unreplAfter.Store(false)
	if p := produceOne(rc, topic, 0, b0); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("second retry: code %d offset %d", p.ErrorCode, p.BaseOffset)
	}
	if p := produceOne(rc, topic, 0, b1); p.ErrorCode != 0 || p.BaseOffset != 3 {
		t.Fatalf("next batch: code %d offset %d, want 3", p.ErrorCode, p.BaseOffset)
	}
	if n := len(be.records(topic, 0)); n != 5 {
		t.Fatalf("backend has %d records, want 5: a retry was stored twice", n)
	}
	be.unreplAfter.Store(true)
	if p := produceOne(rc, topic, 0, plain); p.ErrorCode != kafka.CodeNotEnoughReplicasAfterAppend {
		t.Fatalf("non-idempotent: code %d", p.ErrorCode)
	}
	be.unreplAfter.Store(false)
	if p := produceOne(rc, topic, 0, plain); p.ErrorCode != 0 || p.BaseOffset != 6 {
		t.Fatalf("non-idempotent retry: code %d offset %d, want 6", p.ErrorCode, p.BaseOffset)
	}
	if st := s.Stats(); st.DuplicateBatch != 2 {
		t.Fatalf("stats %+v, want 2 duplicates", st)
	}
}

// TestIdempotenceAfterRestartMergedRuns checks that runs rebuilt from
// records (several batches merged) still deduplicate each original batch.
func TestIdempotenceAfterRestartMergedRuns(t *testing.T) {
	be := newFakeBackend("edge-1")
	const topic = "factory.merged"
	be.addStream(topic, "edge-1")
	s := startServer(t, Config{}, be)
	rc := kafkatest.Dial(t, s.Addr())
	pid, _ := initProducerID(t, rc)
	var batches [][]byte
	seq := int32(0)
	for i := range 8 {
		n := 1 + i%3
		b := kafkatest.Batch(kafkatest.BatchOpts{PID: pid, Seq: seq}, recs(n, "m")...)
		seq += int32(n)
		batches = append(batches, b)
		if p := produceOne(rc, topic, 0, b); p.ErrorCode != 0 {
			t.Fatalf("batch %d: %d", i, p.ErrorCode)
		}
	}
	want := be.records(topic, 0)
	s.Close(context.Background())
	s2 := startServer(t, Config{}, be)
	rc2 := kafkatest.Dial(t, s2.Addr())
	for i, b := range batches {
		p := produceOne(rc2, topic, 0, b)
		seq0 := int32(0)
		for j := range i {
			seq0 += int32(1 + j%3)
		}
		if p.ErrorCode != 0 || p.BaseOffset != int64(seq0) {
			t.Fatalf("replay %d after restart: code %d offset %d, want offset %d", i, p.ErrorCode, p.BaseOffset, seq0)
		}
	}
	if n := len(be.records(topic, 0)); n != len(want) {
		t.Fatalf("replays appended: %d records, want %d", n, len(want))
	}
}

func TestProducerEntryCheck(t *testing.T) {
	run := func(epoch int16, first, last int32, off int64) ProducerRun {
		return ProducerRun{ProducerEpoch: epoch, FirstSeq: first, LastSeq: last, FirstOffset: off}
	}
	tests := []struct {
		name        string
		runs        []ProducerRun
		epoch       int16
		first, last int32
		wantOff     int64
		wantDup     bool
		wantCode    int16
	}{
		{"unknown producer", nil, 0, 17, 18, 0, false, 0},
		{"in sequence", []ProducerRun{run(0, 0, 4, 10)}, 0, 5, 9, 0, false, 0},
		{"duplicate", []ProducerRun{run(0, 0, 4, 10)}, 0, 0, 4, 10, true, 0},
		{"duplicate inside merged run", []ProducerRun{run(0, 0, 9, 10)}, 0, 3, 5, 13, true, 0},
		{"out of order", []ProducerRun{run(0, 0, 4, 10)}, 0, 6, 6, 0, false, kafka.CodeOutOfOrderSequence},
		{"stale epoch", []ProducerRun{run(2, 0, 4, 10)}, 1, 5, 5, 0, false, kafka.CodeInvalidProducerEpoch},
		{"new epoch from 0", []ProducerRun{run(2, 0, 4, 10)}, 3, 0, 0, 0, false, 0},
		{"new epoch not from 0", []ProducerRun{run(2, 0, 4, 10)}, 3, 5, 5, 0, false, kafka.CodeOutOfOrderSequence},
		{"wrap in sequence", []ProducerRun{run(0, math.MaxInt32-1, math.MaxInt32, 10)}, 0, 0, 3, 0, false, 0},
		{"duplicate across wrap", []ProducerRun{run(0, math.MaxInt32-1, 2, 10)}, 0, 0, 1, 12, true, 0},
		{"dedup window is five", []ProducerRun{run(0, 0, 0, 0), run(0, 1, 1, 1), run(0, 2, 2, 2), run(0, 3, 3, 3), run(0, 4, 4, 4), run(0, 5, 5, 5)}, 0, 0, 0, 0, false, kafka.CodeOutOfOrderSequence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &producerEntry{}
			for _, r := range tt.runs {
				e.add(r)
			}
			off, dup, inflight, code := e.check(tt.epoch, tt.first, tt.last)
			if off != tt.wantOff || dup != tt.wantDup || inflight || code != tt.wantCode {
				t.Fatalf("check = (%d, %v, %v, %d), want (%d, %v, false, %d)", off, dup, inflight, code, tt.wantOff, tt.wantDup, tt.wantCode)
			}
		})
	}
}

// TestProducerEntryReserve: a batch is checked against the sequences
// reserved by batches still being appended; a refused reservation drops
// itself and every later one, so the refused batch's resend follows the
// last appended run again and is chained to the append before it.
func TestProducerEntryReserve(t *testing.T) {
	e := &producerEntry{}
	e.add(ProducerRun{ProducerEpoch: 0, FirstSeq: 0, LastSeq: 4, FirstOffset: 0})
	check := func(where string, first, last int32, wantInflight bool, wantCode int16) {
		t.Helper()
		_, dup, inflight, code := e.check(0, first, last)
		if dup || inflight != wantInflight || code != wantCode {
			t.Fatalf("%s: check(%d, %d) = dup %v, inflight %v, code %d; want inflight %v, code %d", where, first, last, dup, inflight, code, wantInflight, wantCode)
		}
	}
	reserve := func(first, last int32, ticket string) (*pendingRun, ProducerRun) {
		r := ProducerRun{ProducerEpoch: 0, FirstSeq: first, LastSeq: last}
		p := e.reserve(r)
		p.ticket = ticket
		e.tail = ticket
		return p, r
	}
	check("next", 5, 9, false, 0)
	p1, r1 := reserve(5, 9, "t1")
	check("after a reservation", 10, 14, false, 0)
	check("behind a reservation", 5, 9, true, 0)
	check("gap after a reservation", 11, 14, false, kafka.CodeOutOfOrderSequence)
	p2, r2 := reserve(10, 14, "t2")
	p3, r3 := reserve(15, 19, "t3")
	// The first lands: the second and third stay reserved.
	r1.FirstOffset = 5
	e.settle(p1, r1, true)
	if _, dup, _, _ := e.check(0, 5, 9); !dup {
		t.Fatal("landed batch not a duplicate")
	}
	check("after two reservations", 20, 24, false, 0)
	// The second is refused: it and the third are un-reserved.
	e.settle(p2, r2, false)
	if len(e.pending) != 0 || e.tail != nil {
		t.Fatalf("after a refusal: pending %d, tail %v; want none, none (the append before it landed)", len(e.pending), e.tail)
	}
	check("resend of the refused one", 10, 14, false, 0)
	check("the third is un-reserved", 20, 24, false, kafka.CodeOutOfOrderSequence)
	e.settle(p3, r3, false) // refused by the chain: nothing more to drop
	if len(e.pending) != 0 || e.lastSeq != 9 {
		t.Fatalf("pending %d, last sequence %d", len(e.pending), e.lastSeq)
	}
}

func TestRunsFromRecords(t *testing.T) {
	mk := func(off int64, pid int64, epoch int16, seq int32) *tributary.Record {
		return &tributary.Record{Stream: "a.b", Offset: off, ProducerID: pid, ProducerEpoch: epoch, Sequence: seq, Source: "kafka"}
	}
	in := []*tributary.Record{
		mk(0, 5, 0, 0), mk(1, 5, 0, 1), mk(2, -1, -1, -1), mk(3, 5, 0, 2), mk(4, 5, 0, 3),
		mk(5, 6, 0, 0), mk(6, 5, 1, 0),
		{Stream: "a.b", Offset: 7, Source: "mqtt"},
	}
	got := RunsFromRecords(in, 5)
	want := []ProducerRun{
		{Stream: "a.b", ProducerID: 5, ProducerEpoch: 0, FirstSeq: 0, LastSeq: 1, FirstOffset: 0},
		{Stream: "a.b", ProducerID: 5, ProducerEpoch: 0, FirstSeq: 2, LastSeq: 3, FirstOffset: 3},
		{Stream: "a.b", ProducerID: 5, ProducerEpoch: 1, FirstSeq: 0, LastSeq: 0, FirstOffset: 6},
		{Stream: "a.b", ProducerID: 6, ProducerEpoch: 0, FirstSeq: 0, LastSeq: 0, FirstOffset: 5},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("run %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestProducerStateExpiry(t *testing.T) {
	p := newProducers(time.Hour)
	old := producerKey{"a.b", 0, 1}
	e := p.lock(old)
	e.add(ProducerRun{ProducerID: 1, FirstSeq: 0, LastSeq: 0})
	e.lastUsed = time.Now().Add(-2 * time.Hour)
	e.mu.Unlock()
	fresh := p.lock(producerKey{"a.b", 0, 2})
	fresh.mu.Unlock()
	p.mu.Lock()
	p.sweepLocked(time.Now())
	_, oldKept := p.m[old]
	n := len(p.m)
	p.mu.Unlock()
	if oldKept || n != 1 {
		t.Fatalf("after sweep: old kept %v, %d entries", oldKept, n)
	}
	if e := p.lock(old); e.known {
		t.Fatal("expired producer still known")
	} else {
		e.mu.Unlock()
	}
}
