package replica

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/tributary-io/tributary/replica/wire"

	"github.com/tributary-io/tributary/wal"
)

type pkey struct {
	stream    string
	partition int32
}

// store holds the replicas of one origin node in a wal.WAL of its own
// (Config.Dir/<origin>/wal.db), opened on first use.
//
// Invariants: every record in the store has the offset its owner assigned;
// per partition the store holds a gap-free range [Released, Next), so a
// reply's Next means "everything the owner sent below Next is durable
// here" (or was below the owner's released base, hence in the table).
// One worker goroutine applies the origin's messages in arrival order:
// it hands each message's chunks, as the owner's WAL encoded them, to the
// WAL with OpVerbatim (calls are applied in order and share
// group commits), replying to each message only when its records are
// durable, and releases with OpRelease; meanwhile it goes on with the
// next messages. Per partition it remembers the owner's incarnation (the
// WAL's Tag): the first message of a newer one makes the WAL drop the
// records above the owner's durable start, one of an older one (a dead
// connection's last words) is answered StatusStale.
type store struct {
	r      *Replicas
	origin string
	dir    string

	mu    sync.Mutex
	queue []*task
	wake  chan struct{}
	w     *wal.WAL // worker (and takeover, under use) only, after open
	open  sync.Once
	oerr  error
	next  map[pkey]int64 // worker only: next per partition, counting appends queued in the WAL
	inc   map[pkey]int64 // worker only: the origin's incarnation per partition (wal Tag), counting queued appends
	// resync is set when a queued append failed: the worker reloads next.
	resync atomic.Bool
	done   chan struct{}
	stop   chan struct{}
	alive  bool // worker running
}

type task struct {
	app     *wire.Append
	rel     *wire.Release
	barrier chan struct{} // closed when the worker reaches it (freeze)
	reply   func([]byte, error)
	next    int64 // for app: the partition's next after it
}

func newStore(r *Replicas, origin string) *store {
	return &store{r: r, origin: origin, dir: filepath.Join(r.cfg.Dir, origin), wake: make(chan struct{}, 1),
		next: map[pkey]int64{}, inc: map[pkey]int64{}, done: make(chan struct{}), stop: make(chan struct{})}
}

// wal opens the store's WAL on first use.
func (s *store) wal() (*wal.WAL, error) {
	s.open.Do(func() {
		w, err := wal.Open(wal.Options{Path: filepath.Join(s.dir, "wal.db"), MaxBytes: s.r.cfg.MaxBytes,
			NoSync: s.r.cfg.NoSync, Logger: s.r.log})
		if err != nil {
			s.oerr = fmt.Errorf("replica store of %s: %w", s.origin, err)
			return
		}
		for _, p := range w.Partitions() {
			s.next[pkey{p.Stream, p.Partition}] = p.Next
			s.inc[pkey{p.Stream, p.Partition}] = p.Tag
		}
		s.w = w
	})
	return s.w, s.oerr
}

// exists reports whether the store has a WAL on disk.
func (s *store) exists() bool {
	_, err := os.Stat(filepath.Join(s.dir, "wal.db"))
	return err == nil
}

func (s *store) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.alive {
		s.alive = true
		go s.worker()
	}
}

func (s *store) enqueue(t *task) {
	s.mu.Lock()
	s.queue = append(s.queue, t)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *store) worker() {
	defer close(s.done)
	for {
		s.mu.Lock()
		batch := s.queue
		s.queue = nil
		s.mu.Unlock()
		if len(batch) > 0 {
			s.apply(batch)
			continue
		}
		select {
		case <-s.wake:
		case <-s.stop:
			s.mu.Lock()
			rest := s.queue
			s.queue = nil
			s.mu.Unlock()
			for _, t := range rest {
				if t.reply != nil {
					t.reply(nil, errors.New("replica: node shutting down"))
				}
			}
			return
		}
	}
}

// apply handles a batch of the origin's messages in order, each append
// handed to the WAL as its own OpVerbatim (calls are applied in
// order and share group commits) and each release as an OpRelease, so
// the worker never waits for an fsync but for a message that moves a
// partition ahead of the store (OpEnsure).
func (s *store) apply(batch []*task) {
	w, err := s.wal()
	if err != nil {
		for _, t := range batch {
			if t.barrier != nil {
				close(t.barrier)
				continue
			}
			t.reply(nil, err)
		}
		return
	}
	if s.resync.Swap(false) {
		for _, p := range w.Partitions() { // back to the durable state after a failed append
			pk := pkey{p.Stream, p.Partition}
			s.next[pk], s.inc[pk] = p.Next, p.Tag
		}
	}
	for _, t := range batch {
		if t.barrier != nil {
			close(t.barrier)
			continue
		}
		if t.rel != nil {
			reply := t.reply
			w.Submit(wal.Op{Kind: wal.OpRelease, Stream: t.rel.Stream, Partition: t.rel.Partition, Offset: t.rel.UpTo,
				Done: func(r wal.Result) { reply(nil, r.Err) }})
			continue
		}
		s.append(w, t)
	}
}

// append handles one wire.MsgAppend (worker only).
func (s *store) append(w *wal.WAL, t *task) {
	m := t.app
	pk := pkey{m.Stream, m.Partition}
	if e, ok := s.r.ownedEpoch(pk); ok && e > m.Epoch {
		t.reply(wire.Reply{Status: wire.StatusFenced, Next: s.next[pk], Epoch: e}.Encode(), nil)
		return
	}
	if s.r.isFrozen(pk) {
		t.reply(nil, errFrozen)
		return
	}
	chunks := chunksOf(m)
	next, known := s.next[pk]
	if m.Incarnation > 0 {
		switch inc := s.inc[pk]; {
		case m.Incarnation < inc:
			t.reply(wire.Reply{Status: wire.StatusStale, Next: next}.Encode(), nil)
			return
		case m.Incarnation > inc:
			// The owner restarted: the WAL drops what its earlier
			// incarnations left above its durable start (never below
			// Released) and records the new one, before anything else
			// of the partition.
			if known {
				ps, _ := w.Partition(m.Stream, m.Partition)
				next = min(next, max(m.From, ps.Released))
			}
			s.inc[pk] = m.Incarnation
			v := wal.Verbatim{Stream: m.Stream, Partition: m.Partition, Epoch: m.Epoch, Incarnation: m.Incarnation, From: m.From}
			w.Submit(wal.Op{Kind: wal.OpVerbatim, Verbatim: &v, Done: func(r wal.Result) {
				res, err := r.Verbatim, r.Err
				if err != nil {
					s.resync.Store(true)
					s.r.log.Warn("replica: drop of an older incarnation failed", "origin", s.origin, "stream", v.Stream, "partition", v.Partition, "err", err)
					return
				}
				if res.Dropped > 0 {
					s.r.truncated.Add(res.Dropped)
					s.r.log.Info("replica: dropped records its owner never made durable (the owner restarted)", "origin", s.origin,
						"stream", v.Stream, "partition", v.Partition, "from", v.From, "records", res.Dropped, "incarnation", v.Incarnation)
				}
			}})
		}
	}
	if !known || next < m.Base {
		// Everything below Base is in the table: skip ahead.
		if err := w.Apply(context.Background(), wal.Op{Kind: wal.OpEnsure, Stream: m.Stream, Partition: m.Partition, Offset: m.Base}).Err; err != nil {
			t.reply(nil, err)
			return
		}
		next = max(next, m.Base)
	}
	s.next[pk] = next
	// Skip the chunks the store holds; the WAL cuts one that overlaps.
	for len(chunks) > 0 {
		first, end, err := wal.ChunkOffsets(chunks[0])
		if err != nil {
			t.reply(nil, fmt.Errorf("replica: %w", err))
			return
		}
		if end > next {
			if first > next {
				t.reply(wire.Reply{Status: wire.StatusGap, Next: next}.Encode(), nil)
				return
			}
			break
		}
		chunks = chunks[1:]
	}
	if len(chunks) == 0 {
		t.reply(wire.Reply{Status: wire.StatusOK, Next: next}.Encode(), nil)
		return
	}
	_, end, err := wal.ChunkOffsets(chunks[len(chunks)-1])
	if err != nil {
		t.reply(nil, fmt.Errorf("replica: %w", err))
		return
	}
	s.next[pk] = end
	added := end - next
	v := wal.Verbatim{Stream: m.Stream, Partition: m.Partition, Epoch: m.Epoch, Incarnation: m.Incarnation, From: m.From, Chunks: chunks}
	w.Submit(wal.Op{Kind: wal.OpVerbatim, Verbatim: &v, Done: func(r wal.Result) {
		res, err := r.Verbatim, r.Err
		var gap *wal.GapError
		switch {
		case errors.As(err, &gap):
			s.resync.Store(true)
			t.reply(wire.Reply{Status: wire.StatusGap, Next: gap.Next}.Encode(), nil)
		case err != nil:
			s.resync.Store(true)
			s.r.log.Warn("replica: append failed", "origin", s.origin, "stream", v.Stream, "partition", v.Partition, "err", err)
			t.reply(nil, err)
		default:
			s.r.stored.Add(added)
			t.reply(wire.Reply{Status: wire.StatusOK, Next: res.Next}.Encode(), nil)
		}
	}})
}

// chunksOf is an append's chunks: as sent (version 2), or its records as
// one chunk (version 1, from a node of the previous version).
func chunksOf(m *wire.Append) [][]byte {
	if len(m.Records) == 0 {
		return m.Chunks
	}
	recs := make([][]byte, len(m.Records))
	for i, r := range m.Records {
		recs[i] = wal.EncodeRecord(nil, r)
	}
	return [][]byte{wal.EncodeChunk(nil, m.Records[0].Offset, recs)}
}

// close stops the worker and closes the WAL.
func (s *store) close() error {
	s.mu.Lock()
	alive := s.alive
	s.mu.Unlock()
	if alive {
		close(s.stop)
		<-s.done
	}
	if s.w != nil {
		return s.w.Close()
	}
	return nil
}
