package ingest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/console"
)

// streamCounters counts messages and payload bytes made durable, by
// protocol (the record's Source) and stream, and keeps each stream's
// latest records (recentRing).
type streamCounters struct {
	mu  sync.RWMutex
	m   map[[2]string]*streamCount
	rec map[string]*recentRing
}

type streamCount struct{ msgs, bytes atomic.Int64 }

func (c *streamCounters) add(recs []*tributary.Record) {
	c.keepRecent(recs)
	for _, r := range recs {
		c.count(r.Source, r.Stream, 1, int64(len(r.Value)))
	}
}

// addBatch counts a Kafka record batch stored as one WAL entry; only its
// last records (the recent-records view) are decoded.
func (c *streamCounters) addBatch(b *tributary.Batch) {
	n := b.Count()
	if recent, err := batchRecords(b, max(0, n-recentPerStream)); err == nil {
		c.keepRecent(recent)
	}
	c.count(b.Source, b.Stream, int64(n), batchValueBytes(b))
}

// count adds msgs messages of bytes value bytes to (source, stream).
func (c *streamCounters) count(source, stream string, msgs, bytes int64) {
	k := [2]string{source, stream}
	c.mu.RLock()
	sc := c.m[k]
	c.mu.RUnlock()
	if sc == nil {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[[2]string]*streamCount{}
		}
		if sc = c.m[k]; sc == nil {
			sc = &streamCount{}
			c.m[k] = sc
		}
		c.mu.Unlock()
	}
	sc.msgs.Add(msgs)
	sc.bytes.Add(bytes)
}

// keepRecent pushes the last records of each stream in recs (at most
// recentPerStream of them) into the stream's ring, locking it once per
// run of records of one stream.
func (c *streamCounters) keepRecent(recs []*tributary.Record) {
	for end := len(recs); end > 0; {
		stream := recs[end-1].Stream
		start := end - 1
		for start > 0 && recs[start-1].Stream == stream {
			start--
		}
		c.mu.RLock()
		rr := c.rec[stream]
		c.mu.RUnlock()
		if rr == nil {
			c.mu.Lock()
			if c.rec == nil {
				c.rec = map[string]*recentRing{}
			}
			if rr = c.rec[stream]; rr == nil {
				rr = &recentRing{}
				c.rec[stream] = rr
			}
			c.mu.Unlock()
		}
		rr.mu.Lock()
		for _, r := range recs[max(start, end-recentPerStream):end] {
			rr.push(r)
		}
		rr.mu.Unlock()
		end = start
	}
}

var (
	descStreamMsgs = prometheus.NewDesc("tributary_ingest_messages_total",
		"Messages made durable in the WAL, by protocol and stream.", []string{"protocol", "stream"}, nil)
	descStreamBytes = prometheus.NewDesc("tributary_ingest_payload_bytes_total",
		"Payload bytes made durable in the WAL, by protocol and stream.", []string{"protocol", "stream"}, nil)
)

func (c *streamCounters) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStreamMsgs
	ch <- descStreamBytes
}

func (c *streamCounters) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for k, sc := range c.m {
		ch <- prometheus.MustNewConstMetric(descStreamMsgs, prometheus.CounterValue, float64(sc.msgs.Load()), k[0], k[1])
		ch <- prometheus.MustNewConstMetric(descStreamBytes, prometheus.CounterValue, float64(sc.bytes.Load()), k[0], k[1])
	}
}

// recentRows keeps the last few records of each stream for the console's
// streams view, in a fixed ring per stream whose value buffers are reused
// (no allocation per record once warm).
const (
	recentPerStream = 10
	recentValueMax  = 256
)

type recentRing struct {
	mu   sync.Mutex
	rows [recentPerStream]recentRow
	next int // total pushed
}

type recentRow struct {
	partition          int32
	offset, ts         int64
	topic, source, cid string
	key, val           []byte
	keyNil             bool
	size               int
}

func (rr *recentRing) push(r *tributary.Record) {
	e := &rr.rows[rr.next%recentPerStream]
	rr.next++
	e.partition, e.offset, e.ts = r.Partition, r.Offset, r.Timestamp
	e.topic, e.source, e.cid = r.Topic, r.Source, r.ClientID
	e.keyNil = r.Key == nil
	e.key = append(e.key[:0], r.Key[:min(len(r.Key), recentValueMax)]...)
	e.val = append(e.val[:0], r.Value[:min(len(r.Value), recentValueMax)]...)
	e.size = len(r.Value)
}

// Recent returns copies of the last records made durable of stream (at
// most 10, values cut at 256 bytes), oldest first, for the console.
func (in *Ingest) Recent(stream string) []console.Row {
	c := &in.count
	c.mu.RLock()
	rr := c.rec[stream]
	c.mu.RUnlock()
	if rr == nil {
		return nil
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	n := min(rr.next, recentPerStream)
	out := make([]console.Row, 0, n)
	for i := rr.next - n; i < rr.next; i++ {
		e := &rr.rows[i%recentPerStream]
		row := console.Row{Partition: e.partition, Offset: e.offset, Timestamp: time.UnixMicro(e.ts), Topic: e.topic,
			Value: append([]byte(nil), e.val...), ValueSize: e.size, Source: e.source, ClientID: e.cid}
		if !e.keyNil {
			row.Key = append([]byte{}, e.key...)
		}
		out = append(out, row)
	}
	return out
}

// Counts lists the messages and bytes made durable by protocol and
// stream, for the console.
func (in *Ingest) Counts() []console.IngestCount {
	c := &in.count
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]console.IngestCount, 0, len(c.m))
	for k, sc := range c.m {
		out = append(out, console.IngestCount{Protocol: k[0], Stream: k[1], Messages: sc.msgs.Load(), Bytes: sc.bytes.Load()})
	}
	return out
}
