package replica

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/tributary-io/tributary/replica/wire"

	"github.com/tributary-io/tributary"
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
// it takes everything queued and hands the accepted records of all of it
// to the WAL with one AppendAtAsync (calls are applied in order and share
// group commits), replying to each message only when its records are
// durable; meanwhile it goes on with the next messages.
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
	// resync is set when a queued append failed: the worker reloads next.
	resync atomic.Bool
	done   chan struct{}
	stop   chan struct{}
	alive  bool // worker running
}

type task struct {
	app   *wire.Append
	rel   *wire.Release
	reply func([]byte, error)
	next  int64 // for app: the partition's next after it
}

func newStore(r *Replicas, origin string) *store {
	return &store{r: r, origin: origin, dir: filepath.Join(r.cfg.Dir, origin), wake: make(chan struct{}, 1),
		next: map[pkey]int64{}, done: make(chan struct{}), stop: make(chan struct{})}
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
				t.reply(nil, errors.New("replica: node shutting down"))
			}
			return
		}
	}
}

// apply handles a batch of the origin's messages in order: appends are
// collected and committed together; a release, or an append whose base
// is ahead of the store, first commits what was collected.
func (s *store) apply(batch []*task) {
	w, err := s.wal()
	if err != nil {
		for _, t := range batch {
			t.reply(nil, err)
		}
		return
	}
	if s.resync.Swap(false) {
		for _, p := range w.Partitions() { // back to the durable state after a failed append
			s.next[pkey{p.Stream, p.Partition}] = p.Next
		}
	}
	var pending []*task
	var recs []*tributary.Record
	flush := func() {
		if len(pending) == 0 {
			return
		}
		tasks, n := pending, len(recs)
		w.AppendAtAsync(recs, func(_ int, err error) {
			if err != nil {
				s.resync.Store(true)
				s.r.log.Warn("replica: append failed", "origin", s.origin, "records", n, "err", err)
			} else {
				s.r.stored.Add(int64(n))
			}
			for _, t := range tasks {
				if err != nil {
					t.reply(nil, err)
				} else {
					t.reply(wire.Reply{Status: wire.StatusOK, Next: t.next}.Encode(), nil)
				}
			}
		})
		pending, recs = nil, nil
	}
	for _, t := range batch {
		if t.rel != nil {
			flush()
			err := w.Release(t.rel.Stream, t.rel.Partition, t.rel.UpTo)
			t.reply(nil, err)
			continue
		}
		m := t.app
		pk := pkey{m.Stream, m.Partition}
		if e, ok := s.r.ownedEpoch(pk); ok && e > m.Epoch {
			t.reply(wire.Reply{Status: wire.StatusFenced, Next: s.next[pk], Epoch: e}.Encode(), nil)
			continue
		}
		next, known := s.next[pk]
		if !known || next < m.Base {
			// Everything below Base is in the table: skip ahead.
			flush()
			if err := w.EnsurePartition(m.Stream, m.Partition, m.Base); err != nil {
				t.reply(nil, err)
				continue
			}
			next = max(next, m.Base)
			s.next[pk] = next
		}
		rs := m.Records
		for len(rs) > 0 && rs[0].Offset < next {
			rs = rs[1:] // duplicates of what the store has
		}
		if len(rs) > 0 && rs[0].Offset > next {
			t.reply(wire.Reply{Status: wire.StatusGap, Next: next}.Encode(), nil)
			continue
		}
		next += int64(len(rs))
		s.next[pk] = next
		t.next = next
		if len(rs) == 0 {
			t.reply(wire.Reply{Status: wire.StatusOK, Next: next}.Encode(), nil)
			continue
		}
		pending = append(pending, t)
		recs = append(recs, rs...)
	}
	flush()
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
