// Package wal is the edge node's durable write-ahead log: every accepted
// MQTT or Kafka message is appended here, fsynced, and only then
// acknowledged; the uplink later reads consecutive ranges, uploads them and
// releases them.
//
// # Invariants
//
//  1. Durable before acknowledged. Append returns nil (AppendAsync calls done
//     with nil) only after the group holding the records is durable: its
//     journal record written and fdatasynced (an append-only group, see
//     Journal), or the bbolt transaction holding it committed and fsynced
//     (a group that also releases, drops, seals or readmits). On any
//     error none of the call's records was written.
//  2. Dense offsets. Per (Stream, Partition) offsets are assigned 0, 1, 2, …
//     in commit order and, within one call, in slice order; an offset is
//     never skipped and never reused, across Close/Open and crashes. The
//     only jumps are EnsurePartition, which moves an empty-or-behind
//     partition forward to the table's high-water mark, and the creation of
//     a partition by AppendAt at its first record's offset. AppendAt, which
//     stores offsets assigned elsewhere, keeps density too: it stores a
//     record only at the partition's next offset, skips those below it and
//     refuses a gap (GapError).
//  3. Contiguous content. For every partition, exactly the records with
//     offsets in [Released, Next) are readable. Release moves Released
//     forward; DropPartition forgets the whole partition (a node fenced out
//     of it); ReadmitPartition moves a fenced partition's records that only
//     this node holds into one it owns (new offsets) and drops the rest, in
//     one transaction, and seals it: later appends of an older epoch are
//     refused (ErrFenced, readmit.go); nothing else removes records.
//     (Records below Released may remain in a partly released chunk; they
//     are never returned.)
//  4. Atomic metadata. Each partition's Next, Released, byte count and
//     highest epoch are stored in the same bbolt transaction as the records
//     they describe, so after kill -9 the metadata always matches the data.
//  5. Bounded disk. The logical (encoded) size of all unreleased records never
//     exceeds Options.MaxBytes; an append that would exceed it is refused
//     whole with ErrBudgetExceeded, which is back-pressure, never a drop.
//
// # Outline
//
// All writes go through one committer goroutine. Append, AppendAsync,
// AppendAt, AppendAtAsync, Release, EnsurePartition and DropPartition(Below)
// enqueue an op and wake the committer. The
// committer takes everything queued, applies it in queue order inside one
// bbolt read-write transaction and commits it with one fsync (group commit);
// while that commit is in flight, newly arriving ops queue up and all go into
// the next one. Releases taken with appends are committed in a transaction
// of their own right after the appends' (see deferReleases), so deleting
// released chunks never lengthens the commit acknowledgements wait for. A
// lone append is committed at once. Under load groups grow by themselves,
// because each fsync takes long enough for many appends to arrive, and the
// committer learns its closed-loop writers (group.go): it holds the next
// group, at most one mean commit and 2 ms, until the writers just
// acknowledged are back, so they do not split into half groups taking
// turns.
//
// Inside the group, each append op is encoded with its tentative offsets,
// checked against the budget and only then added to its partitions' pending
// records; a refused op leaves no trace, the others in the group are
// unaffected. A partition's pending records are written as chunks (see
// Layout) when the group ends, when they reach the chunk caps, and before a
// release or EnsurePartition of that partition in the same group. If the transaction itself
// fails, every op of the group fails and the in-memory state is left as it
// was. The in-memory partition table is changed only by the committer, after
// a successful commit, so readers (Partitions, Stats) see committed state.
//
// Reads use bbolt read transactions and never wait for the committer.
//
// # Journal
//
// A group that only appends (records, Kafka batches, verbatim chunks of
// the partition's incarnation) is not committed to bbolt on the
// acknowledgement path: its writes to bbolt (chunk values, meta entries,
// tags, bucket creations) are encoded into ONE journal record, written
// with one write and made durable with one fdatasync (journal.go for the
// format); the acknowledgements follow. The applier (apply.go) then puts
// the journaled groups into bbolt, many groups to one transaction with
// bbolt's own fsyncs, applyEvery after its last commit or sooner when
// applyBytes wait or a group needs bbolt. Its invariants:
//
//   - J1. Sequence. Journal records are numbered 1, 2, 3, … without gaps;
//     the meta bucket's "\x00jseq" holds the number of the last record
//     whose writes bbolt holds, put in the same transaction as they are.
//   - J2. Replay. Open applies, in one transaction, the journal's records
//     numbered above jseq, in order, up to the first that is torn (its
//     checksum fails, it is cut short) or does not continue the numbers
//     (an older use of a reused segment). A record is acknowledged only
//     once synced, so what such a tail loses was never acknowledged; and
//     a crash between the journal's sync and bbolt's commit loses nothing.
//   - J3. Readers see what is acknowledged. Before a journaled group's
//     outcomes are reported (and Notify fires), its chunks and its
//     partitions' states are in the pending index, and they leave it only
//     after bbolt's commit holding them returned. A read takes the
//     partition's pending chunks first and then begins its bbolt read
//     transaction, and continues after bbolt's chunks (whose end is its
//     transaction's meta Next) with the pending ones from there: so
//     Read, ReadEntries and ReadChunks (the uplink, replica catch-up,
//     Kafka fetch) return a record as soon as it is acknowledged, and
//     Partition's Next is always readable.
//   - J4. bbolt is never ahead of the journal, and never read stale by the
//     committer: a group that reads or deletes in bbolt (Release,
//     EnsurePartition, DropPartition, SealPartition, ReadmitPartition, a
//     verbatim append of a new incarnation, which may truncate) first
//     waits until bbolt holds every journaled group (drainApplier), then
//     commits in its own bbolt transaction, synced, as before the
//     journal; it does not touch jseq.
//   - J5. A failed journal write or sync, or a failed commit of the applier,
//     breaks the WAL (ErrBroken): the journal's tail is unknown, so
//     nothing is appended after it until the WAL is reopened and the
//     journal replayed.
//   - J6. Segments. A segment whose records bbolt holds is reused (renamed to
//     the next first number and overwritten from its start, so the sync
//     rarely has to write file metadata) or deleted beyond freeSegments;
//     Close keeps the current one (Open replays what bbolt lacks).
//   - J7. Bounded memory. At most maxPending journaled bytes wait for bbolt;
//     beyond them the committer waits for the applier.
//
// # Layout
//
// A bucket per partition ("d" + partition key) holds chunks. A chunk is one
// bbolt value holding consecutive records of the partition appended in one
// group commit (from any number of Append calls), keyed by the 8-byte
// big-endian offset of its first record; a group's records are split into
// chunks of at most 1024 records and 32 KiB (a larger record gets a chunk of
// its own). A chunk is versioned and ends with a CRC32C over all of it, so a
// torn or corrupt chunk is reported as ErrCorrupt, never misread: see
// chunkV1 for the byte layout. A Kafka record batch (AppendBatchAsyncAfter)
// is one entry covering its records' offsets, in a chunk of version 2
// (batch.go); Read decodes it into its records and may start inside it. The "meta" bucket maps the partition key
// (uvarint stream length, stream, big-endian partition) to 32 bytes: next,
// released, unreleased bytes, highest epoch (24-byte entries of older
// versions read as epoch 0); its key "\x00format" holds the on-disk format
// version (2; format 1, one key per record, is refused with an error).
//
// Read seeks to the chunk holding its start offset (the greatest key not
// above it) and decodes records across chunks, skipping those below the
// start and below Released. Release deletes the chunks whose records all lie
// below upTo; a chunk that straddles upTo stays until a later release passes
// its end, and its records below Released are invisible. So invariant 3
// holds logically: the readable records are exactly [Released, Next), while
// the file may hold up to one partly released chunk per partition. The byte
// count (invariant 5) stays exact in logical bytes: the bytes a release frees
// are the sizes of exactly the records it releases, taken from the chunk
// headers' record lengths.
package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/tributary-io/tributary"
)

// ErrInvalid is returned for arguments the WAL cannot store, such as an
// empty stream name or a nil record.
var ErrInvalid = errors.New("wal: invalid argument")

// ErrLocked is Open's error when another process (or another open in
// this one) holds the WAL file: bbolt's file lock was not released within
// the open timeout.
var ErrLocked = errors.New("wal: another process holds the WAL")

// maxStreamLen bounds stream names so that bucket names stay small.
const maxStreamLen = 1024

// The file and its memory map are sized so that a commit rarely has to
// grow either (see Open):
//
//   - bbolt remaps when the data outgrows the map, and a remap waits for
//     every read transaction (the uplink's reads, which decode up to a
//     batch of records inside one) while holding the writer. The map is
//     sized from the budget — twice MaxBytes, between minMmapSize and
//     maxMmapSize, and maxMmapSize without a budget — so that within the
//     budget it practically never happens. A map is address space, not
//     memory: pages the file does not use are never touched.
//   - bbolt grows the file by truncating it and fsyncing the whole file
//     (metadata included) inside the commit that needs the room. The file
//     is pre-sized to presize when it is opened and then grows allocSize at
//     a time (bbolt's default is 16 MiB), so such a commit is rare.
const (
	minMmapSize = 128 << 20
	maxMmapSize = 4 << 30
	presize     = 64 << 20
	allocSize   = 128 << 20
)

// mmapSize is the initial memory map for a budget of maxBytes (0 = none).
func mmapSize(maxBytes int64) int {
	if maxBytes <= 0 {
		return maxMmapSize
	}
	return int(min(max(2*maxBytes, minMmapSize), maxMmapSize))
}

// presizeFile extends a WAL file shorter than presize (a new one: bbolt
// has just written its first pages) to presize and fsyncs it, so that the
// first commits need no grow of their own. The extension is a hole: it
// takes no disk space until bbolt writes pages there.
func presizeFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() >= presize {
		return nil
	}
	if err := f.Truncate(presize); err != nil {
		return err
	}
	return f.Sync()
}

// Options configure Open.
type Options struct {
	Path     string       // bbolt file path (parent dir created)
	MaxBytes int64        // disk budget: logical bytes of unreleased records; 0 = unlimited
	NoSync   bool         // tests/benchmarks only: skip fsync
	Logger   *slog.Logger // nil = slog.Default()
	// TestTapDelay, tests only: how long the committer waits after handing
	// a group to the Tap before committing it, to widen the window between
	// a replica receiving records and the owner fsyncing them.
	TestTapDelay time.Duration

	fs        fileLayer // tests: the journal's file layer (nil: the OS's)
	testPause bool      // tests: journaled groups never reach bbolt
}

// PartitionState describes one (stream, partition) of the WAL.
type PartitionState struct {
	Stream          string
	Partition       int32
	Released        int64 // first unreleased offset (all < Released are gone)
	Next            int64 // next offset to assign
	Bytes           int64 // logical bytes unreleased
	OldestTimestamp int64 // unix micros of oldest unreleased record, 0 if none
	// Epoch is the highest tributary.Record.Epoch ever appended to the partition; it
	// survives Release (not DropPartition), so a node restarting without
	// its catalog still knows the ownership epoch it last wrote at.
	Epoch int64
	// Start is Next when the WAL's incarnation began (see Incarnation):
	// everything below it was durable before; 0 for a partition created
	// since.
	Start int64
	// Tag is the incarnation of the origin whose verbatim appends
	// (AppendVerbatimAsync) the partition last stored; 0 if none.
	Tag int64
	// Floor is the partition's seal (OpSeal, OpReadmit): appends of
	// records below this epoch are refused; 0 if none. Partition reports
	// it also for a partition it does not know (dropped, still sealed).
	Floor int64
}

// Stats are counters and gauges of a WAL.
type Stats struct {
	Records    int64 // unreleased records
	Bytes      int64 // logical bytes of unreleased records
	MaxBytes   int64 // budget, 0 = unlimited
	Partitions int

	Commits          int64 // committed bbolt transactions
	Fsyncs           int64 // commits that were fsynced (bbolt syncs twice per commit)
	Ops              int64 // ops (Append calls, releases, …) committed or refused by the committer
	AppendedRecords  int64 // records made durable since Open
	BudgetRejections int64 // Append calls refused with ErrBudgetExceeded
	CommitErrors     int64 // failed transactions

	LastCommitDuration time.Duration
	LastCommitOps      int // ops in the last committed group
	MaxCommitOps       int // largest group since Open

	Incarnation int64 // the WAL's incarnation (>= 1, see verbatim.go)
	// Broken is the error every write fails with since a replicated
	// group or the journal failed (wrapping ErrBroken), or nil: a broken
	// WAL takes writes again only once reopened.
	Broken error
}

type pkey struct {
	stream    string
	partition int32
}

type partState struct {
	next, released, bytes, oldest int64
	epoch                         int64 // highest tributary.Record.Epoch ever appended
	start                         int64 // next when the incarnation began
	tag                           int64 // origin incarnation of verbatim appends
}

// WAL is a durable write-ahead log. Its methods are safe for concurrent use.
type WAL struct {
	db     *bolt.DB
	opts   Options
	log    *slog.Logger
	wake   chan struct{}
	notify chan struct{}
	done   chan struct{} // closed when the committer exits

	mu     sync.Mutex
	closed bool
	queue  []*op
	parts  map[pkey]*partState // committed state; written by the committer under mu
	floors map[pkey]int64      // seals (readmit.go); written by the committer under mu
	bytes  int64
	recs   int64
	stats  Stats

	metrics *metrics // histograms (metrics.go)

	arena   []byte  // committer only: records encoded in the current group
	chunks  []byte  // committer only: chunks written in the current group
	grouper grouper // committer only (group.go)

	tapState   // verbatim.go
	applyState // apply.go
}

var metaBucket = []byte("meta")

// Open opens or creates the WAL at opts.Path and recovers its state.
func Open(opts Options) (*WAL, error) {
	if opts.Path == "" {
		return nil, fmt.Errorf("open: %w: empty path", ErrInvalid)
	}
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("open: %w: negative MaxBytes", ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	db, err := bolt.Open(opts.Path, 0o600, &bolt.Options{
		Timeout:         5 * time.Second,
		NoSync:          opts.NoSync,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: mmapSize(opts.MaxBytes),
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: %w (its lock was not released within 5s)", opts.Path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	db.AllocSize = allocSize
	if !opts.NoSync {
		if err := presizeFile(opts.Path); err != nil {
			db.Close()
			return nil, fmt.Errorf("open %s: presize: %w", opts.Path, err)
		}
	}
	w := &WAL{
		db:     db,
		opts:   opts,
		log:    log,
		wake:   make(chan struct{}, 1),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		parts:  make(map[pkey]*partState),
		floors: make(map[pkey]int64),

		metrics: newMetrics(),
	}
	w.acond = sync.NewCond(&w.amu)
	w.akick = make(chan struct{}, 1)
	w.adone = make(chan struct{})
	w.pending = make(map[pkey]*pendPart)
	w.apaused = opts.testPause
	seq, err := w.replayJournal()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	w.jseq, w.applied = seq, seq
	if err := w.recover(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	fs := opts.fs
	if fs == nil {
		fs = osLayer{}
	}
	if opts.NoSync {
		fs = noSyncLayer{fs}
	}
	if w.journal, err = openJournal(fs, opts.Path, seq+1); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", opts.Path, err)
	}
	go w.applier()
	w.stats.MaxBytes = opts.MaxBytes
	log.Debug("wal opened", "path", opts.Path, "partitions", len(w.parts), "records", w.recs, "bytes", w.bytes)
	go w.committer()
	return w, nil
}

// recover loads the partition table from the meta bucket and checks it
// against the data buckets.
func (w *WAL) recover() error {
	return w.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if err := checkFormat(meta); err != nil {
			return err
		}
		err = meta.ForEach(func(k, v []byte) error {
			if len(k) > 0 && k[0] == 0 { // formatKey, incarnationKey
				return nil
			}
			pk, ok := decodePKey(k)
			ms, ok2 := decodeMeta(v)
			if !ok || !ok2 {
				return fmt.Errorf("%w: meta entry %x", ErrCorrupt, k)
			}
			st := &ms
			if st.released > st.next || st.released < 0 || st.bytes < 0 {
				return fmt.Errorf("%w: partition %s/%d: released %d, next %d, bytes %d",
					ErrCorrupt, pk.stream, pk.partition, st.released, st.next, st.bytes)
			}
			b := tx.Bucket(dataName(k))
			if b == nil {
				return fmt.Errorf("%w: partition %s/%d: no data bucket", ErrCorrupt, pk.stream, pk.partition)
			}
			if st.oldest, err = checkChunks(b, st); err != nil {
				return fmt.Errorf("partition %s/%d: %w", pk.stream, pk.partition, err)
			}
			w.parts[pk] = st
			w.bytes += st.bytes
			w.recs += st.next - st.released
			return nil
		})
		if err != nil {
			return err
		}
		if err := w.loadFloors(tx); err != nil {
			return err
		}
		return w.bumpIncarnation(tx)
	})
}

// formatKey holds the on-disk format version in the meta bucket; it cannot
// be a partition key, which never starts with a zero byte (streams are not
// empty).
var formatKey = []byte("\x00format")

// formatChunked is the on-disk format: records in chunks. Format 1 (one
// bbolt key per record, no formatKey) is not read.
const formatChunked = 2

// checkFormat checks the format version of an existing WAL and records it
// in a new one.
func checkFormat(meta *bolt.Bucket) error {
	v := meta.Get(formatKey)
	if v == nil {
		if k, _ := meta.Cursor().First(); k != nil {
			return fmt.Errorf("on-disk format changed: this WAL was written in format 1 (one key per record) and this version reads only format %d (chunks); drain it with the previous version or remove it", formatChunked)
		}
		return meta.Put(formatKey, []byte{formatChunked})
	}
	if len(v) != 1 || v[0] != formatChunked {
		return fmt.Errorf("on-disk format %x not supported: this version reads only format %d", v, formatChunked)
	}
	return nil
}

// checkChunks checks that the chunks of a partition's bucket cover exactly
// [released, next) at both ends and returns the oldest record's timestamp.
func checkChunks(b *bolt.Bucket, st *partState) (int64, error) {
	c := b.Cursor()
	fk, fv := c.First()
	if st.released == st.next {
		if fk != nil {
			return 0, fmt.Errorf("%w: records in an empty partition", ErrCorrupt)
		}
		return 0, nil
	}
	if fk == nil {
		return 0, fmt.Errorf("%w: no records, want [%d, %d)", ErrCorrupt, st.released, st.next)
	}
	first, err := decodeChunkAt(fk, fv)
	if err != nil {
		return 0, err
	}
	last := first
	if lk, lv := c.Last(); string(lk) != string(fk) {
		if last, err = decodeChunkAt(lk, lv); err != nil {
			return 0, err
		}
	}
	if first.first > st.released || first.end() <= st.released || last.end() != st.next {
		return 0, fmt.Errorf("%w: chunks span [%d, %d), want [%d, %d)", ErrCorrupt, first.first, last.end(), st.released, st.next)
	}
	return first.timestampAt(st.released - first.first)
}

// Close waits for queued and in-flight operations to finish, then closes the
// file. Later calls of Close, Append, AppendAsync, Read, Release and
// EnsurePartition return (or report) ErrClosed; Partitions and Stats keep
// returning the last state.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	w.mu.Unlock()
	w.signal()
	<-w.done
	w.stopApplier(false)
	jerr := w.journal.close()
	if err := w.db.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if jerr != nil {
		return fmt.Errorf("close: %w", jerr)
	}
	return nil
}

// crash stops the WAL as kill -9 would, as far as bbolt is concerned
// (tests): queued ops are still taken, but no journaled group reaches
// bbolt any more.
func (w *WAL) crash() {
	w.amu.Lock()
	w.acrashed = true
	w.amu.Unlock()
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
	<-w.done
	w.stopApplier(true)
	w.journal.close()
	w.db.Close()
}

// Notify returns a channel that receives a value (non-blocking send, buffer
// of one) after each commit that added records.
func (w *WAL) Notify() <-chan struct{} { return w.notify }

// Stats returns a snapshot of the WAL's counters.
func (w *WAL) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stats
	s.Records = w.recs
	s.Bytes = w.bytes
	s.Partitions = len(w.parts)
	s.Incarnation = w.inc
	s.Broken = w.broken
	return s
}

// Partitions lists every known (stream, partition), sorted by stream and
// partition.
func (w *WAL) Partitions() []PartitionState {
	w.mu.Lock()
	out := make([]PartitionState, 0, len(w.parts))
	for pk, st := range w.parts {
		ps := st.state(pk)
		ps.Floor = w.floors[pk]
		out = append(out, ps)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Stream != out[j].Stream {
			return out[i].Stream < out[j].Stream
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// Partition returns the committed state of one (stream, partition); ok is
// false for an unknown (or dropped) partition.
func (w *WAL) Partition(stream string, partition int32) (st PartitionState, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pk := pkey{stream, partition}
	ps, ok := w.parts[pk]
	if !ok {
		if f, sealed := w.floors[pk]; sealed {
			return PartitionState{Stream: stream, Partition: partition, Floor: f}, false
		}
		return PartitionState{}, false
	}
	st = ps.state(pk)
	st.Floor = w.floors[pk]
	return st, true
}

func (st *partState) state(pk pkey) PartitionState {
	return PartitionState{Stream: pk.stream, Partition: pk.partition, Released: st.released, Next: st.next,
		Bytes: st.bytes, OldestTimestamp: st.oldest, Epoch: st.epoch, Start: st.start, Tag: st.tag}
}

// Read returns the records of (stream, partition) with offsets >= from, in
// offset order: at most maxRecords (<= 0: no limit), stopping before the
// encoded size would exceed maxBytes (<= 0: no limit), but at least one
// record if there is any. Released records are gone, so a read from below
// Released starts at Released. An unknown partition reads as empty.
func (w *WAL) Read(stream string, partition int32, from int64, maxRecords int, maxBytes int64) ([]*tributary.Record, error) {
	var out []*tributary.Record
	err := w.view("read", stream, partition, from, func(tx *bolt.Tx, pp *pendPart) error {
		var err error
		out, err = readTx(tx, pp, pkey{stream, partition}, from, maxRecords, maxBytes)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// view runs a read of (stream, partition) from offset from in a read
// transaction, with the partition's journaled chunks bbolt does not hold
// yet (taken before the transaction begins, see pendingOf): ErrClosed
// once the WAL is closed, any other error wrapped with what was read.
func (w *WAL) view(what, stream string, partition int32, from int64, fn func(*bolt.Tx, *pendPart) error) error {
	if w.isClosed() {
		return ErrClosed
	}
	pp := w.pendingOf(pkey{stream, partition})
	err := w.db.View(func(tx *bolt.Tx) error { return fn(tx, pp) })
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	if err != nil {
		return fmt.Errorf("%s %s/%d from %d: %w", what, stream, partition, from, err)
	}
	return nil
}

// readTx is Read inside a read transaction.
func readTx(tx *bolt.Tx, pp *pendPart, pk pkey, from int64, maxRecords int, maxBytes int64) ([]*tributary.Record, error) {
	var out []*tributary.Record
	err := scanTx(tx, pp, pk, from, maxRecords, maxBytes, func(rb []byte, e *batchEntry, pos int64, skip, n int) error {
		if e != nil {
			rs, err := e.records(skip, n)
			if err != nil {
				return fmt.Errorf("offset %d: %w", pos, err)
			}
			out = append(out, rs...)
			return nil
		}
		r, err := DecodeRecord(rb)
		if err != nil {
			return fmt.Errorf("offset %d: %w", pos, err)
		}
		if r.Offset != pos {
			return fmt.Errorf("%w: record at offset %d says offset %d", ErrCorrupt, pos, r.Offset)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// scanTx walks the entries of a partition inside a read transaction, as
// Read returns records: from from (or Released, if higher), at most
// maxRecords records (<= 0: no limit), stopping before the entries' size
// would exceed maxBytes (<= 0: no limit) but with at least one. For each
// entry it calls visit with its bytes (aliasing the transaction's pages),
// its decoded header if it is a batch entry (checked to cover the
// chunk's offsets), the offset pos of the first record to take, its index
// skip in the entry and the number n of records to take (a record entry:
// 0 and 1).
func scanTx(tx *bolt.Tx, pp *pendPart, pk pkey, from int64, maxRecords int, maxBytes int64, visit func(rb []byte, e *batchEntry, pos int64, skip, n int) error) error {
	c, next, released, err := partCursor(tx, pp, pk)
	if c == nil || err != nil {
		return err
	}
	from = max(from, released)
	if from >= next {
		return nil
	}
	return scanChunks(c, from, next, maxRecords, maxBytes, visit)
}

// partCursor returns a cursor over pk's chunks in tx and pp (nil if
// neither knows pk) and the partition's next and released offsets.
func partCursor(tx *bolt.Tx, pp *pendPart, pk pkey) (c *chunkCursor, next, released int64, err error) {
	key := encodePKey(pk)
	mv := tx.Bucket(metaBucket).Get(key)
	if mv == nil && pp == nil {
		return nil, 0, 0, nil
	}
	c = &chunkCursor{bnext: math.MinInt64, i: -1}
	if mv != nil {
		ms, ok := decodeMeta(mv)
		if !ok {
			return nil, 0, 0, fmt.Errorf("%w: meta entry %x", ErrCorrupt, key)
		}
		next, released = ms.next, ms.released
		b := tx.Bucket(dataName(key))
		if b == nil {
			return nil, 0, 0, fmt.Errorf("%w: no data bucket", ErrCorrupt)
		}
		c.c, c.bnext = b.Cursor(), ms.next
	}
	if pp != nil {
		if mv == nil {
			released = pp.st.released
		}
		next = max(next, pp.st.next)
		for i, pc := range pp.chunks {
			if pc.first >= c.bnext {
				c.pend = pp.chunks[i:]
				break
			}
		}
	}
	return c, next, released, nil
}

// chunkCursor walks a partition's chunks: bbolt's (below bnext), then
// the journaled ones bbolt does not hold yet.
type chunkCursor struct {
	c     *bolt.Cursor // nil: bbolt holds none
	bnext int64
	pend  []pendChunk // from bnext on
	i     int         // -1: in bbolt's; else the index in pend
}

// boltCursor is a chunkCursor over bbolt's chunks only.
func boltCursor(b *bolt.Bucket) *chunkCursor {
	return &chunkCursor{c: b.Cursor(), bnext: math.MaxInt64, i: -1}
}

func (cc *chunkCursor) pendAt(i int) ([]byte, []byte) {
	cc.i = i
	if i >= len(cc.pend) {
		return nil, nil
	}
	return cc.pend[i].key, cc.pend[i].v
}

// seek positions the cursor at the chunk holding off: the greatest first
// offset not above it (or the first chunk, if all are above it).
func (cc *chunkCursor) seek(off int64) ([]byte, []byte) {
	if cc.c != nil && off < cc.bnext {
		cc.i = -1
		return seekChunk(cc.c, off)
	}
	i := 0
	for j := range cc.pend {
		if cc.pend[j].first <= off {
			i = j
		}
	}
	return cc.pendAt(i)
}

func (cc *chunkCursor) next() ([]byte, []byte) {
	if cc.i >= 0 {
		return cc.pendAt(cc.i + 1)
	}
	if k, v := cc.c.Next(); k != nil {
		return k, v
	}
	return cc.pendAt(0)
}

// scanChunks is scanTx over a partition's chunks c holding offsets
// [from, next) at least (from at or above its Released).
func scanChunks(c *chunkCursor, from, next int64, maxRecords int, maxBytes int64, visit func(rb []byte, e *batchEntry, pos int64, skip, n int) error) error {
	k, v := c.seek(from)
	taken := 0
	var size int64
	for pos := from; pos < next; k, v = c.next() {
		if maxRecords > 0 && taken >= maxRecords {
			break
		}
		if k == nil {
			return fmt.Errorf("%w: records end at %d, want %d", ErrCorrupt, pos, next)
		}
		ch, err := decodeChunkAt(k, v)
		if err != nil {
			return err
		}
		if ch.first > pos || ch.end() <= pos {
			return fmt.Errorf("%w: chunk [%d, %d) where offset %d was expected", ErrCorrupt, ch.first, ch.end(), pos)
		}
		for i := ch.entryOf(pos - ch.first); i < ch.entries() && pos < next; i++ {
			if maxRecords > 0 && taken >= maxRecords {
				return nil
			}
			rb := ch.record(i)
			if maxBytes > 0 && taken > 0 && size+int64(len(rb)) > maxBytes {
				return nil
			}
			size += int64(len(rb))
			first, covers := ch.first+ch.entryFirst(i), ch.entryFirst(i+1)-ch.entryFirst(i)
			if rb[0] != formatKafkaBatch {
				if covers != 1 {
					return fmt.Errorf("%w: record at offset %d covers %d offsets", ErrCorrupt, pos, covers)
				}
				if err := visit(rb, nil, pos, 0, 1); err != nil {
					return err
				}
				taken++
				pos++
				continue
			}
			e, err := decodeBatchHeader(rb)
			if err != nil {
				return fmt.Errorf("offset %d: %w", pos, err)
			}
			if e.offset != first || int64(e.count) != covers {
				return fmt.Errorf("%w: batch entry at offset %d does not cover its chunk's offsets", ErrCorrupt, pos)
			}
			skip := int(pos - first)
			n := int(min(covers-int64(skip), next-pos))
			if maxRecords > 0 {
				n = min(n, maxRecords-taken)
			}
			if err := visit(rb, &e, pos, skip, n); err != nil {
				return err
			}
			taken += n
			pos += int64(n)
		}
	}
	return nil
}

// ReadEntries is Read returning the entries the records are stored in: a
// Kafka batch entry is a tributary.BatchView over a copy of its bytes
// (one copy per entry, no object per record), possibly starting inside
// the batch (Skip) or cut short by maxRecords or the partition's end;
// record entries are decoded as Read decodes them. The entries cover the
// same offsets Read would return.
//
// Deprecated: use ReadEntriesInto(nil, …).
func (w *WAL) ReadEntries(stream string, partition int32, from int64, maxRecords int, maxBytes int64) ([]tributary.Entry, error) {
	es, _, err := w.ReadEntriesInto(nil, stream, partition, from, maxRecords, maxBytes)
	return es, err
}

// ReadEntriesInto is ReadEntries copying the batches into buf's spare
// capacity (a batch that does not fit gets a copy of its own): a reader
// that reads again and again (the uplink) reuses one buffer instead of
// allocating its batches' bytes anew. It returns buf with what it copied
// appended; the views alias it, so buf must not be reused while they are.
func (w *WAL) ReadEntriesInto(buf []byte, stream string, partition int32, from int64, maxRecords int, maxBytes int64) ([]tributary.Entry, []byte, error) {
	var out []tributary.Entry
	err := w.view("read", stream, partition, from, func(tx *bolt.Tx, pp *pendPart) error {
		return scanTx(tx, pp, pkey{stream, partition}, from, maxRecords, maxBytes, func(rb []byte, e *batchEntry, pos int64, skip, n int) error {
			if e == nil {
				r, err := DecodeRecord(rb)
				if err != nil {
					return fmt.Errorf("offset %d: %w", pos, err)
				}
				if r.Offset != pos {
					return fmt.Errorf("%w: record at offset %d says offset %d", ErrCorrupt, pos, r.Offset)
				}
				out = append(out, tributary.Entry{Record: r})
				return nil
			}
			var c []byte
			if cap(buf)-len(buf) >= len(e.batch) {
				start := len(buf)
				buf = append(buf, e.batch...)
				c = buf[start:len(buf):len(buf)]
			} else {
				c = bytes.Clone(e.batch)
			}
			out = append(out, tributary.Entry{Batch: e.view(skip, n, c)})
			return nil
		})
	})
	if err != nil {
		return nil, buf, err
	}
	return out, buf, nil
}

// Append makes recs durable (fsynced) and assigns each its Offset, densely per
// (Stream, Partition) in slice order. A zero Timestamp is set to
// time.Now().UnixMicro(). Concurrent calls share one transaction and fsync.
//
// Append returns nil only once the records are durable. On error none of
// recs was written (their Offset and Timestamp fields may have been changed).
// If the budget would be exceeded the error wraps ErrBudgetExceeded. If ctx
// ends before the committer has taken the records, Append returns ctx.Err()
// and nothing is written; once taken, Append waits for the commit (one
// group's worth of time) and reports its outcome.
//
// The WAL owns recs until Append returns.
//
// Deprecated: use Apply(ctx, Op{Kind: OpAppend, Records: recs}).
func (w *WAL) Append(ctx context.Context, recs ...*tributary.Record) error {
	return w.Apply(ctx, Op{Kind: OpAppend, Records: recs}).Err
}

// AppendAsync is Append with a callback instead of a wait. done is called
// exactly once, from the committer goroutine (or, when the call is refused at
// once, from the caller's), and must not block long. The WAL owns recs until
// done is called.
//
// Deprecated: use Submit(Op{Kind: OpAppend, Records: recs, Done: …}).
func (w *WAL) AppendAsync(recs []*tributary.Record, done func(error)) {
	w.Submit(Op{Kind: OpAppend, Records: recs, Done: func(r Result) { done(r.Err) }})
}

// AppendAt makes records durable whose Stream, Partition, Offset and Epoch
// are already assigned (by the partition's owner: a replica storing the
// owner's records, or a node copying them after a takeover). Timestamp and
// every other field are stored as given (a zero Timestamp is set to now).
//
// Per (Stream, Partition), in slice order, a record's Offset is compared
// with the partition's next offset (as left by everything committed or
// queued before it, including earlier records of the same call):
//
//   - below it: the record is already stored (a resend); it is skipped and
//     counted in skipped. Its content is not compared.
//   - equal: it is appended, and next moves on by one.
//   - above it: there is a gap. The whole call is refused with a *GapError
//     (errors.Is ErrGap) carrying the partition's next offset, from which
//     the sender resends. Nothing of the call is written.
//
// A partition that does not exist (never created, or dropped) is created
// at the Offset of its first record in the call, so a replica can start
// anywhere (e.g. at the table's high-water mark). Use EnsurePartition to
// move an existing empty partition forward instead of sending a gap.
//
// Otherwise AppendAt behaves as Append: group commit with other calls,
// durable when it returns nil, budget checked (ErrBudgetExceeded), ctx
// cancels only before the committer has taken the call. The WAL owns recs
// until AppendAt returns. It returns skipped = 0 with any error.
//
// Deprecated: use Apply(ctx, Op{Kind: OpAppendAt, Records: recs}).
func (w *WAL) AppendAt(ctx context.Context, recs ...*tributary.Record) (skipped int, err error) {
	r := w.Apply(ctx, Op{Kind: OpAppendAt, Records: recs})
	return int(r.Skipped), r.Err
}

// AppendAtAsync is AppendAt with a callback instead of a wait, so a caller
// can keep receiving while earlier ranges are being made durable. Calls are
// applied in the order they are made, so consecutive ranges of a partition
// may be queued back to back. done is called exactly once, from the
// committer goroutine (or the caller's, when refused at once), and must not
// block long.
//
// Deprecated: use Submit(Op{Kind: OpAppendAt, Records: recs, Done: …}).
func (w *WAL) AppendAtAsync(recs []*tributary.Record, done func(skipped int, err error)) {
	w.Submit(Op{Kind: OpAppendAt, Records: recs, Done: func(r Result) { done(int(r.Skipped), r.Err) }})
}

// DropPartition forgets (stream, partition) entirely: its unreleased
// records are deleted without being uploaded, its Next, Released and Epoch
// are forgotten, and its budget is freed. It is for a partition this node
// was fenced out of (another node owns it now, so these records either
// reached the table through that node or were never acknowledged as part of
// it). A later Append would start the partition again at offset 0, a later
// AppendAt at its first record's offset. It returns how many unreleased
// records were dropped; an unknown partition is a no-op. Durable when it
// returns.
//
// Deprecated: use Apply(ctx, Op{Kind: OpDrop, Stream: …, Partition: …, Epoch: math.MaxInt64}).
func (w *WAL) DropPartition(stream string, partition int32) (dropped int64, err error) {
	r := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: stream, Partition: partition, Epoch: math.MaxInt64})
	return r.Dropped, r.Err
}

// DropPartitionBelow is DropPartition done only if the partition's Epoch
// (the highest epoch of any record ever appended to it) is below epoch,
// decided in the committer in order with every other write: a partition
// that meanwhile received records of epoch or newer (this node took it
// over again) is kept, and kept reports it.
//
// Deprecated: use Apply(ctx, Op{Kind: OpDrop, Stream: …, Partition: …, Epoch: epoch}).
func (w *WAL) DropPartitionBelow(stream string, partition int32, epoch int64) (dropped int64, kept bool, err error) {
	r := w.Apply(context.Background(), Op{Kind: OpDrop, Stream: stream, Partition: partition, Epoch: epoch})
	return r.Dropped, r.Kept, r.Err
}

// EnsurePartition makes sure the next offset of (stream, partition) is at
// least minNext, creating the partition if needed; it is used when the
// table's committed high-water mark is ahead of a fresh or lost WAL. When it
// moves Next forward, the partition's unreleased records (all below minNext,
// hence already in the table) are released. Durable when it returns.
//
// Deprecated: use Apply(ctx, Op{Kind: OpEnsure, Stream: …, Partition: …, Offset: minNext}).
func (w *WAL) EnsurePartition(stream string, partition int32, minNext int64) error {
	return w.Apply(context.Background(), Op{Kind: OpEnsure, Stream: stream, Partition: partition, Offset: minNext}).Err
}

// Release deletes the records of (stream, partition) with offset < upTo,
// durably, freeing their budget. It is idempotent; upTo beyond Next is
// clamped to Next; an unknown partition is a no-op.
//
// Deprecated: use Apply(ctx, Op{Kind: OpRelease, Stream: …, Partition: …, Offset: upTo}).
func (w *WAL) Release(stream string, partition int32, upTo int64) error {
	return w.Apply(context.Background(), Op{Kind: OpRelease, Stream: stream, Partition: partition, Offset: upTo}).Err
}

func (w *WAL) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

func (w *WAL) enqueue(o *op) error {
	if (o.kind == opAppend || o.kind == opAppendAt) && o.batch == nil {
		for _, r := range o.recs {
			if r == nil {
				return fmt.Errorf("append: %w: nil record", ErrInvalid)
			}
			if err := checkStream(r.Stream); err != nil {
				return fmt.Errorf("append: %w", err)
			}
			if o.kind == opAppendAt && r.Offset < 0 {
				return fmt.Errorf("append at: %w: negative offset %d", ErrInvalid, r.Offset)
			}
		}
		if len(o.recs) == 0 {
			if w.isClosed() {
				return ErrClosed
			}
			o.done(nil)
			return nil
		}
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.broken != nil {
		err := w.broken
		w.mu.Unlock()
		return err
	}
	w.queue = append(w.queue, o)
	w.mu.Unlock()
	w.signal()
	return nil
}

func (w *WAL) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func checkStream(s string) error {
	if s == "" || len(s) > maxStreamLen {
		return fmt.Errorf("%w: stream name of %d bytes", ErrInvalid, len(s))
	}
	return nil
}
