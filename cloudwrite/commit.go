package cloudwrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tributary-io/tributary/tables"
)

// Defaults of a Committer.
const (
	DefaultCommitInterval  = time.Second
	DefaultLeaseDuration   = 30 * time.Second
	DefaultCollectGrace    = time.Minute
	DefaultMaxCommitBytes  = 64 << 20
	DefaultCloudPartitions = "cloud"
)

// CommitConfig configures a Committer.
type CommitConfig struct {
	// Server is this server's id (the lease holder).
	Server string
	// Owner is the node id cloud-produced partitions are allocated to in
	// the catalog (tables.AllocatePartition), the same on every cloud
	// server. Default "cloud".
	Owner string
	// Interval between rounds. Default 1s.
	Interval time.Duration
	// Lease is how long a table job's lease lasts unrenewed: another
	// server takes the table's job over after it. Default 30s.
	Lease time.Duration
	// Grace: a WAL object is deleted this long after the table committed
	// all its records (readers holding an older mark still read it).
	// Default 1 min.
	Grace time.Duration
	// OrphanGrace: an object never sequenced is deleted when older than
	// this (Config.OrphanGrace, the same on every server). Default 10 min.
	OrphanGrace time.Duration
	// MaxCommitBytes bounds the record bytes of one partition's commit.
	// Default 64 MiB.
	MaxCommitBytes int
	Parquet        tables.ParquetOptions
	Logger         *slog.Logger
	// Put writes a data file (the warehouse bucket). Required.
	Put func(ctx context.Context, key string, data []byte) error
}

// Committer is the job, per table, that turns sequenced WAL records into
// Parquet files and table commits with marks, and collects WAL objects
// (commit.go). Run it on every cloud server: a lease in the state
// database lets one at a time work on a table.
type Committer struct {
	cfg   CommitConfig
	cat   *tables.Catalog
	st    *State
	tail  *Tail
	store Store
	log   *slog.Logger
}

// NewCommitter returns a Committer.
func NewCommitter(cfg CommitConfig, cat *tables.Catalog, st *State, tail *Tail, store Store) *Committer {
	if cfg.Owner == "" {
		cfg.Owner = DefaultCloudPartitions
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultCommitInterval
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLeaseDuration
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultCollectGrace
	}
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = DefaultOrphanGrace
	}
	if cfg.MaxCommitBytes <= 0 {
		cfg.MaxCommitBytes = DefaultMaxCommitBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Committer{cfg: cfg, cat: cat, st: st, tail: tail, store: store, log: cfg.Logger}
}

// Run commits and collects every Interval until ctx ends.
func (c *Committer) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	sweep := time.Now()
	for {
		if err := c.Round(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("cloud write: commit round", "err", err)
		}
		if time.Since(sweep) > c.cfg.OrphanGrace/4 {
			sweep = time.Now()
			if err := c.SweepOrphans(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("cloud write: sweep orphans", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round commits every stream whose lease this server holds or takes, then
// collects the WAL objects all of whose records are committed.
func (c *Committer) Round(ctx context.Context) error {
	parts, err := c.st.Partitions(ctx)
	if err != nil {
		return err
	}
	byStream := map[string][]PartitionEnd{}
	var order []string
	for _, p := range parts {
		if _, ok := byStream[p.Stream]; !ok {
			order = append(order, p.Stream)
		}
		byStream[p.Stream] = append(byStream[p.Stream], p)
	}
	var errs []error
	for _, s := range order {
		ok, err := c.st.Acquire(ctx, "table:"+s, c.cfg.Server, c.cfg.Lease)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		if err := c.CommitStream(ctx, s, byStream[s]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Collect(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CommitStream commits the sequenced records of stream's partitions
// beyond the table's marks in one table commit (tables.CommitAppend:
// exactly once by the marks, whoever else commits), then forgets the
// ranges the table covers.
func (c *Committer) CommitStream(ctx context.Context, stream string, parts []PartitionEnd) error {
	t, err := c.cat.LoadTable(ctx, stream)
	if err != nil {
		return fmt.Errorf("commit %s: %w", stream, err)
	}
	hw := tables.HighWaters(t)
	owners := tables.Owners(t)
	g, err := c.cat.Granularity(ctx, stream)
	if err != nil {
		return fmt.Errorf("commit %s: %w", stream, err)
	}
	var appends []tables.PartitionAppend
	for _, p := range parts {
		from := hw[p.Partition]
		if p.End <= from {
			continue
		}
		o, ok := owners[p.Partition]
		if !ok || o.Node != c.cfg.Owner {
			return fmt.Errorf("commit %s partition %d: not a cloud partition (owner %q)", stream, p.Partition, o.Node)
		}
		recs, err := c.tail.Read(ctx, stream, p.Partition, from, c.cfg.MaxCommitBytes)
		if err != nil {
			return fmt.Errorf("commit %s partition %d: %w", stream, p.Partition, err)
		}
		if len(recs) == 0 || recs[0].Offset != from {
			return fmt.Errorf("commit %s partition %d: sequenced records do not start at the mark %d", stream, p.Partition, from)
		}
		a := tables.PartitionAppend{Partition: p.Partition, From: from, To: from + int64(len(recs)), Epoch: o.Epoch}
		for _, r := range recs {
			r.Epoch = o.Epoch
		}
		for _, run := range tables.CutRuns(g, recs) {
			var buf bytes.Buffer
			st, err := c.cfg.Parquet.WriteParquet(&buf, run)
			if err != nil {
				return fmt.Errorf("commit %s partition %d: %w", stream, p.Partition, err)
			}
			url := tables.DataFileURL(c.cat.TableLocation(stream), st, tables.OriginOf(c.cfg.Owner, o.Epoch))
			key, err := c.cat.KeyOf(url)
			if err != nil {
				return err
			}
			if err := c.cfg.Put(ctx, key, buf.Bytes()); err != nil {
				return fmt.Errorf("commit %s: upload %s: %w", stream, key, err)
			}
			a.Files = append(a.Files, tables.FileMeta{URL: url, Size: int64(buf.Len()), Stats: st})
		}
		appends = append(appends, a)
	}
	if len(appends) > 0 {
		res, err := c.cat.CommitAppend(ctx, stream, appends, map[string]string{"tributary.node": c.cfg.Owner, "tributary.cloud-server": c.cfg.Server})
		if err != nil {
			return err
		}
		c.log.Debug("cloud write: committed", "stream", stream, "committed", res.Committed, "already", res.Already)
		if t, err = c.cat.LoadTable(ctx, stream); err != nil {
			return err
		}
		hw = tables.HighWaters(t)
	}
	// Forget the ranges the table holds, after the grace.
	before := time.Now().Add(-c.cfg.Grace)
	for _, p := range parts {
		if err := c.st.Forget(ctx, stream, p.Partition, hw[p.Partition], before); err != nil {
			return err
		}
	}
	return nil
}

// Collect deletes the WAL objects whose ranges have all been forgotten
// (committed, or never visible: duplicates) for the grace.
func (c *Committer) Collect(ctx context.Context) error {
	keys, err := c.st.Collectable(ctx, c.cfg.Grace, 1000)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := c.store.Delete(ctx, k); err != nil {
			return fmt.Errorf("delete WAL object %s: %w", k, err)
		}
		if err := c.st.DropObject(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// SweepOrphans deletes WAL objects older than OrphanGrace that were never
// sequenced: a server died (or failed to sequence) after the put. No
// writer sequences an object that old (Config.OrphanGrace).
func (c *Committer) SweepOrphans(ctx context.Context) error {
	old := time.Now().Add(-c.cfg.OrphanGrace)
	var orphans []string
	err := c.store.List(ctx, Prefix, func(key string, mod time.Time) error {
		if !strings.HasSuffix(key, ".trbw") || mod.After(old) {
			return nil
		}
		seq, err := c.st.Sequenced(ctx, key)
		if err != nil {
			return err
		}
		if !seq {
			orphans = append(orphans, key)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range orphans {
		c.log.Info("cloud write: deleting an orphaned WAL object (put, never sequenced)", "object", k)
		if err := c.store.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}
