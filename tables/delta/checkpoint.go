package delta

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/snappy"
)

// Checkpoints (PROTOCOL.md "Checkpoints"): a Parquet file holding the
// reconciled state at a version — protocol, metaData, every live add,
// the removes still within retention, and the latest txn of every appId
// (so an idempotent writer's mark survives the JSON commits' cleanup) —
// one action per row, in the column of its name. _last_checkpoint then
// names it.

type cpRow struct {
	Txn      *cpTxn      `parquet:"txn,optional"`
	Add      *cpAdd      `parquet:"add,optional"`
	Remove   *cpRemove   `parquet:"remove,optional"`
	MetaData *cpMetaData `parquet:"metaData,optional"`
	Protocol *cpProtocol `parquet:"protocol,optional"`
}

type cpTxn struct {
	AppID       string `parquet:"appId"`
	Version     int64  `parquet:"version"`
	LastUpdated *int64 `parquet:"lastUpdated,optional"`
}

type cpAdd struct {
	Path             string            `parquet:"path"`
	PartitionValues  map[string]string `parquet:"partitionValues"`
	Size             int64             `parquet:"size"`
	ModificationTime int64             `parquet:"modificationTime"`
	DataChange       bool              `parquet:"dataChange"`
	Stats            *string           `parquet:"stats,optional"`
	Tags             map[string]string `parquet:"tags,optional"`
}

type cpRemove struct {
	Path                 string            `parquet:"path"`
	DeletionTimestamp    *int64            `parquet:"deletionTimestamp,optional"`
	DataChange           bool              `parquet:"dataChange"`
	ExtendedFileMetadata bool              `parquet:"extendedFileMetadata"`
	PartitionValues      map[string]string `parquet:"partitionValues,optional"`
	Size                 *int64            `parquet:"size,optional"`
}

type cpFormat struct {
	Provider string            `parquet:"provider"`
	Options  map[string]string `parquet:"options,optional"`
}

type cpMetaData struct {
	ID               string            `parquet:"id"`
	Name             *string           `parquet:"name,optional"`
	Description      *string           `parquet:"description,optional"`
	Format           cpFormat          `parquet:"format"`
	SchemaString     string            `parquet:"schemaString"`
	PartitionColumns []string          `parquet:"partitionColumns,list"`
	Configuration    map[string]string `parquet:"configuration,optional"`
	CreatedTime      *int64            `parquet:"createdTime,optional"`
}

type cpProtocol struct {
	MinReaderVersion int32    `parquet:"minReaderVersion"`
	MinWriterVersion int32    `parquet:"minWriterVersion"`
	ReaderFeatures   []string `parquet:"readerFeatures,optional,list"`
	WriterFeatures   []string `parquet:"writerFeatures,optional,list"`
}

// DefaultTombstoneRetention is delta.deletedFileRetentionDuration's
// default: removes younger than this stay in checkpoints, for vacuum.
const DefaultTombstoneRetention = 7 * 24 * time.Hour

func strMap(m map[string]*string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if v != nil { // a null partition value is an absent key in a checkpoint map
			out[k] = *v
		}
	}
	return out
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// encodeCheckpoint renders s as checkpoint rows, removes older than
// now-retention dropped. It returns the file and its number of actions.
func encodeCheckpoint(s *Snapshot, now time.Time, retention time.Duration) ([]byte, int64, error) {
	var rows []cpRow
	p := s.Protocol
	rows = append(rows, cpRow{Protocol: &cpProtocol{MinReaderVersion: int32(p.MinReaderVersion), MinWriterVersion: int32(p.MinWriterVersion),
		ReaderFeatures: p.ReaderFeatures, WriterFeatures: p.WriterFeatures}})
	m := s.Metadata
	pc := m.PartitionColumns
	if pc == nil {
		pc = []string{}
	}
	rows = append(rows, cpRow{MetaData: &cpMetaData{ID: m.ID, Name: optString(m.Name), Description: optString(m.Description),
		Format: cpFormat{Provider: m.Format.Provider, Options: m.Format.Options}, SchemaString: m.SchemaString,
		PartitionColumns: pc, Configuration: m.Configuration, CreatedTime: m.CreatedTime}})
	apps := make([]string, 0, len(s.Txns))
	for a := range s.Txns {
		apps = append(apps, a)
	}
	sort.Strings(apps)
	for _, a := range apps {
		t := s.Txns[a]
		rows = append(rows, cpRow{Txn: &cpTxn{AppID: t.AppID, Version: t.Version, LastUpdated: t.LastUpdated}})
	}
	for _, path := range s.Paths() {
		a := s.Files[path]
		rows = append(rows, cpRow{Add: &cpAdd{Path: a.Path, PartitionValues: strMap(a.PartitionValues), Size: a.Size,
			ModificationTime: a.ModificationTime, DataChange: false, Stats: optString(a.Stats), Tags: a.Tags}})
	}
	cutoff := now.Add(-retention).UnixMilli()
	tomb := make([]string, 0, len(s.Tombstones))
	for p := range s.Tombstones {
		tomb = append(tomb, p)
	}
	sort.Strings(tomb)
	for _, path := range tomb {
		r := s.Tombstones[path]
		if r.DeletionTimestamp != nil && *r.DeletionTimestamp < cutoff {
			continue
		}
		rows = append(rows, cpRow{Remove: &cpRemove{Path: r.Path, DeletionTimestamp: r.DeletionTimestamp, DataChange: false,
			ExtendedFileMetadata: r.ExtendedFileMetadata, PartitionValues: strMap(r.PartitionValues), Size: r.Size}})
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[cpRow](&buf, parquet.Compression(&snappy.Codec{}))
	if _, err := w.Write(rows); err != nil {
		return nil, 0, err
	}
	if err := w.Close(); err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), int64(len(rows)), nil
}

// WriteCheckpoint writes the checkpoint of s (which must be a snapshot
// of this table) and points _last_checkpoint at it. A checkpoint is
// derived state: writing it again gives the same content, so a plain
// overwrite is safe, and a reader ignores one it cannot read fully.
func (t *Table) WriteCheckpoint(ctx context.Context, s *Snapshot, now time.Time) error {
	data, n, err := encodeCheckpoint(s, now, retentionOf(s.Metadata))
	if err != nil {
		return fmt.Errorf("checkpoint version %d: %w", s.Version, err)
	}
	if err := t.st.Put(ctx, t.logKey(CheckpointName(s.Version)), data); err != nil {
		return fmt.Errorf("checkpoint version %d: %w", s.Version, err)
	}
	lc, _ := json.Marshal(LastCheckpoint{Version: s.Version, Size: n})
	if err := t.st.Put(ctx, t.logKey("_last_checkpoint"), lc); err != nil {
		return fmt.Errorf("checkpoint version %d: _last_checkpoint: %w", s.Version, err)
	}
	return nil
}

// retentionOf is the table's delta.deletedFileRetentionDuration
// ("interval 7 days" form), or the default.
func retentionOf(m Metadata) time.Duration {
	if d, ok := parseInterval(m.Configuration["delta.deletedFileRetentionDuration"]); ok {
		return d
	}
	return DefaultTombstoneRetention
}

// parseInterval reads "interval N unit" (Spark's calendar interval form
// of Delta's durations).
func parseInterval(s string) (time.Duration, bool) {
	f := strings.Fields(strings.ToLower(s))
	if len(f) != 3 || f[0] != "interval" {
		return 0, false
	}
	var n int64
	if _, err := fmt.Sscan(f[1], &n); err != nil || n < 0 {
		return 0, false
	}
	unit := map[string]time.Duration{"second": time.Second, "seconds": time.Second, "minute": time.Minute, "minutes": time.Minute,
		"hour": time.Hour, "hours": time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour}[f[2]]
	if unit == 0 {
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// Cleanup deletes the JSON commits and checkpoints of versions below
// the latest checkpoint minus keep: what is left still replays from that
// checkpoint, and keep versions of history before it stay readable
// (time travel, and a slow reader replaying from an older checkpoint).
// It never touches data files.
func (t *Table) Cleanup(ctx context.Context, keep int64) (int, error) {
	return t.cleanupBelow(ctx, keep, func(string) (bool, error) { return true, nil })
}

// cleanupBelow deletes the JSON commits and checkpoints of versions below
// the latest checkpoint minus keep that del says may go (del's false
// keeps a file, its error ends the cleanup), returning how many it
// deleted; with no checkpoint it deletes nothing.
func (t *Table) cleanupBelow(ctx context.Context, keep int64, del func(key string) (bool, error)) (int, error) {
	s, err := t.Snapshot(ctx)
	if err != nil {
		return 0, err
	}
	if s.Checkpoint < 0 {
		return 0, nil
	}
	keys, err := t.st.List(ctx, t.logKey(""))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		lf, ok := parseLogName(k)
		if !ok || lf.version >= s.Checkpoint-keep {
			continue
		}
		gone, err := del(k)
		if err != nil {
			return n, err
		}
		if !gone {
			continue
		}
		if err := t.st.Delete(ctx, k); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
