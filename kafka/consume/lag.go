package consume

import (
	"context"
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// GroupLag is how far one consumer group's committed offset of one
// partition is behind the partition's committed high-water mark.
type GroupLag struct {
	Group     string
	Topic     string
	Partition int32
	Committed int64
	HighWater int64
	Lag       int64
}

// GroupLags reports the lag of every committed (group, topic, partition),
// from the durable offsets and the tables' marks. It reads shared storage
// only, so any cloud server gives the same answer.
func (cs *Server) GroupLags(ctx context.Context) ([]GroupLag, error) {
	all, err := cs.offsets.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("group lag: %w", err)
	}
	out := make([]GroupLag, 0, len(all))
	for _, o := range all {
		out = append(out, GroupLag{Group: o.Group, Topic: o.Topic, Partition: o.Partition, Committed: o.Offset.Offset})
	}
	marks := map[string]map[int32]int64{}
	for i := range out {
		g := &out[i]
		m, ok := marks[g.Topic]
		if !ok {
			if m, err = cs.cat.HighWaters(ctx, g.Topic); err != nil {
				m = nil // a dropped stream: report what is known
			}
			marks[g.Topic] = m
		}
		g.HighWater = m[g.Partition]
		g.Lag = max(0, g.HighWater-g.Committed)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return out, nil
}

var descGroupLag = prometheus.NewDesc("tributary_consumer_group_lag",
	"Committed high-water mark minus the consumer group's committed offset, per partition.",
	[]string{"group", "topic", "partition"}, nil)

// LagCollector exports GroupLags as tributary_consumer_group_lag.
func (cs *Server) LagCollector() prometheus.Collector { return lagCollector{cs} }

type lagCollector struct{ cs *Server }

func (l lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descGroupLag }

func (l lagCollector) Collect(ch chan<- prometheus.Metric) {
	lags, err := l.cs.GroupLags(context.Background())
	if err != nil {
		return
	}
	for _, g := range lags {
		ch <- prometheus.MustNewConstMetric(descGroupLag, prometheus.GaugeValue, float64(g.Lag),
			g.Group, g.Topic, fmt.Sprint(g.Partition))
	}
}
