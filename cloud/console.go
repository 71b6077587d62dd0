package cloud

import (
	"context"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/console"
	"github.com/tributary-io/tributary/kafka/consume"
	"github.com/tributary-io/tributary/pulsar"
	"github.com/tributary-io/tributary/tables"
)

// cloudConsole feeds the operator's console of the cloud server (package
// console), served at GET / of the catalog listener: the tables of the
// catalog and the Kafka consumer groups with their lag.
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
	ks      atomic.Pointer[consume.Server]
	ps      atomic.Pointer[pulsar.Server]
}

func newCloudConsole(cat *tables.Catalog) *cloudConsole {
	cc := &cloudConsole{started: time.Now(), name: "cloud"}
	if h, err := os.Hostname(); err == nil && h != "" {
		cc.name = h
	}
	cc.tables = console.NewTableCache(cat, nil, func(ctx context.Context) []console.KafkaGroup {
		return consoleGroups(ctx, cc.ks.Load())
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

// consoleGroups reads the consumer groups and their lag from ks (nil: none).
func consoleGroups(ctx context.Context, ks *consume.Server) []console.KafkaGroup {
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
}

// ConsoleGroups is the consumer groups with their lag, for an edge node's
// console in the same process (node.Consumers).
func (s *Server) ConsoleGroups(ctx context.Context) []console.KafkaGroup {
	return consoleGroups(ctx, s.kafka)
}
