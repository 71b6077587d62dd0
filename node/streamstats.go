package node

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
)

// streamCounters counts messages and payload bytes made durable, by
// protocol (the record's Source) and stream.
type streamCounters struct {
	mu sync.RWMutex
	m  map[[2]string]*streamCount
}

type streamCount struct{ msgs, bytes atomic.Int64 }

func (c *streamCounters) add(recs []*tributary.Record) {
	for _, r := range recs {
		k := [2]string{r.Source, r.Stream}
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
		sc.msgs.Add(1)
		sc.bytes.Add(int64(len(r.Value)))
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
