package uplink

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
)

// The Delta side of a commit (streams with formats [iceberg, delta]; see
// tables/deltalog.go). After every Iceberg commit of such a stream the
// uplink brings its Delta log up to the table (tables.Catalog.SyncDelta),
// with the just-committed files as the hint. A Delta failure never stops
// the Iceberg side: the stream is marked behind, logged and counted, and
// retried on later passes — also when the stream has nothing new, so a
// log left behind by a crash between the two commits catches up after a
// restart without new data.

// DeltaCommitter is the Committer's Delta side (tables.Catalog).
type DeltaCommitter interface {
	SyncDelta(ctx context.Context, st delta.Store, stream string, hint []tables.PartitionAppend, o tables.DeltaOptions) (tables.DeltaSync, error)
}

// deltaRetry is how long a Delta log that failed waits before the next
// try of a pass with nothing new.
const deltaRetry = 5 * time.Second

// deltaOn reports whether stream's formats include delta; a dead-letter
// table has a Delta log when its stream has one.
func (u *Uplink) deltaOn(stream string) bool {
	if base, ok := strings.CutSuffix(stream, tables.DLQSuffix); ok {
		return u.deltaOn(base)
	}
	if v, ok := u.cfg.Delta[stream]; ok {
		return v
	}
	return u.cfg.DeltaDefault
}

// DeltaStreams are the streams this uplink keeps a Delta log for (those
// named, and with DeltaDefault those its WAL holds), sorted.
func (u *Uplink) DeltaStreams() []string {
	set := map[string]bool{}
	for s, on := range u.cfg.Delta {
		if on {
			set[s] = true
		}
	}
	if u.cfg.DeltaDefault {
		for _, p := range u.log.Partitions() {
			if u.deltaOn(p.Stream) {
				set[p.Stream] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// syncDelta runs the Delta side of a commit of stream (hint: the appends
// just committed to Iceberg, nil for a catch-up).
func (u *Uplink) syncDelta(ctx context.Context, stream string, hint []tables.PartitionAppend) {
	if !u.deltaOn(stream) || u.cfg.DeltaStore == nil {
		return
	}
	dc, ok := u.cat.(DeltaCommitter)
	if !ok {
		return
	}
	var res tables.DeltaSync
	var err error
	if u.cfg.deltaHook != nil {
		err = u.cfg.deltaHook(stream)
	}
	if err == nil {
		res, err = dc.SyncDelta(ctx, u.cfg.DeltaStore, stream, hint, tables.DeltaOptions{CheckpointInterval: u.cfg.DeltaCheckpointInterval, Node: u.cfg.Node})
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.deltaBehind == nil {
		u.deltaBehind = map[string]time.Time{}
	}
	if u.stats.DeltaVersions == nil {
		u.stats.DeltaVersions = map[string]int64{}
	}
	if errors.Is(err, tables.ErrNoSuchStream) {
		u.stats.DeltaVersions[stream] = -1 // no table yet: its first commit syncs
		return
	}
	if err != nil {
		u.stats.DeltaFailures++
		u.deltaBehind[stream] = time.Now().Add(deltaRetry)
		u.cfg.Logger.Error("uplink: the Delta log was not brought up to the Iceberg table; Iceberg commits go on, and the Delta log catches up from the marks once it can be written",
			"stream", stream, "err", err)
		return
	}
	delete(u.deltaBehind, stream)
	u.stats.DeltaVersions[stream] = res.Version
	if res.Committed {
		u.stats.DeltaCommits++
	}
	if res.Checkpoint {
		u.stats.DeltaCheckpoints++
	}
}

// deltaCatchUp syncs the Delta logs that are behind (never synced since
// start, or failed) and are due, for streams with nothing pending, and
// their dead-letter tables' (a stream without one: ErrNoSuchStream,
// noted once).
func (u *Uplink) deltaCatchUp(ctx context.Context, pending map[string]bool, now time.Time) {
	for _, s := range u.DeltaStreams() {
		if pending[s] {
			continue
		}
		u.deltaCatchUpOne(ctx, s, now)
		u.deltaCatchUpOne(ctx, tables.DLQStream(s), now)
	}
}

func (u *Uplink) deltaCatchUpOne(ctx context.Context, s string, now time.Time) {
	u.mu.Lock()
	next, behind := u.deltaBehind[s]
	_, seen := u.stats.DeltaVersions[s]
	u.mu.Unlock()
	if (seen && !behind) || (behind && now.Before(next)) {
		return
	}
	u.syncDelta(ctx, s, nil)
}
