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
	rows, err := cs.offsets.db.QueryContext(ctx, `SELECT group_id, topic, partition, committed_offset FROM tributary_group_offsets`)
	if err != nil {
		return nil, fmt.Errorf("group lag: %w", err)
	}
	defer rows.Close()
	var out []GroupLag
	for rows.Next() {
		var g GroupLag
		if err := rows.Scan(&g.Group, &g.Topic, &g.Partition, &g.Committed); err != nil {
			return nil, fmt.Errorf("group lag: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("group lag: %w", err)
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
