package main

import (
	"context"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/console"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
)

// cloudConsole feeds the operator's console of `tributary cloud`: the
// tables of the catalog and the Kafka consumer groups with their lag. (It
// belongs with the rest of the cloud server's composition.)
//
// Not reported yet: Kafka group members (the group coordinator keeps them
// in memory per server and has no listing), Pulsar subscriptions (no
// listing in package pulsar).
type cloudConsole struct {
	*console.Console
	tables  *console.TableCache
	name    string
	started time.Time
	addr    atomic.Value // string: the catalog listener
	ks      atomic.Pointer[kafka.CloudServer]
	ps      atomic.Pointer[pulsar.Server]
}

func newCloudConsole(cat *tables.Catalog) *cloudConsole {
	cc := &cloudConsole{started: time.Now(), name: "cloud"}
	if h, err := os.Hostname(); err == nil && h != "" {
		cc.name = h
	}
	cc.tables = console.NewTableCache(cat, nil, func(ctx context.Context) []console.KafkaGroup {
		ks := cc.ks.Load()
		if ks == nil {
			return nil
		}
		lags, err := ks.GroupLags(ctx)
		if err != nil {
			return nil
		}
		var groups []console.KafkaGroup
		idx := map[string]int{}
		for _, l := range lags {
			i, ok := idx[l.Group]
			if !ok {
				i = len(groups)
				idx[l.Group] = i
				groups = append(groups, console.KafkaGroup{ID: l.Group})
			}
			groups[i].Lag = append(groups[i].Lag, console.PartitionLag{Topic: l.Topic, Partition: l.Partition,
				Committed: l.Committed, End: l.HighWater, Lag: l.Lag})
		}
		return groups
	})
	cc.Console = console.New(console.Options{Source: cc.snapshot})
	return cc
}

func (cc *cloudConsole) snapshot() console.Snapshot {
	s := console.Snapshot{Node: cc.name, Role: "cloud", Started: cc.started, Listeners: map[string]string{}}
	if a, _ := cc.addr.Load().(string); a != "" {
		s.Listeners["catalog"] = a
	}
	if ks := cc.ks.Load(); ks != nil {
		s.Listeners["kafka"] = ks.Addr()
	}
	if ps := cc.ps.Load(); ps != nil {
		s.Listeners["pulsar"] = ps.Addr()
	}
	info, groups := cc.tables.Get()
	for name, ti := range info {
		s.Streams = append(s.Streams, ti.Stream(name))
	}
	s.Consumers = &console.Consumers{KafkaGroups: groups}
	return s
}

// handler serves the console (GET / and /console/…) in front of next.
func (cc *cloudConsole) handler(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	cc.Register(mux)
	mux.Handle("/", next)
	return mux
}
