package cloud

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"github.com/tributary-io/tributary/console"
	"github.com/tributary-io/tributary/federation"
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
	fed     atomic.Pointer[federation.Federation]
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
	s.Consumers = liveConsumers(groups, cc.ks.Load(), cc.ps.Load())
	if f := cc.fed.Load(); f != nil {
		for _, st := range f.Status() {
			s.Federation = append(s.Federation, console.Mirrors{Catalog: st.Name, URI: st.URI, Current: st.Mirrors, Behind: st.Behind,
				Lag: st.Lag, LastError: st.LastError})
		}
	}
	return s
}

// liveConsumers adds to the groups' lag (read in the background) what the
// servers hold in memory now: each group's state and members, groups that
// committed nothing yet, and the Pulsar subscriptions with their backlog.
func liveConsumers(groups []console.KafkaGroup, ks *consume.Server, ps *pulsar.Server) *console.Consumers {
	c := &console.Consumers{KafkaGroups: append([]console.KafkaGroup(nil), groups...)}
	if ks != nil {
		idx := map[string]int{}
		for i, g := range c.KafkaGroups {
			idx[g.ID] = i
		}
		for _, gi := range ks.Groups() {
			i, ok := idx[gi.ID]
			if !ok {
				i = len(c.KafkaGroups)
				c.KafkaGroups = append(c.KafkaGroups, console.KafkaGroup{ID: gi.ID})
			}
			c.KafkaGroups[i].State, c.KafkaGroups[i].Members = gi.State, gi.Members
		}
	}
	if ps != nil {
		c.PulsarReported = true
		for _, si := range ps.Subscriptions() {
			c.PulsarSubscriptions = append(c.PulsarSubscriptions, console.PulsarSubscription{Topic: si.Topic, Name: si.Name,
				Type: si.Type, Consumers: si.Consumers, Backlog: si.Backlog})
		}
	}
	return c
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
// console in the same process (node.Consumers; read in the background).
func (s *Server) ConsoleGroups(ctx context.Context) []console.KafkaGroup {
	return consoleGroups(ctx, s.kafka)
}

// ConsoleConsumers adds the live state (group members, Pulsar
// subscriptions) to groups read by ConsoleGroups (node.Consumers).
func (s *Server) ConsoleConsumers(groups []console.KafkaGroup) *console.Consumers {
	return liveConsumers(groups, s.kafka, s.pulsar)
}
