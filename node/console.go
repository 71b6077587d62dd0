package node

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/console"
	"github.com/tributary-io/tributary/tables"
)

// The node feeds the operator's console (package console) with a
// snapshot of its parts; what is slow to read (the tables in the catalog,
// consumer-group lag) comes from a console.TableCache refreshed in the
// background.

func (n *Node) newConsole() *console.Console {
	walStreams := func() []string {
		var out []string
		for _, p := range n.wal.Partitions() {
			out = append(out, p.Stream)
		}
		return out
	}
	lags := func(ctx context.Context) []console.KafkaGroup {
		if c, _ := n.consumers.Load().(Consumers); c != nil {
			return c.ConsoleGroups(ctx)
		}
		return nil
	}
	n.consoleTables = console.NewTableCache(n.cat, walStreams, lags)
	return console.New(console.Options{Source: n.consoleSnapshot})
}

func (n *Node) consoleSnapshot() console.Snapshot {
	ws := n.wal.Stats()
	us := n.up.Stats()
	ms := n.mqtt.Stats()
	s := console.Snapshot{Node: n.cfg.NodeID, Role: "edge", Started: n.started,
		Listeners: map[string]string{"http": n.HTTPAddr()}}
	if n.consumers.Load() != nil {
		s.Role = "dev"
	}
	for k, v := range n.mqtt.Addrs() {
		if v != "" {
			s.Listeners["mqtt "+k] = v
		}
	}
	s.WAL = &console.WAL{Records: ws.Records, Bytes: ws.Bytes, Budget: ws.MaxBytes, BudgetRefusals: ws.BudgetRejections}
	s.Uplink = &console.Uplink{Commits: us.Commits, RecordsCommitted: us.RecordsCommitted, BytesUploaded: us.BytesUploaded,
		FilesUploaded: us.FilesUploaded, CommitFailures: us.CommitFailures, UploadFailures: us.UploadFailures,
		LastCommitAge: n.lastCommitAge(us.LastCommit), LastError: us.LastError, Failing: us.Failing, Fenced: us.Fenced,
		Readmitted: us.ReadmittedRecords}
	s.Ingest = n.ingest.Counts()
	s.Clients = map[string]int64{"mqtt": ms.Clients}
	s.Refusals = map[string]int64{
		"WAL budget full (MQTT)":      int64(ms.RefusedBudget),
		"MQTT refused, other cause":   int64(ms.Refused - ms.RefusedBudget),
		"MQTT QoS 0 dropped":          int64(ms.DroppedQoS0),
		"MQTT topic not accepted":     int64(ms.RefusedTopic),
		"MQTT publish not authorized": int64(ms.RefusedUnauthorized),
		"MQTT connect refused (auth)": int64(ms.RefusedConnects),
	}
	for stream, d := range us.DeadLetters {
		// Accepted and stored, but not typed: charted with the refusals
		// so that the console shows each typed stream's dead-letter rate.
		s.Refusals["dead letters (stored, not typed): "+stream] = d
	}
	if n.kafka != nil {
		ks := n.kafka.Stats()
		s.Listeners["kafka"] = n.kafka.Addr()
		s.Clients["kafka"] = ks.Connections
		s.Refusals["WAL budget full (Kafka)"] = ks.Backpressure
		s.Refusals["Kafka malformed connection"] = ks.ClosedMalformed
	}
	s.Latency = append(s.Latency, console.Histograms("puback", n.mqtt.PubackHistogram())...)
	if n.kafka != nil {
		s.Latency = append(s.Latency, console.Histograms("produce", n.kafka.LatencyHistogram())...)
	}
	s.Latency = append(s.Latency, console.Histograms("wal_fsync", n.wal.FsyncHistogram())...)
	s.Latency = append(s.Latency, console.Histograms("wal_group", n.wal.GroupHistogram())...)
	s.Latency = append(s.Latency, console.Histograms("upload", n.up.UploadHistogram())...)
	s.Latency = append(s.Latency, mergeStreams("commit", console.Histograms("commit", n.up.CommitHistogram())))
	s.Latency = append(s.Latency, console.Histograms("freshness", n.up.FreshnessHistogram())...)

	info, lags := n.consoleTables.Get()
	byStream := map[string]*console.Stream{}
	for name, ti := range info {
		st := ti.Stream(name) // every partition the table knows, other nodes' too
		byStream[name] = &st
	}
	stream := func(name string) *console.Stream {
		st := byStream[name]
		if st == nil {
			st = &console.Stream{Name: name}
			byStream[name] = st
		}
		return st
	}
	var oldest int64
	for _, p := range n.wal.Partitions() {
		st := stream(p.Stream)
		part := console.Partition{ID: p.Partition, Owner: n.cfg.NodeID, Epoch: p.Epoch, NextOffset: p.Next, Committed: -1,
			Uncommitted: p.Next - p.Released, WALBytes: p.Bytes}
		if ti, ok := info[p.Stream]; ok {
			if m, ok := ti.Marks[p.Partition]; ok {
				part.Committed = m
			}
			if o, ok := ti.Owners[p.Partition]; ok {
				part.Owner, part.Fenced = o.Node, o.Epoch > p.Epoch && p.Next > p.Released
			}
		}
		replaced := false
		for i := range st.Partitions {
			if st.Partitions[i].ID == p.Partition {
				st.Partitions[i], replaced = part, true // this node's view is fresher
			}
		}
		if !replaced {
			st.Partitions = append(st.Partitions, part)
		}
		if p.OldestTimestamp > 0 && (oldest == 0 || p.OldestTimestamp < oldest) {
			oldest = p.OldestTimestamp
		}
	}
	if oldest > 0 {
		s.WAL.OldestAge = time.Since(time.UnixMicro(oldest))
	}
	if n.maint != nil {
		for _, m := range n.maint.Stats() {
			st := stream(m.Stream)
			st.Snapshots, st.DataFiles, st.Rows, st.MetadataBytes = max(st.Snapshots, m.Snapshots), max(st.DataFiles, m.DataFiles),
				max(st.Rows, m.Records), m.MetadataBytes
			st.Maintenance = &console.Maintenance{LastPass: m.LastPass, LastDuration: m.LastDuration, Passes: m.Passes,
				Failures: m.Failures, LastError: m.LastError, LeaseHolder: m.LeaseHolder}
		}
	}
	for _, d := range us.LatestDeadLetters { // newest first
		st := stream(tables.DLQStream(d.Stream))
		st.DeadLetters = append(st.DeadLetters, console.DeadLetter{Partition: d.Partition, Offset: d.Offset, At: d.At, Error: d.Error})
	}
	if n.maint != nil {
		// On before its first pass over a stream: the card says so
		// rather than "off" (a pass runs every maintenance.interval).
		for _, st := range byStream {
			if st.Maintenance == nil {
				st.Maintenance = &console.Maintenance{}
			}
		}
	}
	for name, st := range byStream {
		st.Recent = n.ingest.Recent(name)
		s.Streams = append(s.Streams, *st)
	}
	s.Cluster = n.consoleCluster()
	if c, _ := n.consumers.Load().(Consumers); c != nil {
		s.Consumers = c.ConsoleConsumers(lags)
	}
	return s
}

// mergeStreams sums a per-stream histogram into one (the console charts
// the commit latency of the node, not of each stream).
func mergeStreams(name string, hs []console.Hist) console.Hist {
	out := console.Hist{Name: name}
	for _, h := range hs {
		if out.Bounds == nil {
			out.Bounds, out.Counts = h.Bounds, make([]uint64, len(h.Counts))
		}
		if len(h.Counts) != len(out.Counts) {
			continue
		}
		for i, c := range h.Counts {
			out.Counts[i] += c
		}
		out.Count += h.Count
		out.Sum += h.Sum
	}
	return out
}

func (n *Node) consoleCluster() *console.Cluster {
	cs := n.ClusterStatus()
	rs := n.replicaStats()
	factor := 1 // replication needs the cluster
	if cs.Gossip {
		factor = max(n.cfg.Cluster.ReplicationFactor, 1)
	}
	c := &console.Cluster{Gossip: cs.Gossip, ReplicationFactor: factor,
		Degraded: rs.Degraded, LagRecords: rs.LagRecords}
	if k := n.ingest.Lease(); k != nil {
		st := k.Status()
		c.Lease = &console.Lease{Valid: st.Valid, RenewedAt: st.RenewedAt, Error: st.RenewError, SiteSize: st.SiteSize,
			Alive: st.Alive, MayWrite: st.MayWrite}
	}
	for _, m := range cs.Members {
		c.Members = append(c.Members, console.Member{ID: m.ID, State: string(m.State), Since: m.Since, Self: m.ID == n.cfg.NodeID,
			Partitions: m.PartitionCount, WALBytes: m.WALBytes, WALBudget: m.WALBudget, UplinkOK: m.UplinkOK,
			ReplicatesTo: replicaTargets(m.ID, cs.Members, c.ReplicationFactor-1)})
	}
	if cs.Gossip {
		st := n.mqtt.ClusterStats()
		c.Forwarding = []console.Queue{{Peer: "all peers (" + strconv.Itoa(st.Peers) + " linked)",
			Forwarded: int64(st.ForwardedOut), Dropped: int64(st.ForwardDropped)}}
	}
	return c
}

// replicaTargets is who holds self's WAL replicas: the next k live members
// after it in id order (the rule of package replica).
func replicaTargets(self string, members []cluster.Member, k int) []string {
	if k <= 0 {
		return nil
	}
	var live []string
	for _, m := range members {
		if m.ID != self && m.Peer != "" && (m.State == cluster.Alive || m.State == cluster.Suspect) {
			live = append(live, m.ID)
		}
	}
	sort.Strings(live)
	start := sort.SearchStrings(live, self)
	for start < len(live) && live[start] == self {
		start++
	}
	var out []string
	for i := 0; i < len(live) && len(out) < k; i++ {
		out = append(out, live[(start+i)%len(live)])
	}
	return out
}

// Consumers is the cloud side's view of consumer groups, shown by the
// node's console when a cloud server runs in the same process (dev):
// cloud.Server implements it.
type Consumers interface {
	// ConsoleGroups reads the groups' committed offsets and lag (slow:
	// called in the background).
	ConsoleGroups(ctx context.Context) []console.KafkaGroup
	// ConsoleConsumers adds what is in memory now (members, Pulsar
	// subscriptions) to groups.
	ConsoleConsumers(groups []console.KafkaGroup) *console.Consumers
}

// ShowConsumers makes the console show c's consumer groups (and call the
// node's role "dev").
func (n *Node) ShowConsumers(c Consumers) { n.consumers.Store(c) }
