// Package batch groups items arriving on a channel into runs for one
// append each: everything already queued, up to a count and a byte cap,
// while the items belong together. The HTTP and gRPC produce front doors
// use it so that records streamed in one request share a WAL group
// commit, in the order they were sent.
package batch

import "iter"

// Caps bound one run.
type Caps struct {
	Items int
	Bytes int64
}

// Runs yields runs of items from ch in order until ch is closed. A run
// starts with the next item (waiting for it) and takes every item already
// queued while join(first, item) holds and the caps leave room; alone(x)
// items (errors) are runs of their own.
func Runs[T any](ch <-chan T, caps Caps, size func(T) int64, join func(first, next T) bool, alone func(T) bool) iter.Seq[[]T] {
	return func(yield func([]T) bool) {
		var next T
		var held bool
		for {
			if !held {
				it, ok := <-ch
				if !ok {
					return
				}
				next = it
			}
			held = false
			run := []T{next}
			n := size(next)
		fill:
			for !alone(run[0]) && len(run) < caps.Items && n < caps.Bytes {
				select {
				case it, ok := <-ch:
					if !ok {
						break fill // the next receive sees the close
					}
					if alone(it) || !join(run[0], it) {
						next, held = it, true
						break fill
					}
					run = append(run, it)
					n += size(it)
				default:
					break fill
				}
			}
			if !yield(run) {
				return
			}
		}
	}
}
