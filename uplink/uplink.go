// Package uplink drains the write-ahead log into Iceberg tables.
//
// # Invariants
//
//  1. Released only after committed. A WAL range is released only once
//     this uplink's commit of it succeeded, or the table proves that it
//     did (invariant 5); a crash anywhere in the pipeline leaves the
//     records in the WAL, and the next pass finds them.
//
//  2. Exactly once in the table. Each pass starts from the partition's
//     committed high-water mark, read from the table itself, and commits
//     files and the new mark in one transaction that fails if anybody else
//     committed in between (tables.CommitAppend). A retry after a failure
//     whose outcome is unknown therefore either finds the batch committed
//     (and only releases it) or commits it once.
//
//  3. Contiguous files. Every data file holds consecutive offsets of one
//     partition and one partition bucket of the table (a day or an hour of
//     the ingest timestamp, or of the event time for a typed stream
//     partitioned by it: tables.CutRuns, Shaped.CutRuns), so min/max
//     statistics prune Kafka and Pulsar reads to a file and the catalog
//     accepts it.
//
//  6. Typed streams lose nothing. For a stream with typed columns
//     (Config.Payloads), the batch's new columns are committed to the
//     table before its files are written (tables.Catalog.Shape), and its
//     dead letters — payloads that cannot be typed, still in the batch
//     with null typed columns — are committed to <stream>_dlq, exactly once
//     by that table's own marks, before the batch itself.
//
//  4. Fenced partitions stop, and lose nothing. Every append carries
//     the ownership epoch its records were accepted at (one epoch per
//     append: a batch is cut where the epoch changes). When the table says
//     another node owns the partition at a higher epoch than any record of
//     it in the WAL (checked on every reload, before the mark is looked
//     at: the mark may cover the new owner's records at these very
//     offsets), or when the commit itself is fenced (tables.FencedError),
//     nothing is committed or released: the uplink tells its
//     FenceListeners so that ingest stops writing the partition, then
//     re-admits (ReadmitInto): the records at or above the offset where
//     the new owner's history starts (tables.EpochStart) reached no one
//     else; in ONE WAL transaction (wal.OpReadmit) they move, with
//     new offsets, into this node's own partition, the others (below the
//     start: in the table or in the new owner's copy) are dropped, and the
//     partition is sealed, so an append that raced the fence is moved or
//     refused, never lost. It is logged at warn level and counted
//     (Stats.ReadmittedRecords). Where the start is not known (an older
//     take-over) the partition is sealed, copied to the quarantine
//     (quarantine.go; if that fails nothing is dropped) and dropped,
//     logged at error level. Either way nothing is done if the WAL
//     partition holds a record of the table's epoch: this node took it
//     back while the stale batch was in flight, and only that batch was
//     stale.
//
//  5. A mark alone is not proof. Records this uplink did not commit
//     itself (the table's mark is above the WAL's released offset: a run
//     that crashed before releasing, or a mark somebody else wrote) are
//     released only once the table's current snapshot holds every one of
//     their offsets in a data file committed by this node under the epoch
//     the WAL holds the record at (the file's name records its origin,
//     tables.Origin; Committer.Committed lists the files). A forged mark,
//     or files of another node or of a previous owner at these offsets,
//     prove nothing: the records stay in the WAL, the pass logs it at
//     error level and counts it (Stats.UnprovenMarks); if the partition is
//     fenced they go to the quarantine (invariant 4).
//
// # Outline
//
// Run loops until its context ends: every Interval, or as soon as a
// partition has MaxBatchBytes waiting, it makes one pass over every stream
// with unreleased records. A pass per stream: reload the table's high-water
// marks; release what they already cover; read each partition's records
// from its mark (at most MaxBatchBytes); cut them at the table's partition
// buckets (days or hours) and encode each run as a zstd Parquet file; upload the files through the
// Bucket; commit them with the new marks through the Committer; release.
// A raw stream's records are read as the WAL's entries (wal.ReadEntriesInto):
// a Kafka batch entry is encoded in place, its records walked in the
// batch's bytes straight into the Parquet columns
// (tables.WriteParquetEntries), with no Record object per Kafka record;
// the file is byte for byte the one the records would give. Typed
// streams and continuous encoding read records (Log.Read).
// Failures of the store or the catalog are retried with exponential backoff
// per stream; streams do not wait for each other's failures. Uploaded files
// whose commit never happens are orphans for table maintenance to delete.
//
// # Continuous encoding
//
// With Config.ContinuousEncoding (uplink.continuous_encoding), a second
// goroutine (preencode.go) encodes each stream's partitions as their
// records land instead of in one burst per pass: per partition one
// in-progress Parquet file (tables.Encoder, in memory) from the WAL's
// released offset, filled in slices of at most 1024 records read from the
// WAL, polled every 20ms. A file stops growing at an epoch change, at a
// change of partition bucket (the table's granularity) and at 16 MiB of
// records (or half of MaxBatchBytes, of MaxTypedBatchBytes for a typed
// stream), so it stays within what one upload file holds; it holds the
// encoded pages and the records it encoded. All files together hold at
// most Config.PreencodeMaxBytes of records
// (uplink.continuous_encoding_max_bytes): at the cap a file waits for a
// pass to take one. Between slices it calls runtime.Gosched, and sleeps
// 10ms when ingest is short of CPU: when more than 1% of the goroutine
// wake-ups since the last slice waited over 1ms to run (runtime/metrics
// /sched/latencies:seconds; tributary_uplink_preencode_backoffs_total).
// While a pass syncs a stream the pre-encoder leaves it alone.
//
// A typed stream's file (Config.Payloads) is encoded with the table's
// schema as last loaded (Committer.Preshape: the columns are those the
// pass would write if the batch changed nothing): every record in it is
// typed under that schema with no column to add. A record that would need
// the table to change (a new column, the event_time column or spec) or
// that is a dead letter ends the file just before it; so does a schema
// that changed between slices.
//
// A pass takes the partition's file and uses it for the first file of
// the batch only if it provably holds a prefix of that file's records: it
// starts at the table's mark, it is no longer than the batch's first run
// (cut at the epoch and at the partition buckets of the table's current
// spec) and its records are the run's first ones, compared field by field
// (so a WAL partition dropped and written again, another epoch or another
// payload at the same offsets, is caught). For a typed stream the batch's
// Shape (after any schema evolution it committed) must have the file's
// schema — the same schema id and field ids (tables.SameSchema) — and have
// each of the file's records typed, with the event time the file has:
// typed values are a function of the payload bytes (compared), the policy
// (fixed) and the schema. The pass appends the rest of the run (with the
// batch's Shape: its dead letters' typed columns null) and closes the
// file: tables.Encoder hands records to the column writers in the chunks
// and row groups WriteParquet uses, so the bytes are those the burst path
// writes. In every other case the file is discarded
// (tributary_uplink_preencoded_files_total{outcome="discarded"}) and the
// run encoded as without it. The commit protocol is unchanged: Shape,
// the dead letters and the commit run as before.
package uplink

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
	"github.com/tributary-io/tributary/tables/typed"
	"github.com/tributary-io/tributary/uplink/quarantine"
	"github.com/tributary-io/tributary/wal"
)

// Committer commits uploaded files to a stream's table; tables.Catalog is
// the direct implementation.
type Committer interface {
	// Marks reloads the table and returns its partitions' committed
	// high-water marks and ownership (owner node, epoch).
	Marks(ctx context.Context, stream string) (map[int32]int64, map[int32]tables.Ownership, error)
	CommitAppend(ctx context.Context, stream string, appends []tables.PartitionAppend, summary map[string]string) (tables.CommitResult, error)
	// Committed returns the data files of the table's current snapshot
	// holding offsets of [from, to) of partition p, by first offset, with
	// their origins: the proof asked for before releasing records this
	// uplink did not commit itself (see proven).
	Committed(ctx context.Context, stream string, p int32, from, to int64) ([]tables.CommittedFile, error)
	// EpochStart reloads the table and returns partition p's owner and
	// the first offset of its epoch, if the take-over recorded it
	// (tables.EpochStart): where a fenced partition's re-admission starts.
	EpochStart(ctx context.Context, stream string, p int32) (o tables.Ownership, start int64, ok bool, err error)
	// Granularity is the partition granularity of the stream's table as
	// the last Marks loaded it: data files are cut at its buckets.
	Granularity(ctx context.Context, stream string) (tables.Granularity, error)
	// Shape decodes a batch's payloads for a typed stream, adding the
	// columns their new fields need to the table first (tables/typedcols.go).
	Shape(ctx context.Context, stream string, pol typed.Policy, recs []*tributary.Record) (*tables.Shaped, error)
	// Preshape shapes recs against the table as last loaded, changing
	// nothing: the prefix of n records that is typed with no column to
	// add and no dead letter (continuous encoding of typed streams).
	Preshape(ctx context.Context, stream string, pol typed.Policy, recs []*tributary.Record) (*tables.Shaped, int, error)
	// CommitDeadLetters commits the dead letters of a batch ending at to
	// to the stream's dead-letter table, exactly once by its own mark.
	CommitDeadLetters(ctx context.Context, stream string, p int32, to int64, o tables.Origin, dls []tables.DeadLetter) (int, error)
	TableLocation(stream string) string
	KeyOf(fileURL string) (string, error)
}

// Bucket is the object store: one write of a whole object. It must not
// keep data after WriteAll returns (the uplink reuses the buffer).
type Bucket interface {
	WriteAll(ctx context.Context, key string, data []byte) error
}

// Log is the part of the WAL the uplink uses.
type Log interface {
	Partitions() []wal.PartitionState
	Read(stream string, partition int32, from int64, maxRecords int, maxBytes int64) ([]*tributary.Record, error)
	// ReadEntriesInto is Read giving the stored entries, Kafka batches as
	// views over their bytes copied into buf's spare capacity
	// (wal.ReadEntriesInto).
	ReadEntriesInto(buf []byte, stream string, partition int32, from int64, maxRecords int, maxBytes int64) ([]tributary.Entry, []byte, error)
	// Apply writes an Op: the uplink releases what the table holds
	// (wal.OpRelease), moves a partition up to the table's mark
	// (wal.OpEnsure), and settles a fenced partition with wal.OpSeal,
	// wal.OpReadmit and wal.OpDrop (wal/readmit.go; see invariant 4).
	Apply(ctx context.Context, o wal.Op) wal.Result
	Notify() <-chan struct{}
}

// Home is where a fenced partition's records that only this node holds
// are re-admitted: this node's own partition of the stream (owner.Book,
// which allocates one through the catalog when the node owns none).
type Home interface {
	Own(ctx context.Context, stream string) (partition int32, epoch int64, err error)
}

// Config tunes the uplink.
type Config struct {
	// Interval between commits of a stream (default 1s).
	Interval time.Duration
	// MaxBatchBytes is the most WAL bytes of one partition in one commit;
	// reaching it triggers a commit before the interval (default 64 MiB).
	MaxBatchBytes int64
	// MinBackoff and MaxBackoff bound the retry delay after a failure
	// (defaults 100ms and 30s).
	MinBackoff, MaxBackoff time.Duration
	// Node is recorded in snapshot summaries.
	Node   string
	Logger *slog.Logger
	// QuarantineDir receives the records of a fenced partition before they
	// are dropped from the WAL (see quarantine.go). Required for a fence to
	// drop anything: without it a fenced partition is kept and reported.
	QuarantineDir string
	// Payloads says, per stream, how payloads become typed columns
	// (streams not named are raw: the envelope only).
	Payloads map[string]typed.Policy
	// Parquet says how data files are encoded (zstd level).
	Parquet tables.ParquetOptions
	// ContinuousEncoding pre-encodes records as they land (preencode.go;
	// see the package comment).
	ContinuousEncoding bool
	// PreencodeMaxBytes caps the records (payloads, keys, topics,
	// headers) all in-progress files of continuous encoding hold at once
	// (default DefaultPreencodeMaxBytes).
	PreencodeMaxBytes int64
	// Delta says, per stream, whether its formats include delta (each
	// commit also goes to its Delta log in DeltaStore: delta.go);
	// DeltaDefault is the answer for streams it does not name.
	Delta        map[string]bool
	DeltaDefault bool
	DeltaStore   delta.Store
	// DeltaCheckpointInterval: a Delta checkpoint every this many
	// versions (0: 10).
	DeltaCheckpointInterval int64
	// deltaHook runs before each Delta sync (tests: a pause, or a crash
	// between the two commits when it returns an error: the sync is not
	// made).
	deltaHook func(stream string) error
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 64 << 20
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PreencodeMaxBytes <= 0 {
		c.PreencodeMaxBytes = DefaultPreencodeMaxBytes
	}
}

// Stats are counters of the uplink's work.
type Stats struct {
	Commits          int64
	CommitFailures   int64
	UploadFailures   int64
	FilesUploaded    int64
	BytesUploaded    int64
	RecordsCommitted int64
	// Fenced counts partitions given up because another node owns them;
	// FencedRecords the WAL records dropped with them (the new owner has
	// them); ReadmittedRecords those moved into this node's own partition
	// instead (only this node held them).
	Fenced, FencedRecords, ReadmittedRecords int64
	// QuarantinedRecords counts the records written to the quarantine
	// before they were dropped from the WAL: of fenced partitions, and
	// those the ownership book wrote through Quarantine.
	QuarantinedRecords int64
	// UnprovenMarks counts passes that found a partition's mark covering
	// offsets the table's files do not hold (records kept, not released).
	UnprovenMarks int64
	// DeadLetters counts, per typed stream, the records committed to its
	// dead-letter table; TypedColumns the columns added to its table.
	DeadLetters, TypedColumns map[string]int64
	// LatestDeadLetters are the last dead letters committed (at most
	// MaxDeadLetterNotes, newest first), each with its reason.
	LatestDeadLetters []DeadLetterNote
	// DeltaVersions is the Delta log version of each delta stream as last
	// synced; DeltaCommits, DeltaCheckpoints and DeltaFailures count the
	// Delta side's commits, checkpoints and failed syncs (delta.go).
	DeltaVersions                                 map[string]int64
	DeltaCommits, DeltaCheckpoints, DeltaFailures int64
	LastCommit                                    time.Time
	LastError                                     string
	// Failing lists the streams currently in backoff.
	Failing []string
}

// Uplink moves records from the WAL to the tables.
type Uplink struct {
	cfg    Config
	log    Log
	cat    Committer
	bucket Bucket
	// fenceLs and releaseLs are set before Run (OnFence, OnRelease).
	fenceLs   []FenceListener
	releaseLs []ReleaseListener
	home      Home // ReadmitInto; nil: fenced records are quarantined

	mu          sync.Mutex
	backoff     map[string]*retryState // per stream
	stats       Stats
	dlq         map[string]int64     // per typed stream (Stats.DeadLetters)
	added       map[string]int64     // per typed stream (Stats.TypedColumns)
	notes       []DeadLetterNote     // Stats.LatestDeadLetters, oldest first
	deltaBehind map[string]time.Time // delta streams whose log is behind: next try (delta.go)
	dlqLogs     map[string]*dlqLog

	commits, commitFailures, uploadFailures atomic.Int64
	files, bytesUp, records                 atomic.Int64
	fenced, fencedRecords, unproven         atomic.Int64
	readmitted                              atomic.Int64
	q                                       *quarantine.Folder // Config.QuarantineDir

	metrics *metrics    // histograms (metrics.go)
	pre     *preEncoder // Config.ContinuousEncoding, else nil

	flushReq chan chan error

	// fileBuf is the buffer data files are encoded into (uploadEntries),
	// kept between files: a fresh one would be allocated and zeroed per
	// file, tens of megabytes. It and readBuf are kept up to
	// MaxBatchBytes each (a node that once uploaded a full batch keeps
	// about twice MaxBatchBytes of buffers).
	bufMu   sync.Mutex
	fileBuf []byte
	// readBuf holds the batches one pass reads (syncOnce), reused from
	// pass to pass; readMu keeps two passes from sharing it.
	readMu  sync.Mutex
	readBuf []byte
}

type retryState struct {
	failures int
	until    time.Time
}

// FenceListener hears of partitions the uplink found fenced (another node
// owns them now): the node's ownership book (owner.Book). Fenced is called
// before the partition's records are dropped from the WAL, so that ingest
// stops writing it first; it must not block long.
type FenceListener interface {
	Fenced(stream string, partition int32)
}

// ReleaseListener sees the records of each committed range before the WAL
// releases them: whatever keeps state past the WAL's records (the Kafka
// produce side's idempotent-producer snapshot). If Releasing fails the
// records are not released, and it is called again on the next pass.
type ReleaseListener interface {
	Releasing(stream string, partition int32, recs []*tributary.Record) error
}

// EntryReleaseListener is a ReleaseListener that can take the committed
// range as the WAL's entries (Kafka batches not decoded into records);
// the uplink calls ReleasingEntries instead of Releasing. The entries'
// bytes are the uplink's read buffer, reused after the call: keep
// nothing of them.
type EntryReleaseListener interface {
	ReleasingEntries(stream string, partition int32, es []tributary.Entry) error
}

// New makes an uplink; call Run to start it.
func New(cfg Config, log Log, cat Committer, bucket Bucket) *Uplink {
	cfg.defaults()
	u := &Uplink{cfg: cfg, log: log, cat: cat, bucket: bucket,
		backoff: map[string]*retryState{}, flushReq: make(chan chan error), metrics: newMetrics(),
		q: quarantine.New(cfg.QuarantineDir), dlq: map[string]int64{}, added: map[string]int64{}}
	u.metrics.pre.WithLabelValues("used")
	u.metrics.pre.WithLabelValues("discarded")
	if cfg.ContinuousEncoding {
		u.pre = newPreEncoder(u)
	}
	for stream, pol := range cfg.Payloads {
		if pol.Typed() {
			u.metrics.dlq.WithLabelValues(stream)
			u.metrics.added.WithLabelValues(stream)
			u.dlq[stream], u.added[stream] = 0, 0
		}
	}
	return u
}

// Payloads returns the typed streams' payload policies (Config.Payloads).
func (u *Uplink) Payloads() map[string]typed.Policy {
	out := map[string]typed.Policy{}
	for s, p := range u.cfg.Payloads {
		if p.Typed() {
			out[s] = p
		}
	}
	return out
}

// OnFence registers l; call it before Run.
func (u *Uplink) OnFence(l FenceListener) { u.fenceLs = append(u.fenceLs, l) }

// ReadmitInto makes h the home of fenced partitions' records that only
// this node holds (invariant 4); call it before Run. Without it they are
// quarantined.
func (u *Uplink) ReadmitInto(h Home) { u.home = h }

// OnRelease registers l; call it before Run.
func (u *Uplink) OnRelease(l ReleaseListener) { u.releaseLs = append(u.releaseLs, l) }

// Run drains the WAL until ctx ends.
func (u *Uplink) Run(ctx context.Context) {
	tick := time.NewTicker(u.cfg.Interval / 4)
	defer tick.Stop()
	if u.pre != nil {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); u.pre.run(ctx) }()
		defer wg.Wait()
	}
	last := map[string]time.Time{}
	for {
		var flush chan error
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-u.log.Notify():
		case flush = <-u.flushReq:
		}
		now := time.Now()
		var errs []error
		pend := u.pending()
		pendingSet := map[string]bool{}
		for s := range pend {
			pendingSet[s] = true
		}
		u.deltaCatchUp(ctx, pendingSet, now)
		for stream, parts := range pend {
			due := now.Sub(last[stream]) >= u.cfg.Interval
			big := false
			for _, p := range parts {
				big = big || p.Bytes >= u.cfg.MaxBatchBytes
			}
			if flush == nil && !due && !big {
				continue
			}
			if flush == nil && u.inBackoff(stream, now) {
				continue
			}
			last[stream] = now
			if err := u.syncStream(ctx, stream, parts); err != nil {
				errs = append(errs, err)
				u.fail(stream, err)
			} else {
				u.ok(stream)
			}
		}
		if flush != nil {
			flush <- errors.Join(errs...)
		}
	}
}

// Flush makes one pass over every stream now, ignoring intervals and
// backoff, and returns its errors. Run must be running.
func (u *Uplink) Flush(ctx context.Context) error {
	ch := make(chan error, 1)
	select {
	case u.flushReq <- ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SyncAll is Flush without Run: one pass over every stream, in the calling
// goroutine (for the final commit at shutdown and for tools).
func (u *Uplink) SyncAll(ctx context.Context) error {
	var errs []error
	for stream, parts := range u.pending() {
		if err := u.syncStream(ctx, stream, parts); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pending groups the WAL's partitions with unreleased records by stream.
func (u *Uplink) pending() map[string][]wal.PartitionState {
	out := map[string][]wal.PartitionState{}
	for _, p := range u.log.Partitions() {
		if p.Next > p.Released {
			out[p.Stream] = append(out[p.Stream], p)
		}
	}
	return out
}

func (u *Uplink) inBackoff(stream string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.backoff[stream]
	return r != nil && now.Before(r.until)
}

func (u *Uplink) fail(stream string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.backoff[stream]
	if r == nil {
		r = &retryState{}
		u.backoff[stream] = r
	}
	r.failures++
	d := u.cfg.MinBackoff << min(r.failures-1, 20)
	if d > u.cfg.MaxBackoff || d <= 0 {
		d = u.cfg.MaxBackoff
	}
	d = d/2 + rand.N(d/2+1)
	r.until = time.Now().Add(d)
	u.stats.LastError = err.Error()
	u.cfg.Logger.Warn("uplink: stream not committed, will retry", "stream", stream, "attempt", r.failures, "retry_in", d.Round(time.Millisecond), "err", err)
}

func (u *Uplink) ok(stream string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r := u.backoff[stream]; r != nil {
		u.cfg.Logger.Info("uplink: stream committing again", "stream", stream, "after_failures", r.failures)
		delete(u.backoff, stream)
	}
}

// Stats returns a snapshot of the counters.
func (u *Uplink) Stats() Stats {
	u.mu.Lock()
	s := u.stats
	for k := range u.backoff {
		s.Failing = append(s.Failing, k)
	}
	s.DeadLetters, s.TypedColumns, s.DeltaVersions = maps.Clone(u.dlq), maps.Clone(u.added), maps.Clone(u.stats.DeltaVersions)
	for i := len(u.notes) - 1; i >= 0; i-- {
		s.LatestDeadLetters = append(s.LatestDeadLetters, u.notes[i])
	}
	u.mu.Unlock()
	sort.Strings(s.Failing)
	s.Commits, s.CommitFailures, s.UploadFailures = u.commits.Load(), u.commitFailures.Load(), u.uploadFailures.Load()
	s.FilesUploaded, s.BytesUploaded, s.RecordsCommitted = u.files.Load(), u.bytesUp.Load(), u.records.Load()
	s.Fenced, s.FencedRecords, s.UnprovenMarks = u.fenced.Load(), u.fencedRecords.Load(), u.unproven.Load()
	s.ReadmittedRecords = u.readmitted.Load()
	s.QuarantinedRecords = u.q.Kept()
	return s
}

// syncStream makes one pass over one stream: see the package comment. A
// stale batch (the mark moved underneath) is rebuilt from the new mark; a
// fenced partition is given up and the others committed without it.
func (u *Uplink) syncStream(ctx context.Context, stream string, parts []wal.PartitionState) error {
	if u.pre != nil {
		u.pre.hold(stream)
		defer u.pre.unhold(stream)
	}
	stale, cuts := 0, 0
	for stale < 3 {
		cut, err := u.syncOnce(ctx, stream, parts)
		var se *tables.StaleError
		var fe *tables.FencedError
		switch {
		case err == nil && cut && cuts < maxEpochCuts:
			cuts++ // a batch was cut at an epoch change: commit the rest now
			parts = u.log.Partitions()
			parts = slices.DeleteFunc(parts, func(p wal.PartitionState) bool { return p.Stream != stream || p.Next == p.Released })
		case errors.As(err, &se):
			u.cfg.Logger.Info("uplink: batch stale, rebuilding from the table's mark", "stream", stream, "partition", se.Partition, "mark", se.HighWater)
			stale++
		case errors.As(err, &fe):
			if err := u.fence(ctx, stream, fe); err != nil {
				return err
			}
			parts = slices.DeleteFunc(parts, func(p wal.PartitionState) bool { return p.Partition == fe.Partition })
		default:
			return err
		}
	}
	return fmt.Errorf("sync %s: batch stale three times in a row", stream)
}

// MaxTypedBatchBytes caps the WAL bytes of one batch of a typed stream
// (below Config.MaxBatchBytes): Shape holds the batch's decoded payloads,
// about six times the JSON bytes, in memory.
const MaxTypedBatchBytes = 8 << 20

// maxEpochCuts bounds the extra commits of one pass for batches cut at an
// epoch change (there is rarely more than one).
const maxEpochCuts = 4

// fence gives up a partition another node owns now: see invariant 4. A
// partition that holds records of the table's epoch is this node's again
// (dropped and taken over since the fenced batch was read): it is kept, and
// only that batch was stale.
func (u *Uplink) fence(ctx context.Context, stream string, fe *tables.FencedError) error {
	st, _ := u.partition(stream, fe.Partition)
	if st.Epoch >= fe.Epoch {
		u.keptFenced(stream, fe)
		return nil
	}
	for _, l := range u.fenceLs {
		l.Fenced(stream, fe.Partition)
	}
	if done, err := u.readmit(ctx, stream, fe, st); done || err != nil {
		return err
	}
	// The quarantine: sealed first, so that nothing is appended between
	// the copy and the drop (an append of the old epoch is refused).
	seal := u.log.Apply(context.Background(), wal.Op{Kind: wal.OpSeal, Stream: stream, Partition: fe.Partition, Epoch: fe.Epoch})
	if seal.Err != nil {
		return fmt.Errorf("sync %s: seal fenced partition %d: %w", stream, fe.Partition, seal.Err)
	} else if seal.Kept {
		u.keptFenced(stream, fe)
		return nil
	}
	st, _ = u.partition(stream, fe.Partition)
	reason := fmt.Sprintf("fenced: partition %d is owned by %s at epoch %d, these records are of epoch %d or below", fe.Partition, fe.Owner, fe.Epoch, st.Epoch)
	qpath, qn, err := u.quarantine(stream, fe.Partition, st.Released, st.Next, reason)
	if err != nil {
		return fmt.Errorf("sync %s: quarantine fenced partition %d (nothing dropped): %w", stream, fe.Partition, err)
	}
	r := u.log.Apply(context.Background(), wal.Op{Kind: wal.OpDrop, Stream: stream, Partition: fe.Partition, Epoch: fe.Epoch})
	dropped, ours, err := r.Dropped, r.Kept, r.Err
	if err != nil {
		return fmt.Errorf("sync %s: drop fenced partition %d: %w", stream, fe.Partition, err)
	}
	switch {
	case ours && qpath != "":
		os.Remove(qpath) // nothing was dropped: the copy is not needed
	case qpath != "":
		u.q.Count(qn)
		u.cfg.Logger.Error("uplink: fenced records kept in quarantine; inspect with `tributary quarantine list`, replay with `tributary quarantine replay`",
			"stream", stream, "partition", fe.Partition, "records", qn, "file", qpath)
	}
	if ours {
		u.keptFenced(stream, fe)
		return nil
	}
	u.fenced.Add(1)
	u.fencedRecords.Add(dropped)
	u.cfg.Logger.Error("uplink: partition FENCED: another node owns it now; its records in this WAL are moved to the quarantine, not uploaded",
		"stream", stream, "partition", fe.Partition, "owner", fe.Owner, "owner_epoch", fe.Epoch, "our_epoch", fe.Have,
		"table_mark", fe.HighWater, "wal_released", st.Released, "wal_next", st.Next, "dropped_records", dropped,
		"quarantine", u.cfg.QuarantineDir)
	return nil
}

// keptFenced logs a fence of a partition this node owns again.
func (u *Uplink) keptFenced(stream string, fe *tables.FencedError) {
	u.cfg.Logger.Warn("uplink: fenced batch was from an earlier ownership; the partition holds records of the current epoch and is kept",
		"stream", stream, "partition", fe.Partition, "epoch", fe.Epoch, "batch_epoch", fe.Have)
}

// readmit settles a fenced partition by re-admission (invariant 4):
// the records at or above the new owner's epoch start move into this
// node's own partition, the rest are dropped, in one WAL transaction. It
// reports false, with no error, when the fence must fall back to the
// quarantine: no Home, a table that does not record the start (a
// take-over by an older version), or a partition that changed owners
// more than once since this node's epoch (the start recorded is not that
// of the epoch after it).
func (u *Uplink) readmit(ctx context.Context, stream string, fe *tables.FencedError, st wal.PartitionState) (bool, error) {
	if u.home == nil {
		return false, nil
	}
	p := fe.Partition
	o, start, ok, err := u.cat.EpochStart(ctx, stream, p)
	if err != nil {
		return false, fmt.Errorf("sync %s: read where the new owner of partition %d starts (nothing dropped): %w", stream, p, err)
	}
	switch {
	case !ok:
		u.cfg.Logger.Warn("uplink: the table does not record where the new owner's history of a fenced partition starts (a take-over by an older version); quarantining its records instead of re-admitting them",
			"stream", stream, "partition", p, "owner", o.Node, "owner_epoch", o.Epoch)
		return false, nil
	case o.Epoch != st.Epoch+1:
		u.cfg.Logger.Warn("uplink: a fenced partition changed owners more than once since this node's epoch, so the table's start is not that of the epoch after it; quarantining its records instead of re-admitting them",
			"stream", stream, "partition", p, "owner", o.Node, "owner_epoch", o.Epoch, "our_epoch", st.Epoch, "epoch_start", start)
		return false, nil
	}
	home, epoch, err := u.home.Own(ctx, stream)
	if err != nil {
		return false, fmt.Errorf("sync %s: own partition for the re-admission of fenced partition %d (nothing dropped): %w", stream, p, err)
	}
	if home == p {
		return false, nil
	}
	r := u.log.Apply(context.Background(), wal.Op{Kind: wal.OpReadmit, Readmit: &wal.Readmit{Stream: stream, From: p, Floor: o.Epoch, Start: start, To: home, Epoch: epoch}})
	res, err := r.Readmission, r.Err
	if errors.Is(err, wal.ErrFenced) {
		u.cfg.Logger.Warn("uplink: this node's own partition is sealed too; quarantining the fenced partition's records", "stream", stream, "partition", p, "own", home, "err", err)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sync %s: re-admit fenced partition %d into %d: %w", stream, p, home, err)
	}
	if res.Kept {
		u.keptFenced(stream, fe)
		return true, nil
	}
	u.fenced.Add(1)
	u.fencedRecords.Add(res.Dropped)
	u.readmitted.Add(res.Moved)
	u.cfg.Logger.Warn("uplink: partition fenced: another node owns it now; the records only this node held are re-admitted into its own partition with new offsets, the rest are the new owner's",
		"stream", stream, "partition", p, "owner", o.Node, "owner_epoch", o.Epoch, "our_epoch", st.Epoch, "epoch_start", start,
		"readmitted_records", res.Moved, "dropped_records", res.Dropped, "into_partition", home, "into_epoch", epoch,
		"first_offset", res.First, "next_offset", res.Next)
	return true, nil
}

// partition returns the WAL's state of one partition.
func (u *Uplink) partition(stream string, p int32) (wal.PartitionState, bool) {
	for _, st := range u.log.Partitions() {
		if st.Stream == stream && st.Partition == p {
			return st, true
		}
	}
	return wal.PartitionState{}, false
}

// syncOnce commits one batch per partition; cut reports a batch that
// ended at an epoch change before the WAL's end.
func (u *Uplink) syncOnce(ctx context.Context, stream string, parts []wal.PartitionState) (cut bool, err error) {
	marks, owners, err := u.cat.Marks(ctx, stream)
	if err != nil {
		u.commitFailures.Add(1)
		return false, fmt.Errorf("sync %s: %w", stream, err)
	}
	// The batches this pass reads go into readBuf, which the next pass
	// reuses (nothing of this pass's entries is used after it returns).
	u.readMu.Lock()
	readBuf, need := u.readBuf[:0], 0
	defer func() {
		if need > cap(u.readBuf) && need <= int(u.cfg.MaxBatchBytes) {
			u.readBuf = make([]byte, 0, need) // for the next pass
		}
		u.readMu.Unlock()
	}()
	var appends []tables.PartitionAppend
	batch := map[int32][]tributary.Entry{}
	dead := map[int32][]tables.DeadLetter{}
	pol := u.cfg.Payloads[stream]
	for _, p := range parts {
		mark := marks[p.Partition]
		if o, ok := owners[p.Partition]; ok && o.Epoch > p.Epoch {
			// Every record here is older than the table's owner: fenced,
			// whatever the mark (which may cover the new owner's records
			// at these very offsets).
			return false, &tables.FencedError{Stream: stream, Partition: p.Partition, Owner: o.Node, Epoch: o.Epoch, Have: p.Epoch, HighWater: mark}
		}
		if mark > p.Released {
			// Committed before (perhaps by a run that crashed before
			// releasing): release now — once the table's files show it.
			// A mark is a table property; without the rows it names, the
			// records stay (see invariant 5).
			to := min(mark, p.Next)
			if why, err := u.proven(ctx, stream, p.Partition, p.Released, to); err != nil {
				u.commitFailures.Add(1)
				return false, fmt.Errorf("sync %s: check the table holds offsets %d..%d of partition %d: %w", stream, p.Released, to, p.Partition, err)
			} else if why != "" {
				u.unproven.Add(1)
				u.cfg.Logger.Error("uplink: the table's mark covers offsets that no data file committed by this node under their epoch holds; keeping them in the WAL (the mark or the files were not written by this node's commit of these records: repair the table's tributary.hwm property, or find who wrote the files)",
					"stream", stream, "partition", p.Partition, "mark", mark, "released", p.Released, "wal_next", p.Next, "why", why)
				continue
			}
			if mark > p.Next {
				u.cfg.Logger.Warn("uplink: table is ahead of the WAL; moving the WAL forward",
					"stream", stream, "partition", p.Partition, "mark", mark, "wal_next", p.Next)
				if err := u.log.Apply(context.Background(), wal.Op{Kind: wal.OpEnsure, Stream: stream, Partition: p.Partition, Offset: mark}).Err; err != nil {
					return false, fmt.Errorf("sync %s: %w", stream, err)
				}
			}
			if err := u.release(stream, p.Partition, p.Released, to, nil); err != nil {
				return false, err
			}
		}
		if mark < p.Released {
			// The WAL released what the table does not have: only possible
			// if the table was rolled back or replaced. Never silently
			// skip: say so loudly and commit from what the WAL still has.
			u.cfg.Logger.Error("uplink: table mark is behind the WAL's released offset; offsets in between are missing from the table",
				"stream", stream, "partition", p.Partition, "mark", mark, "released", p.Released)
			continue
		}
		if mark >= p.Next {
			continue
		}
		maxBytes := u.cfg.MaxBatchBytes
		if pol.Typed() {
			// The batch's payloads are decoded in memory at once (several
			// times their size): smaller batches when catching up.
			maxBytes = min(maxBytes, MaxTypedBatchBytes)
		}
		if !pol.Typed() && u.pre == nil {
			// Raw streams: the stored entries, Kafka batches encoded in
			// place (no record objects).
			ents, rb, err := u.log.ReadEntriesInto(readBuf, stream, p.Partition, mark, 0, maxBytes)
			readBuf = rb
			if err != nil {
				return false, fmt.Errorf("sync %s: read wal: %w", stream, err)
			}
			for _, e := range ents {
				if e.Batch != nil {
					need += len(e.Batch.Records)
				}
			}
			if len(ents) == 0 || ents[0].First() != mark {
				return false, fmt.Errorf("sync %s: wal partition %d does not start at the table's mark %d", stream, p.Partition, mark)
			}
			for i := 1; i < len(ents); i++ {
				if ents[i].Epoch() != ents[0].Epoch() {
					ents, cut = ents[:i], true
					break
				}
			}
			files, err := u.uploadEntries(ctx, stream, ents)
			if err != nil {
				return false, err
			}
			last := ents[len(ents)-1]
			appends = append(appends, tables.PartitionAppend{
				Partition: p.Partition, From: mark, To: last.First() + int64(last.Len()), Epoch: ents[0].Epoch(), Files: files,
			})
			batch[p.Partition] = ents
			continue
		}
		recs, err := u.log.Read(stream, p.Partition, mark, 0, maxBytes)
		if err != nil {
			return false, fmt.Errorf("sync %s: read wal: %w", stream, err)
		}
		if len(recs) == 0 || recs[0].Offset != mark {
			return false, fmt.Errorf("sync %s: wal partition %d does not start at the table's mark %d", stream, p.Partition, mark)
		}
		// One epoch per append: cut where the ownership epoch changes.
		for i := 1; i < len(recs); i++ {
			if recs[i].Epoch != recs[0].Epoch {
				recs, cut = recs[:i], true
				break
			}
		}
		var sh *tables.Shaped
		if pol.Typed() {
			if sh, err = u.cat.Shape(ctx, stream, pol, recs); err != nil {
				u.commitFailures.Add(1)
				return false, fmt.Errorf("sync %s: %w", stream, err)
			}
			u.count(u.added, u.metrics.added, stream, int64(sh.Added))
			if sh.EvolveError != "" {
				u.cfg.Logger.Error("uplink: the table refused a schema or spec change a typed batch needed; payloads that need a refused column go to the dead-letter table",
					"stream", stream, "partition", p.Partition, "err", sh.EvolveError)
			}
			dead[p.Partition] = sh.DeadLetters(recs)
		}
		var pr *pre
		if u.pre != nil {
			pr = u.pre.take(stream, p.Partition)
		}
		files, err := u.upload(ctx, stream, recs, sh, pr)
		if err != nil {
			return false, err
		}
		appends = append(appends, tables.PartitionAppend{
			Partition: p.Partition, From: mark, To: recs[len(recs)-1].Offset + 1, Epoch: recs[0].Epoch, Files: files,
		})
		batch[p.Partition] = entriesOf(recs)
	}
	if len(appends) == 0 {
		return false, nil
	}
	// Dead letters first, by their table's own mark: a crash before the
	// append below redoes the batch, and the mark skips what is in.
	for _, a := range appends {
		if dls := dead[a.Partition]; len(dls) > 0 {
			if _, err := u.cat.CommitDeadLetters(ctx, stream, a.Partition, a.To, tables.OriginOf(u.cfg.Node, a.Epoch), dls); err != nil {
				u.commitFailures.Add(1)
				return false, fmt.Errorf("sync %s: %w", stream, err)
			}
		}
	}
	commitStart := time.Now()
	res, err := u.cat.CommitAppend(ctx, stream, appends, map[string]string{"tributary.node": u.cfg.Node})
	u.metrics.commit.WithLabelValues(stream).Observe(time.Since(commitStart).Seconds())
	if err != nil {
		u.commitFailures.Add(1)
		return false, fmt.Errorf("sync %s: %w", stream, err)
	}
	u.commits.Add(1)
	for _, a := range appends {
		if err := u.release(stream, a.Partition, a.From, a.To, batch[a.Partition]); err != nil {
			return false, err
		}
		for _, p := range res.Committed {
			if p == a.Partition {
				u.records.Add(a.To - a.From)
				if n := int64(len(dead[a.Partition])); n > 0 {
					u.count(u.dlq, u.metrics.dlq, stream, n)
					u.noteDeadLetters(stream, dead[a.Partition], time.Now())
				}
				u.metrics.committed(stream, batch[a.Partition], time.Now())
			}
		}
	}
	u.mu.Lock()
	u.stats.LastCommit = time.Now()
	u.mu.Unlock()
	u.syncDelta(ctx, stream, appends)
	for _, a := range appends {
		if len(dead[a.Partition]) > 0 {
			u.syncDelta(ctx, tables.DLQStream(stream), nil) // its Delta log by its own marks
			break
		}
	}
	return cut, nil
}

// proven checks the proof of invariant 5 for the WAL records [from, to)
// of a partition: every data file of the table's current snapshot holding
// any of these offsets was committed by this node (its name's Origin,
// tables.FileOrigin), and every record is in such a file committed under
// the epoch the WAL holds it at. It returns "" when proven, else what is
// missing. Files of another node at these offsets, or a previous owner's,
// prove nothing: they are not these records.
func (u *Uplink) proven(ctx context.Context, stream string, p int32, from, to int64) (string, error) {
	files, err := u.cat.Committed(ctx, stream, p, from, to)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if !f.Origin.By(u.cfg.Node) {
			return fmt.Sprintf("offsets %d-%d are in %s, not committed by this node (origin %q)", f.First, f.Last, f.Path, f.Origin), nil
		}
	}
	i := 0
	for off := from; off < to; {
		recs, err := u.log.Read(stream, p, off, int(min(to-off, 1<<20)), quarantineChunk)
		if err != nil {
			return "", fmt.Errorf("read wal: %w", err)
		}
		if len(recs) == 0 {
			return fmt.Sprintf("the WAL holds no record at offset %d", off), nil
		}
		for _, r := range recs {
			if r.Offset >= to {
				break
			}
			for i < len(files) && files[i].Last < r.Offset {
				i++
			}
			if i == len(files) || files[i].First > r.Offset {
				return fmt.Sprintf("offset %d is in no data file", r.Offset), nil
			}
			if want := tables.OriginOf(u.cfg.Node, r.Epoch); files[i].Origin != want {
				return fmt.Sprintf("offset %d (epoch %d here) is in %s, committed under epoch %d", r.Offset, r.Epoch, files[i].Path, files[i].Origin.Epoch()), nil
			}
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return "", nil
}

// count adds n to a per-stream counter and its metric.
func (u *Uplink) count(m map[string]int64, c *prometheus.CounterVec, stream string, n int64) {
	if n == 0 {
		return
	}
	u.mu.Lock()
	m[stream] += n
	u.mu.Unlock()
	c.WithLabelValues(stream).Add(float64(n))
}

// release releases [from, to) of a partition after the listeners have seen
// its records (ents, or read from the WAL when nil).
func (u *Uplink) release(stream string, partition int32, from, to int64, ents []tributary.Entry) error {
	if len(u.releaseLs) > 0 && to > from {
		if ents == nil {
			var err error
			ents, _, err = u.log.ReadEntriesInto(nil, stream, partition, from, int(to-from), 0)
			if err != nil {
				return fmt.Errorf("sync %s: read wal: %w", stream, err)
			}
		}
		ents = trimEntries(ents, to)
		var recs []*tributary.Record // decoded for the first listener that needs them
		for _, l := range u.releaseLs {
			var err error
			if el, ok := l.(EntryReleaseListener); ok {
				err = el.ReleasingEntries(stream, partition, ents)
			} else {
				if recs == nil {
					if recs, err = wal.Records(ents); err != nil {
						return fmt.Errorf("sync %s: read wal: %w", stream, err)
					}
				}
				err = l.Releasing(stream, partition, recs)
			}
			if err != nil {
				return fmt.Errorf("sync %s: before release: %w", stream, err)
			}
		}
	}
	if err := u.log.Apply(context.Background(), wal.Op{Kind: wal.OpRelease, Stream: stream, Partition: partition, Offset: to}).Err; err != nil {
		return fmt.Errorf("sync %s: release: %w", stream, err)
	}
	return nil
}

// entriesOf wraps records as entries.
func entriesOf(recs []*tributary.Record) []tributary.Entry {
	es := make([]tributary.Entry, len(recs))
	for i, r := range recs {
		es[i] = tributary.Entry{Record: r}
	}
	return es
}

// trimEntries returns ents without their records from offset to on.
func trimEntries(ents []tributary.Entry, to int64) []tributary.Entry {
	for i, e := range ents {
		switch {
		case e.First() >= to:
			return ents[:i]
		case e.Batch != nil && e.First()+int64(e.Len()) > to:
			out := append(ents[:i:i], tributary.Entry{Batch: e.Batch.Trim(to)})
			return out
		}
	}
	return ents
}

// uploadEntries is upload for a raw stream's entries: Kafka batches are
// encoded in place (tables.WriteParquetEntries), one file per partition
// bucket, named and written as upload does.
func (u *Uplink) uploadEntries(ctx context.Context, stream string, ents []tributary.Entry) ([]tables.FileMeta, error) {
	g, err := u.cat.Granularity(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", stream, err)
	}
	u.bufMu.Lock()
	defer u.bufMu.Unlock()
	var files []tables.FileMeta
	for _, run := range tables.CutEntryRuns(g, ents) {
		if hint := parquetSizeHint(run); cap(u.fileBuf) < hint {
			u.fileBuf = make([]byte, 0, hint)
		}
		buf := bytes.NewBuffer(u.fileBuf[:0])
		st, err := u.cfg.Parquet.WriteParquetEntries(buf, run)
		if err != nil {
			return nil, fmt.Errorf("sync %s: %w", stream, err)
		}
		if cap(buf.Bytes()) <= int(u.cfg.MaxBatchBytes)+64<<10 {
			u.fileBuf = buf.Bytes()[:0] // grown, if the hint was short
		}
		f, err := u.put(ctx, stream, buf.Bytes(), st, ents[0].Epoch())
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// parquetSizeHint is the capacity a run's file buffer starts with, so
// that a file of incompressible payloads is not copied as the buffer
// doubles: the batch bytes, and a little for the other columns.
func parquetSizeHint(run []tributary.Entry) int {
	n := 0
	for _, e := range run {
		if e.Batch != nil {
			n += len(e.Batch.Records) * e.Batch.Count / max(int(int32(binary.BigEndian.Uint32(e.Batch.Records[57:]))), 1)
		} else {
			n += len(e.Record.Value) + 64
		}
	}
	return n + n/16 + 64<<10
}

// put writes one data file to the bucket, named by tables.DataFileURL
// with this node and epoch as its origin.
func (u *Uplink) put(ctx context.Context, stream string, data []byte, st tables.FileStats, epoch int64) (tables.FileMeta, error) {
	url := tables.DataFileURL(u.cat.TableLocation(stream), st, tables.OriginOf(u.cfg.Node, epoch))
	key, err := u.cat.KeyOf(url)
	if err != nil {
		return tables.FileMeta{}, fmt.Errorf("sync %s: %w", stream, err)
	}
	writeStart := time.Now()
	if err := u.bucket.WriteAll(ctx, key, data); err != nil {
		u.uploadFailures.Add(1)
		return tables.FileMeta{}, fmt.Errorf("sync %s: upload %s: %w", stream, key, err)
	}
	u.metrics.upload.Observe(time.Since(writeStart).Seconds())
	u.files.Add(1)
	u.bytesUp.Add(int64(len(data)))
	return tables.FileMeta{URL: url, Size: int64(len(data)), Stats: st}, nil
}

// upload encodes recs as one Parquet file per partition bucket (day or
// hour, the table's granularity: tables.CutRuns) and writes the files to
// the bucket, named by tables.DataFileURL with this node and the records'
// epoch as their origin (recs are of one epoch). The first file is pr's
// in-progress file completed, if pr holds a prefix of it (pre.finish).
func (u *Uplink) upload(ctx context.Context, stream string, recs []*tributary.Record, sh *tables.Shaped, pr *pre) ([]tables.FileMeta, error) {
	g, err := u.cat.Granularity(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("sync %s: %w", stream, err)
	}
	used := false
	if pr != nil {
		defer func() {
			outcome := "discarded"
			if used {
				outcome = "used"
			}
			u.metrics.pre.WithLabelValues(outcome).Inc()
		}()
	}
	var files []tables.FileMeta
	runs := tables.CutRuns(g, recs)
	if sh != nil {
		runs = sh.CutRuns(g, recs) // by event time, if the table is partitioned by it
	}
	for i, run := range runs {
		var buf bytes.Buffer
		var st tables.FileStats
		if i == 0 && pr != nil {
			// A file that fails to complete is encoded anew below.
			if data, fst, ok, ferr := pr.finish(run, sh); ferr == nil && ok {
				buf, st, used = *bytes.NewBuffer(data), fst, true
			}
		}
		switch {
		case used && i == 0:
		case sh != nil:
			st, err = u.cfg.Parquet.WriteParquetShaped(&buf, run, sh)
		default:
			st, err = u.cfg.Parquet.WriteParquet(&buf, run)
		}
		if err != nil {
			return nil, fmt.Errorf("sync %s: %w", stream, err)
		}
		f, err := u.put(ctx, stream, buf.Bytes(), st, recs[0].Epoch)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}
