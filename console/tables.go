package console

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/tributary-io/tributary/tables"
)

// TableCache reads what is slow to read for a snapshot — table schemas,
// high-water marks, owners and snapshot figures from the catalog, and
// consumer-group lag — in the background, at most every refresh, so that
// a snapshot (and a page view) never waits on the catalog. Both hosts, the
// edge node and the cloud server, use it.
type TableCache struct {
	cat     *tables.Catalog
	streams func() []string                        // streams to read besides the catalog's list (may be nil)
	lags    func(ctx context.Context) []KafkaGroup // consumer groups (may be nil)

	mu         sync.Mutex
	at         time.Time
	refreshing bool
	tables     map[string]TableInfo
	groups     []KafkaGroup
}

// TableInfo is one table as the catalog has it.
type TableInfo struct {
	Schema    []Column
	Marks     map[int32]int64 // committed high-water mark per partition
	Owners    map[int32]tables.Ownership
	Snapshots int
	DataFiles int64
	Rows      int64
	DataBytes int64
	Lease     string // the maintenance lease holder
}

const (
	tableRefresh     = 5 * time.Second
	maxCachedStreams = 64
)

// NewTableCache makes a cache over cat; streams and lags may be nil.
func NewTableCache(cat *tables.Catalog, streams func() []string, lags func(ctx context.Context) []KafkaGroup) *TableCache {
	return &TableCache{cat: cat, streams: streams, lags: lags}
}

// Get returns the cached tables and groups, starting a background refresh
// when they are older than the refresh interval.
func (c *TableCache) Get() (map[string]TableInfo, []KafkaGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.refreshing && time.Since(c.at) >= tableRefresh {
		c.refreshing = true
		go c.refresh()
	}
	return c.tables, c.groups
}

func (c *TableCache) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := map[string]bool{}
	if c.streams != nil {
		for _, s := range c.streams() {
			names[s] = true
		}
	}
	if list, err := c.cat.ListStreams(ctx); err == nil {
		for _, s := range list {
			names[s] = true
		}
	}
	out := map[string]TableInfo{}
	for name := range names {
		if len(out) >= maxCachedStreams {
			break
		}
		t, err := c.cat.LoadTable(ctx, name)
		if err != nil {
			continue
		}
		ti := TableInfo{Snapshots: len(t.Metadata().Snapshots())}
		for _, f := range t.Schema().Fields() {
			ti.Schema = append(ti.Schema, Column{Name: f.Name, Type: f.Type.String(), Required: f.Required})
		}
		if s := t.CurrentSnapshot(); s != nil && s.Summary != nil {
			ti.DataFiles, _ = strconv.ParseInt(s.Summary.Properties["total-data-files"], 10, 64)
			ti.Rows, _ = strconv.ParseInt(s.Summary.Properties["total-records"], 10, 64)
			ti.DataBytes, _ = strconv.ParseInt(s.Summary.Properties["total-files-size"], 10, 64)
		}
		ti.Lease, _ = tables.LeaseHolder(t)
		if marks, owners, err := c.cat.Marks(ctx, name); err == nil {
			ti.Marks, ti.Owners = marks, owners
		}
		out[name] = ti
	}
	var groups []KafkaGroup
	if c.lags != nil {
		groups = c.lags(ctx)
	}
	c.mu.Lock()
	c.tables, c.groups, c.at, c.refreshing = out, groups, time.Now(), false
	c.mu.Unlock()
}

// Stream is the stream view of a cached table: its partitions from the
// table's owners and marks (other nodes' included).
func (ti TableInfo) Stream(name string) Stream {
	s := Stream{Name: name, Schema: ti.Schema, Snapshots: ti.Snapshots, DataFiles: ti.DataFiles, Rows: ti.Rows, DataBytes: ti.DataBytes}
	seen := map[int32]bool{}
	for p, o := range ti.Owners {
		seen[p] = true
		s.Partitions = append(s.Partitions, Partition{ID: p, Owner: o.Node, Epoch: o.Epoch, NextOffset: ti.Marks[p], Committed: ti.Marks[p]})
	}
	for p, m := range ti.Marks {
		if !seen[p] {
			s.Partitions = append(s.Partitions, Partition{ID: p, NextOffset: m, Committed: m})
		}
	}
	if ti.Lease != "" {
		s.Maintenance = &Maintenance{LeaseHolder: ti.Lease}
	}
	return s
}
