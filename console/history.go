package console

import (
	"math"
	"sort"
	"strings"
	"time"
)

// history is a ring of samples, one per interval, the newest last. Each
// sample holds a value per series key; a series that has no value in a
// sample (not yet existing, or no observation in that interval) is a gap.
//
// Series keys are "<kind>:<name>" (see chartDefs): the console computes
// them from two consecutive snapshots in sample.
type history struct {
	rows  []row // ring buffer
	head  int   // index of the oldest row when full
	count int
}

type row struct {
	t int64 // unix milliseconds
	v map[string]float64
}

func newHistory(capacity int) *history {
	return &history{rows: make([]row, max(capacity, 2))}
}

func (h *history) add(r row) {
	if h.count < len(h.rows) {
		h.rows[(h.head+h.count)%len(h.rows)] = r
		h.count++
		return
	}
	h.rows[h.head] = r
	h.head = (h.head + 1) % len(h.rows)
}

// each calls f with the rows, the oldest first.
func (h *history) each(f func(r *row)) {
	for i := 0; i < h.count; i++ {
		f(&h.rows[(h.head+i)%len(h.rows)])
	}
}

func (h *history) last() *row {
	if h.count == 0 {
		return nil
	}
	return &h.rows[(h.head+h.count-1)%len(h.rows)]
}

func (h *history) first() *row {
	if h.count == 0 {
		return nil
	}
	return &h.rows[h.head]
}

// sampler turns consecutive snapshots into a row of rates, levels and
// percentiles.
type sampler struct {
	prev     *Snapshot
	prevAt   time.Time
	prevHist map[string]*Hist // by histKey
}

func histKey(h *Hist) string { return h.Name + "|" + h.Stream }

// sample computes the row for s taken at now.
func (sp *sampler) sample(s *Snapshot, now time.Time) row {
	r := row{t: now.UnixMilli(), v: map[string]float64{}}
	dt := now.Sub(sp.prevAt).Seconds()
	rate := func(key string, cur, prev int64, had bool) {
		if !had || dt <= 0 {
			return
		}
		d := cur - prev
		if d < 0 {
			d = cur // restarted
		}
		r.v[key] = float64(d) / dt
	}
	if sp.prev != nil {
		prevIngest := map[[2]string]int64{}
		for _, c := range sp.prev.Ingest {
			prevIngest[[2]string{c.Protocol, c.Stream}] = c.Messages
		}
		protos := map[string]float64{}
		streams := map[string]float64{}
		for _, c := range s.Ingest {
			p, had := prevIngest[[2]string{c.Protocol, c.Stream}]
			if !had {
				p = 0 // a new series since the last sample: all of it is new
			}
			d := c.Messages - p
			if d < 0 {
				d = c.Messages
			}
			protos[c.Protocol] += float64(d) / dt
			streams[c.Stream] += float64(d) / dt
		}
		for k, v := range protos {
			r.v["proto:"+k] = v
		}
		for k, v := range streams {
			r.v["stream:"+k] = v
		}
		for reason, n := range s.Refusals {
			if n == 0 {
				continue // never refused for this reason: no line
			}
			rate("refuse:"+reason, n, sp.prev.Refusals[reason], true)
		}
		if s.Uplink != nil && sp.prev.Uplink != nil {
			rate("uplink:rows", s.Uplink.RecordsCommitted, sp.prev.Uplink.RecordsCommitted, true)
		}
	}
	if s.WAL != nil {
		if s.WAL.Budget > 0 {
			r.v["wal:fill"] = 100 * float64(s.WAL.Bytes) / float64(s.WAL.Budget)
		}
		r.v["wal:oldest"] = s.WAL.OldestAge.Seconds()
		r.v["cum:budget_refusals"] = float64(s.WAL.BudgetRefusals)
	}
	if s.Uplink != nil {
		r.v["cum:fenced"] = float64(s.Uplink.Fenced)
		r.v["cum:readmitted"] = float64(s.Uplink.Readmitted)
	}
	if s.Consumers != nil {
		for _, g := range s.Consumers.KafkaGroups {
			var lag int64
			for _, l := range g.Lag {
				lag += l.Lag
			}
			r.v["lag:"+g.ID] = float64(lag)
		}
		for _, sub := range s.Consumers.PulsarSubscriptions {
			r.v["backlog:"+sub.Topic+" "+sub.Name] = float64(sub.Backlog)
		}
	}
	hists := map[string]*Hist{}
	for i := range s.Latency {
		h := &s.Latency[i]
		k := histKey(h)
		hists[k] = h
		if sp.prevHist == nil {
			continue
		}
		d := h.delta(sp.prevHist[k])
		def, known := histDefs[h.Name]
		if !known {
			continue
		}
		for _, q := range def.quantiles {
			v, ok := d.quantile(q.q)
			if !ok {
				continue
			}
			key := "lat:" + h.Name + ":" + q.name
			if h.Stream != "" {
				key = def.streamKind + ":" + h.Stream
			}
			if def.whole {
				v = max(1, math.Ceil(v)) // a count: 0.50 (interpolated below the first bucket) reads as 1
			}
			r.v[key] = v * def.scale
		}
	}
	sp.prev, sp.prevAt, sp.prevHist = s, now, hists
	return r
}

// histDefs says how each known histogram is charted.
var histDefs = map[string]struct {
	scale      float64 // seconds -> chart unit
	quantiles  []namedQ
	streamKind string // series kind of a per-stream histogram
	whole      bool   // a count of at least one: quantiles are rounded up
}{
	"puback":    {scale: 1000, quantiles: []namedQ{{"p50", .5}, {"p99", .99}}},
	"produce":   {scale: 1000, quantiles: []namedQ{{"p50", .5}, {"p99", .99}}},
	"wal_fsync": {scale: 1000, quantiles: []namedQ{{"p50", .5}, {"p99", .99}}},
	"wal_group": {scale: 1, quantiles: []namedQ{{"p50", .5}, {"p99", .99}}, whole: true},
	"upload":    {scale: 1, quantiles: []namedQ{{"p99", .99}}},
	"commit":    {scale: 1, quantiles: []namedQ{{"p99", .99}}},
	"freshness": {scale: 1, quantiles: []namedQ{{"p99", .99}}, streamKind: "fresh"},
}

type namedQ struct {
	name string
	q    float64
}

// chartDef is one chart of the overview: its series are the history keys
// with the given prefixes.
type chartDef struct {
	ID, Title, Unit string
	Prefixes        []string
	Labels          map[string]string // key -> legend label (default: the key after the prefix)
	// MinTop is the least top of the y axis (0 = scale to the data).
	MinTop float64
}

var chartDefs = []chartDef{
	{ID: "ingest_protocol", Title: "Ingest by protocol", Unit: "msg/s", Prefixes: []string{"proto:"}},
	{ID: "ingest_stream", Title: "Ingest by stream", Unit: "msg/s", Prefixes: []string{"stream:"}},
	{ID: "ack_latency", Title: "Acknowledgement latency", Unit: "ms",
		Prefixes: []string{"lat:puback:", "lat:produce:", "lat:wal_fsync:"},
		Labels: map[string]string{"lat:puback:p50": "PUBACK p50", "lat:puback:p99": "PUBACK p99",
			"lat:produce:p50": "Kafka produce p50", "lat:produce:p99": "Kafka produce p99",
			"lat:wal_fsync:p50": "WAL fsync p50", "lat:wal_fsync:p99": "WAL fsync p99"}},
	{ID: "wal_depth", Title: "WAL fill against its disk budget", Unit: "%", Prefixes: []string{"wal:fill"}, MinTop: 10,
		Labels: map[string]string{"wal:fill": "Buffered, % of budget"}},
	{ID: "oldest", Title: "Oldest record not yet uploaded", Unit: "s", Prefixes: []string{"wal:oldest"},
		Labels: map[string]string{"wal:oldest": "Age"}},
	{ID: "freshness", Title: "Freshness, accepted → committed (p99)", Unit: "s", Prefixes: []string{"fresh:"}},
	{ID: "uplink_latency", Title: "Upload and table commit (p99)", Unit: "s", Prefixes: []string{"lat:upload:", "lat:commit:"},
		Labels: map[string]string{"lat:upload:p99": "Parquet upload", "lat:commit:p99": "Catalog commit"}},
	{ID: "wal_group", Title: "WAL writes sharing one fsync (appends and releases, group commit)", Unit: "writes", Prefixes: []string{"lat:wal_group:"},
		Labels: map[string]string{"lat:wal_group:p50": "median", "lat:wal_group:p99": "p99"}},
	{ID: "refusals", Title: "Refusals by reason", Unit: "/s", Prefixes: []string{"refuse:"}},
	{ID: "consumer_lag", Title: "Kafka consumer group lag", Unit: "messages", Prefixes: []string{"lag:"}},
	{ID: "pulsar_backlog", Title: "Pulsar subscription backlog", Unit: "messages", Prefixes: []string{"backlog:"}},
}

var protocolNames = map[string]string{"mqtt": "MQTT", "kafka": "Kafka", "pulsar": "Pulsar"}

// charts renders the history as the overview's charts.
func (h *history) charts() []Chart {
	ts := []int64{}
	keys := map[string]bool{}
	h.each(func(r *row) {
		ts = append(ts, r.t)
		for k := range r.v {
			keys[k] = true
		}
	})
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []Chart
	for _, d := range chartDefs {
		c := Chart{ID: d.ID, Title: d.Title, Unit: d.Unit, MinTop: d.MinTop, T: ts, Series: []Series{}}
		for _, p := range d.Prefixes {
			for _, k := range sorted {
				if !strings.HasPrefix(k, p) {
					continue
				}
				label := d.Labels[k]
				if label == "" {
					label = strings.TrimPrefix(k, p)
					if n, ok := protocolNames[label]; ok && p == "proto:" {
						label = n
					}
				}
				s := Series{Key: k, Label: label, V: make([]*float64, 0, len(ts))}
				h.each(func(r *row) {
					if v, ok := r.v[k]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
						v := round3(v)
						s.V = append(s.V, &v)
						s.Points++
					} else {
						s.V = append(s.V, nil)
					}
				})
				c.Series = append(c.Series, s)
			}
		}
		out = append(out, c)
	}
	return out
}

func round3(v float64) float64 {
	if math.Abs(v) >= 100 {
		return math.Round(v*10) / 10
	}
	return math.Round(v*1000) / 1000
}
