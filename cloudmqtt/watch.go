package cloudmqtt

// watcher tells idle sessions that a stream has new rows, so that a
// caught-up session costs nothing until then: one loop looks at the
// committed marks of every stream some session waits on, once per poll
// interval, and wakes the sessions of a stream whose marks moved (or
// gained a partition). Thousands of idle subscribers of one stream cost
// one look per interval, not one each.

import (
	"context"
	"sync"
	"time"

	"github.com/tributary-io/tributary/tables"
)

type watcher struct {
	r     *tables.Reader
	every time.Duration

	mu      sync.Mutex
	streams map[string]*watched
}

type watched struct {
	ends    map[int32]int64
	waiters map[chan struct{}]struct{}
}

func newWatcher(r *tables.Reader, every time.Duration) *watcher {
	return &watcher{r: r, every: every, streams: map[string]*watched{}}
}

// add registers wake (a channel of capacity 1) for stream's changes.
func (w *watcher) add(stream string, wake chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.streams[stream]
	if s == nil {
		s = &watched{waiters: map[chan struct{}]struct{}{}}
		w.streams[stream] = s
	}
	s.waiters[wake] = struct{}{}
}

// remove unregisters wake from stream.
func (w *watcher) remove(stream string, wake chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.streams[stream]; s != nil {
		delete(s.waiters, wake)
		if len(s.waiters) == 0 {
			delete(w.streams, stream)
		}
	}
}

func (w *watcher) run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		names := make([]string, 0, len(w.streams))
		for n := range w.streams {
			names = append(names, n)
		}
		w.mu.Unlock()
		for _, n := range names {
			ends := w.ends(ctx, n)
			w.mu.Lock()
			s := w.streams[n]
			if s != nil && ends != nil && !sameEnds(s.ends, ends) {
				s.ends = ends
				for ch := range s.waiters {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
			w.mu.Unlock()
		}
	}
}

// ends are the committed marks of stream's partitions (nil on an error).
func (w *watcher) ends(ctx context.Context, stream string) map[int32]int64 {
	parts, err := w.r.Partitions(ctx, stream)
	if err != nil {
		return nil
	}
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		v, err := w.r.Partition(ctx, stream, p)
		if err != nil {
			continue
		}
		out[p] = v.End
	}
	return out
}

func sameEnds(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, e := range a {
		if be, ok := b[p]; !ok || be != e {
			return false
		}
	}
	return true
}
