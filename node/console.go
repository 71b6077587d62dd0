package node

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tributary-io/tributary/cluster"
	"github.com/tributary-io/tributary/console"
	"github.com/tributary-io/tributary/tables"
)

// The node feeds the operator's console (package console) with a
// snapshot of its parts. What is slow to read — table schemas, marks and
// owners from the catalog, consumer-group lag — is refreshed in the
// background at most every consoleRefresh and served from tableInfo, so
// a page view never waits on the catalog.
const consoleRefresh = 5 * time.Second

// maxConsoleStreams bounds the streams whose tables the console reads.
const maxConsoleStreams = 64

type consoleCache struct {
	mu         sync.Mutex
	at         time.Time
	refreshing bool
	tables     map[string]tableInfo
	lags       []console.KafkaGroup
}

type tableInfo struct {
	schema     []console.Column
	marks      map[int32]int64
	owners     map[int32]tables.Ownership
	snapshots  int
	files      int64
	rows       int64
	lease      string
	metaLoaded bool
}

func (n *Node) newConsole() *console.Console {
	return console.New(console.Options{Source: n.consoleSnapshot})
}

func (n *Node) consoleSnapshot() console.Snapshot {
	ws := n.wal.Stats()
	us := n.up.Stats()
	ms := n.mqtt.Stats()
	s := console.Snapshot{Node: n.cfg.NodeID, Role: "edge", Started: n.started,
		Listeners: map[string]string{"http": n.HTTPAddr()}}
	if n.cloudK != nil || n.cloudP != nil {
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
		LastCommitAge: n.lastCommitAge(us.LastCommit), LastError: us.LastError, Failing: us.Failing, Fenced: us.Fenced}
	s.Ingest = n.ingest.count.ingestCounts()
	s.Clients = map[string]int64{"mqtt": ms.Clients}
	s.Refusals = map[string]int64{
		"WAL budget full (MQTT)":    int64(ms.RefusedBudget),
		"MQTT refused, other cause": int64(ms.Refused - ms.RefusedBudget),
		"MQTT QoS 0 dropped":        int64(ms.DroppedQoS0),
		"MQTT topic not accepted":   int64(ms.RefusedTopic),
	}
	if n.kafka != nil {
		ks := n.kafka.Stats()
		s.Listeners["kafka"] = n.kafka.Addr()
		s.Clients["kafka"] = ks.Connections
		s.Refusals["WAL budget full (Kafka)"] = ks.Backpressure
		s.Refusals["Kafka malformed connection"] = ks.ClosedMalformed
	}
	s.Latency = append(s.Latency, console.Histograms("puback", n.mqtt.PubackHistogram())...)
	s.Latency = append(s.Latency, console.Histograms("wal_fsync", n.wal.FsyncHistogram())...)
	s.Latency = append(s.Latency, console.Histograms("wal_group", n.wal.GroupHistogram())...)
	s.Latency = append(s.Latency, console.Histograms("upload", n.up.UploadHistogram())...)
	s.Latency = append(s.Latency, mergeStreams("commit", console.Histograms("commit", n.up.CommitHistogram())))
	s.Latency = append(s.Latency, console.Histograms("freshness", n.up.FreshnessHistogram())...)

	info, lags := n.consoleTables()
	byStream := map[string]*console.Stream{}
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
		if ti, ok := info[p.Stream]; ok && ti.metaLoaded {
			if m, ok := ti.marks[p.Partition]; ok {
				part.Committed = m
			}
			if o, ok := ti.owners[p.Partition]; ok {
				part.Owner, part.Fenced = o.Node, o.Epoch > p.Epoch && p.Next > p.Released
			}
		}
		st.Partitions = append(st.Partitions, part)
		if p.OldestTimestamp > 0 && (oldest == 0 || p.OldestTimestamp < oldest) {
			oldest = p.OldestTimestamp
		}
	}
	if oldest > 0 {
		s.WAL.OldestAge = time.Since(time.UnixMicro(oldest))
	}
	for name, ti := range info {
		st := stream(name)
		st.Schema, st.Snapshots, st.DataFiles, st.Rows = ti.schema, ti.snapshots, ti.files, ti.rows
		// Partitions other nodes write, from the table's properties.
		have := map[int32]bool{}
		for _, p := range st.Partitions {
			have[p.ID] = true
		}
		for p, o := range ti.owners {
			if !have[p] {
				st.Partitions = append(st.Partitions, console.Partition{ID: p, Owner: o.Node, Epoch: o.Epoch,
					NextOffset: ti.marks[p], Committed: ti.marks[p]})
			}
		}
		if ti.lease != "" {
			st.Maintenance = &console.Maintenance{LeaseHolder: ti.lease}
		}
	}
	if n.maint != nil {
		for _, m := range n.maint.Stats() {
			st := stream(m.Stream)
			st.Snapshots, st.DataFiles, st.Rows, st.MetadataBytes = m.Snapshots, m.DataFiles, m.Records, m.MetadataBytes
			st.Maintenance = &console.Maintenance{LastPass: m.LastPass, LastDuration: m.LastDuration, Passes: m.Passes,
				Failures: m.Failures, LastError: m.LastError, LeaseHolder: m.LeaseHolder}
		}
	}
	for name, st := range byStream {
		st.Recent = n.ingest.count.recent(name)
		s.Streams = append(s.Streams, *st)
	}
	s.Cluster = n.consoleCluster()
	if n.cloudK != nil || n.cloudP != nil {
		s.Consumers = &console.Consumers{KafkaGroups: lags}
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

// consoleTables returns the cached table figures and group lags, starting
// a background refresh when they are older than consoleRefresh.
func (n *Node) consoleTables() (map[string]tableInfo, []console.KafkaGroup) {
	c := &n.consoleCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.refreshing && time.Since(c.at) >= consoleRefresh {
		c.refreshing = true
		go n.refreshConsoleTables()
	}
	return c.tables, c.lags
}

func (n *Node) refreshConsoleTables() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := map[string]bool{}
	for _, p := range n.wal.Partitions() {
		names[p.Stream] = true
	}
	if list, err := n.cat.ListStreams(ctx); err == nil {
		for _, s := range list {
			names[s] = true
		}
	}
	out := map[string]tableInfo{}
	for name := range names {
		if len(out) >= maxConsoleStreams {
			break
		}
		t, err := n.cat.LoadTable(ctx, name)
		if err != nil {
			continue
		}
		ti := tableInfo{snapshots: len(t.Metadata().Snapshots())}
		for _, f := range t.Schema().Fields() {
			ti.schema = append(ti.schema, console.Column{Name: f.Name, Type: f.Type.String(), Required: f.Required})
		}
		if s := t.CurrentSnapshot(); s != nil && s.Summary != nil {
			ti.files, _ = strconv.ParseInt(s.Summary.Properties["total-data-files"], 10, 64)
			ti.rows, _ = strconv.ParseInt(s.Summary.Properties["total-records"], 10, 64)
		}
		ti.lease, _ = tables.LeaseHolder(t)
		if marks, owners, err := n.cat.Marks(ctx, name); err == nil {
			ti.marks, ti.owners, ti.metaLoaded = marks, owners, true
		}
		out[name] = ti
	}
	var groups []console.KafkaGroup
	if n.cloudK != nil {
		if lags, err := n.cloudK.GroupLags(ctx); err == nil {
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
		}
	}
	c := &n.consoleCache
	c.mu.Lock()
	c.tables, c.lags, c.at, c.refreshing = out, groups, time.Now(), false
	c.mu.Unlock()
}
