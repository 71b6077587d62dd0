package wal

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Replication support: the owner's incarnation, the tap that hands each
// group's encoded chunks to the replicas before the group is fsynced, and
// AppendVerbatimAsync, which stores such chunks on a replica as they are.
//
// # Invariants
//
//  1. Incarnation. Every Open of a WAL bumps its incarnation (to at least
//     the Unix time in milliseconds, so that a WAL recreated from scratch
//     still starts above its predecessor; stored under
//     "\x00incarnation" in the meta bucket, in the same transaction as the
//     recovery, so it is durable before the first append). Each partition remembers its Next at the start of the incarnation
//     (PartitionState.Start): everything below it was durable before the
//     incarnation began; everything at or above it was written (and
//     perhaps tapped) in it.
//  2. Tapped before fsynced. Tap.Tapped sees exactly the chunk values the
//     group's transaction puts, in offset order per partition, before the
//     transaction commits. A tapped group may never become durable (kill
//     -9: the next Open is a new incarnation) or fail to commit: then every
//     later write fails with ErrBroken until the WAL is reopened, so that
//     no offset the replicas may hold is given to another record within
//     one incarnation.
//  3. Verbatim. AppendVerbatimAsync stores chunk values as given (a chunk
//     that overlaps what the partition holds is cut to its new records,
//     whose bytes are kept), after checking each chunk's checksum and that
//     the chunks continue the partition without a gap.
//  4. Drop of an old incarnation. A verbatim append of a higher
//     incarnation than the partition's Tag first drops the partition's
//     records at or above From (the owner's Start) and stores the new Tag
//     in the same transaction; one of a lower incarnation is refused with
//     ErrStale. So a replica never keeps records its owner wrote in an
//     incarnation that ended before they were durable.

// Tap receives each group's encoded chunks before the group is fsynced
// (see SetTap).
type Tap interface {
	// Tapped is called by the committer with the chunks the group puts,
	// before its transaction commits. It must not block; the chunk bytes
	// are valid only during the call.
	Tapped(parts []TappedPartition)
}

// TappedPartition is one partition's share of a tapped group.
type TappedPartition struct {
	Stream      string
	Partition   int32
	Incarnation int64 // the WAL's incarnation
	Start       int64 // the partition's Next when the incarnation began
	Epoch       int64 // highest epoch of the partition
	Released    int64 // the partition's released offset
	First       int64 // the offset of the first record of Chunks
	Next        int64 // the partition's Next once the group commits
	Chunks      [][]byte
}

// ErrBroken is wrapped by every write after a group handed to the Tap
// failed to commit (see breakDown); reopen the WAL.
var ErrBroken = errors.New("wal: a replicated group failed to commit; reopen the WAL")

// ErrStale refuses a verbatim append of an incarnation older than the one
// the partition last stored.
var ErrStale = errors.New("wal: append of an older incarnation")

// incarnationKey holds the WAL's incarnation (8 bytes) in the meta bucket;
// like formatKey it cannot be a partition key.
var incarnationKey = []byte("\x00incarnation")

// tagBucket maps a partition key to the incarnation (8 bytes) of the
// origin whose verbatim appends the partition last stored.
var tagBucket = []byte("tags")

// SetTap makes t see every group from now on (nil: none).
func (w *WAL) SetTap(t Tap) {
	if t == nil {
		w.tap.Store(nil)
		return
	}
	w.tap.Store(&t)
}

// Incarnation is the WAL's current incarnation (>= 1).
//
// Deprecated: use Stats().Incarnation.
func (w *WAL) Incarnation() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inc
}

// bumpIncarnation reads, increments and stores the incarnation (inside
// recovery's transaction) and marks every partition's start.
func (w *WAL) bumpIncarnation(tx *bolt.Tx) error {
	meta := tx.Bucket(metaBucket)
	var inc int64
	if v := meta.Get(incarnationKey); len(v) == 8 {
		inc = int64(be.Uint64(v))
	} else if v != nil {
		return fmt.Errorf("%w: incarnation of %d bytes", ErrCorrupt, len(v))
	}
	// The clock keeps the incarnation increasing even if the file is lost
	// and recreated (a replica would refuse its appends as stale).
	w.inc = max(inc+1, time.Now().UnixMilli())
	if err := meta.Put(incarnationKey, be.AppendUint64(nil, uint64(w.inc))); err != nil {
		return err
	}
	if tags := tx.Bucket(tagBucket); tags != nil {
		if err := tags.ForEach(func(k, v []byte) error {
			pk, ok := decodePKey(k)
			if !ok || len(v) != 8 {
				return fmt.Errorf("%w: tag entry %x", ErrCorrupt, k)
			}
			if st := w.parts[pk]; st != nil {
				st.tag = int64(be.Uint64(v))
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, st := range w.parts {
		st.start = st.next
	}
	return nil
}

// tapGroup hands the group's chunks to the tap (before the commit).
func (w *WAL) tapGroup(g *group) {
	tp := w.tap.Load()
	if tp == nil {
		return
	}
	var parts []TappedPartition
	for _, wk := range g.parts {
		if len(wk.put) == 0 {
			continue
		}
		parts = append(parts, TappedPartition{Stream: wk.pk.stream, Partition: wk.pk.partition, Incarnation: w.inc,
			Start: wk.st.start, Epoch: wk.st.epoch, Released: wk.st.released, First: wk.putFirst, Next: wk.st.next, Chunks: wk.put})
	}
	if len(parts) == 0 {
		return
	}
	w.tapped = true
	(*tp).Tapped(parts)
	if w.opts.TestTapDelay > 0 {
		time.Sleep(w.opts.TestTapDelay)
	}
}

// breakDown stops the WAL's writes after a tapped group failed to commit
// (committer only): the replicas may hold it, and its offsets must not be
// given to other records in this incarnation, so every later write fails
// with ErrBroken until the WAL is reopened (a new incarnation, whose
// replicas drop what they hold above its durable end).
func (w *WAL) breakDown(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken == nil {
		w.broken = fmt.Errorf("%w: %v", ErrBroken, err)
		w.log.Error("wal: a group the replicas already have failed to commit: refusing writes until the WAL is reopened", "err", err)
	}
}

// Broken returns the error every write fails with since a tapped group
// failed to commit (wrapping ErrBroken), or nil: a broken WAL takes
// writes again only once reopened, so a node reports itself unhealthy.
//
// Deprecated: use Stats().Broken.
func (w *WAL) Broken() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.broken
}

// Verbatim is one AppendVerbatimAsync call: chunks of one partition as the
// owner's WAL encoded them (Tap, ReadChunks).
type Verbatim struct {
	Stream    string
	Partition int32
	Epoch     int64 // the owner's epoch of the partition
	// Incarnation of the owner that sent the chunks (0: unknown, no
	// incarnation check) and From, the owner's Start of that incarnation.
	Incarnation int64
	From        int64
	Chunks      [][]byte
}

// VerbatimResult is the outcome of a verbatim append.
type VerbatimResult struct {
	Skipped int64 // records already held (a resend)
	Dropped int64 // records of an older incarnation dropped first
	Next    int64 // the partition's next offset after the append
}

// chunkSpan is the offsets a chunk holds.
type chunkSpan struct{ first, end int64 }

// AppendVerbatimAsync stores v's chunks (checksums checked, offsets taken
// from their headers) at the end of v's partition; see invariants 3 and 4
// above. Chunks (or records of a chunk) below the partition's next offset
// are skipped; a chunk that starts above it refuses the chunks with a
// *GapError (any drop of invariant 4 is kept); the budget is checked as for
// Append; a partition that does not exist is created at the first chunk's
// offset. done is called exactly once, from the committer (or the caller's
// goroutine when refused at once). The WAL owns v until done is called.
//
// Deprecated: use Submit(Op{Kind: OpVerbatim, Verbatim: &v, Done: …}).
func (w *WAL) AppendVerbatimAsync(v Verbatim, done func(VerbatimResult, error)) {
	w.Submit(Op{Kind: OpVerbatim, Verbatim: &v, Done: func(r Result) { done(r.Verbatim, r.Err) }})
}

// applyVerbatim is AppendVerbatimAsync in the committer.
func (w *WAL) applyVerbatim(g *group, o *op) (opErr, txErr error) {
	v := o.verb
	if err := w.sealed(g, o.pk, v.Epoch); err != nil {
		return err, nil
	}
	wk := w.part(g, o.pk)
	fresh := !wk.existed && !wk.dirty
	if v.Incarnation > 0 && wk.st.tag > v.Incarnation {
		return fmt.Errorf("append verbatim %s/%d: incarnation %d, partition holds %d: %w", v.Stream, v.Partition,
			v.Incarnation, wk.st.tag, ErrStale), nil
	}
	if v.Incarnation > wk.st.tag {
		if !fresh {
			n, err := w.truncate(g, wk, v.From)
			if err != nil {
				return nil, err
			}
			o.vres.Dropped = n
		}
		wk.st.tag = v.Incarnation
		if err := w.put(g, tagBucket, wk.key, be.AppendUint64(nil, uint64(v.Incarnation))); err != nil {
			return nil, fmt.Errorf("put tag: %w", err)
		}
		wk.dirty = true
	}
	o.vres.Next = wk.st.next
	if len(v.Chunks) == 0 {
		return nil, nil
	}
	first, _ := decodeChunk(v.Chunks[0]) // checked by AppendVerbatimAsync
	if fresh {
		wk.st.next, wk.st.released = first.first, first.first // created at its first chunk
	}
	next := wk.st.next
	var size, added int64
	type put struct {
		first int64
		v     []byte
	}
	var puts []put
	for _, c := range v.Chunks {
		ch, _ := decodeChunk(c)
		switch {
		case ch.end() <= next:
			o.vres.Skipped += int64(ch.count())
			continue
		case ch.first > next:
			return &GapError{Stream: v.Stream, Partition: v.Partition, Offset: ch.first, Next: next}, nil
		}
		skip := int(next - ch.first)
		if skip > 0 {
			// Cut to the entries the partition lacks (their bytes as sent).
			start := len(w.chunks)
			cut, err := ch.sub(w.chunks, int64(skip), int64(ch.count()))
			if err != nil {
				return fmt.Errorf("append verbatim to %s/%d: %w", v.Stream, v.Partition, err), nil
			}
			w.chunks = cut
			c = w.chunks[start:len(w.chunks):len(w.chunks)]
			o.vres.Skipped += int64(skip)
		}
		size += ch.size(skip, ch.count())
		added += ch.end() - next
		puts = append(puts, put{next, c})
		next = ch.end()
	}
	if len(puts) == 0 {
		return nil, nil
	}
	if w.opts.MaxBytes > 0 && g.bytes+size > w.opts.MaxBytes {
		o.vres.Skipped = 0
		return fmt.Errorf("append verbatim %d records of %d bytes with %d of %d bytes used: %w",
			added, size, g.bytes, w.opts.MaxBytes, ErrBudgetExceeded), nil
	}
	if err := w.flush(g, wk); err != nil {
		return nil, err
	}
	for _, p := range puts {
		if err := w.putChunk(g, wk, offsetKey(p.first), p.v); err != nil {
			return nil, fmt.Errorf("put %s/%d@%d: %w", v.Stream, v.Partition, p.first, err)
		}
		wk.noteput(p.first, p.v)
	}
	if wk.st.next == wk.st.released {
		ch, _ := decodeChunk(puts[0].v)
		if ts, err := entryTimestamp(ch.record(0)); err == nil {
			wk.st.oldest = ts
		} else {
			wk.st.oldest = time.Now().UnixMicro()
		}
	}
	wk.st.next = next
	wk.st.bytes += size
	wk.st.epoch = max(wk.st.epoch, v.Epoch)
	wk.dirty = true
	g.bytes += size
	g.recs += added
	g.added += added
	o.vres.Next = next
	return nil, nil
}

// truncate drops wk's records at or above to (never below Released): the
// chunks that start there or later are deleted, one that straddles to is
// cut to its records below it. It returns how many records were dropped.
func (w *WAL) truncate(g *group, wk *work, to int64) (int64, error) {
	to = max(to, wk.st.released)
	if to >= wk.st.next {
		return 0, nil
	}
	if g.tx == nil {
		return 0, errNeedsTx
	}
	if err := w.flush(g, wk); err != nil {
		return 0, err
	}
	b, err := w.bucket(g, wk)
	if err != nil {
		return 0, err
	}
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("truncate %s/%d at %d: %w", wk.pk.stream, wk.pk.partition, to, err)
	}
	c := b.Cursor()
	k, v := seekChunk(c, to)
	if k == nil {
		return fail(fmt.Errorf("%w: no chunk holds offset %d", ErrCorrupt, to))
	}
	var freed int64
	var doomed [][]byte // chunks to delete
	var cutKey, cut []byte
	pos := int64(-1)
	for ; k != nil; k, v = c.Next() {
		ch, err := decodeChunkAt(k, v)
		if err != nil {
			return fail(err)
		}
		if ch.end() <= to {
			continue
		}
		if pos >= 0 && ch.first != pos {
			return fail(fmt.Errorf("%w: chunk at %d where %d was expected", ErrCorrupt, ch.first, pos))
		}
		pos = ch.end()
		if ch.first >= to {
			freed += ch.size(0, ch.count())
			doomed = append(doomed, append([]byte(nil), k...))
			continue
		}
		// The chunk straddling to keeps its records below it, unless they
		// are all released.
		keep := int(to - ch.first)
		freed += ch.size(keep, ch.count())
		if to <= wk.st.released {
			doomed = append(doomed, append([]byte(nil), k...))
			continue
		}
		start := len(w.chunks)
		kept, err := ch.sub(w.chunks, 0, int64(keep))
		if err != nil {
			return fail(err)
		}
		w.chunks = kept
		cutKey, cut = append([]byte(nil), k...), w.chunks[start:len(w.chunks):len(w.chunks)]
	}
	if pos != wk.st.next {
		return fail(fmt.Errorf("%w: records end at %d, want %d", ErrCorrupt, pos, wk.st.next))
	}
	if cut != nil {
		if err := b.Put(cutKey, cut); err != nil {
			return fail(err)
		}
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return fail(err)
		}
	}
	dropped := wk.st.next - to
	wk.st.next = to
	wk.st.bytes -= freed
	if to == wk.st.released {
		wk.st.oldest = 0
	}
	wk.dirty = true
	g.bytes -= freed
	g.recs -= dropped
	return dropped, nil
}

// ReadChunks returns copies of the chunk values of (stream, partition)
// holding the records from max(from, Released) on, in order, stopping once
// their size reaches maxBytes (<= 0: no limit; at least one chunk if there
// is any). The first chunk may hold records below from.
func (w *WAL) ReadChunks(stream string, partition int32, from int64, maxBytes int) ([][]byte, error) {
	var out [][]byte
	err := w.view("read chunks", stream, partition, from, func(tx *bolt.Tx, pp *pendPart) error {
		c, next, released, err := partCursor(tx, pp, pkey{stream, partition})
		if c == nil || err != nil {
			return err
		}
		from = max(from, released)
		if from >= next {
			return nil
		}
		k, v := c.seek(from)
		size := 0
		for ; k != nil; k, v = c.next() {
			if len(out) > 0 && maxBytes > 0 && size+len(v) > maxBytes {
				break
			}
			ch, err := decodeChunkAt(k, v)
			if err != nil {
				return err
			}
			if ch.end() <= from {
				continue
			}
			if ch.first >= next {
				break
			}
			out = append(out, append([]byte(nil), v...))
			size += len(v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// seekChunk positions c at the chunk holding off: the greatest key not
// above it (or the first chunk, if all are above it).
func seekChunk(c *bolt.Cursor, off int64) ([]byte, []byte) {
	k, v := c.Seek(offsetKey(off))
	switch {
	case k == nil:
		return c.Last()
	case int64(be.Uint64(k)) > off:
		if pk, pv := c.Prev(); pk != nil {
			return pk, pv
		}
		return c.First()
	}
	return k, v
}

// ChunkOffsets checks a chunk value (version, checksum, header) and
// returns the offsets it holds, [first, end).
func ChunkOffsets(c []byte) (first, end int64, err error) {
	ch, err := decodeChunk(c)
	if err != nil {
		return 0, 0, err
	}
	return ch.first, ch.end(), nil
}

// EncodeChunk appends a chunk of the given EncodeRecord encodings, the
// first at offset first, to dst (for a sender that has records, not
// chunks).
func EncodeChunk(dst []byte, first int64, recs [][]byte) []byte {
	return encodeChunk(dst, first, recs)
}

// ReleaseAsync is Release with a callback: done is called exactly once,
// from the committer (or the caller's goroutine when refused at once).
//
// Deprecated: use Submit(Op{Kind: OpRelease, Stream: …, Partition: …, Offset: upTo, Done: …}).
func (w *WAL) ReleaseAsync(stream string, partition int32, upTo int64, done func(error)) {
	w.Submit(Op{Kind: OpRelease, Stream: stream, Partition: partition, Offset: upTo, Done: func(r Result) { done(r.Err) }})
}

// tapState is the committer's tap bookkeeping (embedded in WAL).
type tapState struct {
	tap    atomic.Pointer[Tap]
	inc    int64 // under mu
	broken error // under mu: set by breakDown, returned by every later write
	tapped bool  // committer: the group being applied was tapped
}

// noteput records a chunk value put in the group, for the Tap.
func (wk *work) noteput(first int64, v []byte) {
	if len(wk.put) == 0 {
		wk.putFirst = first
	}
	wk.put = append(wk.put, v)
}
