package tables

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tributary-io/tributary/tables/delta"
)

// TableStats are the size figures of one table that maintenance bounds.
type TableStats struct {
	Stream        string
	Snapshots     int   // snapshots in the metadata
	DataManifests int   // data manifests of the current snapshot
	DataFiles     int64 // data files of the current snapshot
	Records       int64 // rows of the current snapshot
	MetadataBytes int64 // size of the current metadata file
	LeaseHolder   string
}

// Stats reads a stream's table figures.
func (c *Catalog) Stats(ctx context.Context, stream string) (TableStats, error) {
	t, err := c.LoadTable(ctx, stream)
	if err != nil {
		return TableStats{}, err
	}
	st := TableStats{Stream: stream, Snapshots: len(t.Metadata().Snapshots())}
	st.LeaseHolder, _ = LeaseHolder(t)
	if s := t.CurrentSnapshot(); s != nil && s.Summary != nil {
		st.DataFiles, _ = strconv.ParseInt(s.Summary.Properties["total-data-files"], 10, 64)
		st.Records, _ = strconv.ParseInt(s.Summary.Properties["total-records"], 10, 64)
	}
	if st.DataManifests, err = dataManifestCount(ctx, t); err != nil {
		return st, err
	}
	fs, err := t.FS(ctx)
	if err != nil {
		return st, err
	}
	f, err := fs.Open(t.MetadataLocation())
	if err != nil {
		return st, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return st, err
	}
	st.MetadataBytes = fi.Size()
	return st, nil
}

// MaintenanceStats are a table's figures plus the maintainer's record of it.
type MaintenanceStats struct {
	TableStats
	Passes    int64 // passes run (whether or not the lease was free)
	Failures  int64 // passes that ended in an error
	LeaseBusy int64 // passes skipped because another maintainer held the lease
	// DeletesRefused counts, over all passes, deletes of paths outside
	// the table's folder that were refused.
	DeletesRefused int64
	LastPass       time.Time
	LastDuration   time.Duration
	LastError      string
	Last           PassResult // the last completed pass
}

// MaintainerConfig tunes a Maintainer.
type MaintainerConfig struct {
	// Interval between passes over all streams. Default 1 minute.
	Interval time.Duration
	// Policy for every stream (tables' properties override it).
	Policy Policy
	// DeltaStore is the store of the tables' Delta logs
	// (MaintainOptions.DeltaStore).
	DeltaStore delta.Store
	Logger     *slog.Logger
}

// DefaultMaintainInterval is the default interval between passes.
const DefaultMaintainInterval = time.Minute

// Maintainer runs maintenance passes over streams in the background.
type Maintainer struct {
	cat *Catalog
	cfg MaintainerConfig

	mu    sync.Mutex
	stats map[string]*MaintenanceStats
}

// NewMaintainer makes a Maintainer; call Run to start it.
func NewMaintainer(cat *Catalog, cfg MaintainerConfig) *Maintainer {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultMaintainInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Maintainer{cat: cat, cfg: cfg, stats: map[string]*MaintenanceStats{}}
}

// Run makes a pass over every stream each Interval (the first after a
// random part of it, so that restarted nodes do not align) until ctx ends.
func (m *Maintainer) Run(ctx context.Context) {
	wait := m.cfg.Interval/2 + rand.N(m.cfg.Interval/2+1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		m.RunOnce(ctx)
		wait = m.cfg.Interval
	}
}

// RunOnce makes one pass over every stream table of the catalog and returns the errors of those
// that failed (a lease held elsewhere is not an error).
func (m *Maintainer) RunOnce(ctx context.Context) error {
	streams, err := m.cat.ListStreams(ctx)
	if err != nil {
		m.cfg.Logger.Warn("maintain: list streams", "err", err)
		return err
	}
	var errs []error
	for _, s := range streams {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res, err := m.cat.Maintain(ctx, s, MaintainOptions{Policy: m.cfg.Policy, DeltaStore: m.cfg.DeltaStore})
		m.record(s, res, err)
		if res.DeletesRefused > 0 {
			m.cfg.Logger.Warn("maintain: refused to delete files outside the table's folder (a manifest, manifest list or statistics entry names them)",
				"stream", s, "refused", res.DeletesRefused, "paths", res.RefusedPaths)
		}
		switch {
		case err == nil:
			if res.DeltaSkipped != "" {
				m.cfg.Logger.Warn("maintain: the table's Delta log stops compaction, expiry and cleanup until it can be read and written",
					"stream", s, "why", res.DeltaSkipped)
			}
			if res.CompactGroups+res.SnapshotsExpired+res.OrphansDeleted > 0 || res.ManifestsAfter < res.ManifestsBefore {
				m.cfg.Logger.Info("maintain: pass", "stream", s, "compacted_files", res.CompactInputs, "into", res.CompactGroups,
					"manifests", res.ManifestsAfter, "expired_snapshots", res.SnapshotsExpired, "orphans_deleted", res.OrphansDeleted,
					"snapshots", res.Stats.Snapshots, "data_files", res.Stats.DataFiles, "metadata_bytes", res.Stats.MetadataBytes,
					"took", res.Duration.Round(time.Millisecond))
			}
		case errors.Is(err, ErrLeaseHeld):
			m.cfg.Logger.Debug("maintain: lease held elsewhere", "stream", s, "err", err)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			m.cfg.Logger.Warn("maintain: pass failed; next pass retries", "stream", s, "err", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Maintainer) record(stream string, res PassResult, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats[stream]
	if st == nil {
		st = &MaintenanceStats{}
		m.stats[stream] = st
	}
	st.Passes++
	st.DeletesRefused += int64(res.DeletesRefused)
	st.LastPass, st.LastDuration = res.Started, res.Duration
	switch {
	case err == nil:
		st.LastError = ""
		st.Last = res
		st.TableStats = res.Stats
	case errors.Is(err, ErrLeaseHeld):
		st.LeaseBusy++
	default:
		st.Failures++
		st.LastError = err.Error()
	}
}

// Stats returns the maintainer's figures of every stream it has visited,
// sorted by stream.
func (m *Maintainer) Stats() []MaintenanceStats {
	m.mu.Lock()
	out := make([]MaintenanceStats, 0, len(m.stats))
	for s, st := range m.stats {
		c := *st
		c.Stream = s
		out = append(out, c)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Stream < out[j].Stream })
	return out
}
