package subscription

// Caps on what a consumer can make a subscription hold, besides the
// subscription count (Caps.MaxSubscriptions) and the consumers per
// connection (the protocol server's):
//
//   - Unacknowledged messages per consumer: at most
//     Caps.MaxUnackedPerConsumer (default DefaultMaxUnackedPerConsumer,
//     the broker's maxUnackedMessagesPerConsumer default). A consumer
//     that has that many delivered and unacknowledged gets nothing more,
//     whatever permits it granted, until it acknowledges (the broker's
//     "blocked consumer on unacked messages"); the others of its
//     subscription are served. Permits and the pending set are therefore
//     bounded by the cap, not by the client's FLOW.
//   - Individually acknowledged ranges per subscription:
//     Caps.MaxAckedRanges (default DefaultMaxAckedRanges, cursor.go), in
//     memory as on disk; an ack beyond it is refused.
//
// Each refusal or block is counted (CapStats) and logged at most every
// capLogEvery.

import (
	"sync/atomic"
	"time"
)

const (
	// DefaultMaxUnackedPerConsumer is Caps.MaxUnackedPerConsumer's default
	// (the broker's maxUnackedMessagesPerConsumer).
	DefaultMaxUnackedPerConsumer = 50000
	// DefaultMaxSubscriptions is Caps.MaxSubscriptions' default.
	DefaultMaxSubscriptions = 10000
	capLogEvery             = 5 * time.Second
)

// Caps bound what clients can make a Manager hold (the cloud's pulsar.*
// keys); zero fields take the defaults.
type Caps struct {
	// MaxSubscriptions caps the subscriptions held at once; a new one
	// beyond it is refused with ErrTooMany (TooManyRequests). Default
	// DefaultMaxSubscriptions; -1 = no cap.
	MaxSubscriptions int
	// MaxUnackedPerConsumer: a consumer with this many messages delivered
	// and unacknowledged gets nothing more until it acknowledges. Default
	// DefaultMaxUnackedPerConsumer.
	MaxUnackedPerConsumer int
	// MaxAckedRanges bounds a subscription's individually acknowledged
	// ranges (ack beyond: ErrTooMany). Default DefaultMaxAckedRanges.
	MaxAckedRanges int
}

// withDefaults fills unset caps.
func (c Caps) withDefaults() Caps {
	if c.MaxSubscriptions == 0 {
		c.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if c.MaxUnackedPerConsumer <= 0 {
		c.MaxUnackedPerConsumer = DefaultMaxUnackedPerConsumer
	}
	if c.MaxAckedRanges <= 0 {
		c.MaxAckedRanges = DefaultMaxAckedRanges
	}
	return c
}

// room is how many more messages cs may be sent now: its permits, within
// Caps.MaxUnackedPerConsumer.
func (cs *consumerState) room(m *Manager) int64 {
	maxUnacked := DefaultMaxUnackedPerConsumer
	if m != nil {
		maxUnacked = m.caps.MaxUnackedPerConsumer
	}
	left := int64(maxUnacked - cs.pending.Len())
	if left <= 0 && cs.permits > 0 && m != nil {
		m.blocked.Add(1)
		if logLimited(&m.unackedLog) {
			m.log.Warn("pulsar: consumer blocked: pulsar.max_unacked_per_consumer unacknowledged messages", "max", maxUnacked,
				"blocked_total", m.blocked.Load())
		}
	}
	return max(min(cs.avail(), left), 0) // avail: permits, unless the connection is backlogged
}

// unackedBlocked reports whether a consumer of s is at
// Caps.MaxUnackedPerConsumer; s.mu held.
func (s *Subscription) unackedBlocked() bool {
	for _, cs := range s.consumers {
		if cs.pending.Len() >= s.m.caps.MaxUnackedPerConsumer {
			return true
		}
	}
	return false
}

// refusedAcks counts and logs n acks of key refused for Caps.MaxAckedRanges
// and returns the error the ACK gets.
func (m *Manager) refusedAcks(key subKey, n int) error {
	m.acksRefused.Add(int64(n))
	if logLimited(&m.ackLog) {
		m.log.Warn("pulsar: acks refused: too many acknowledged ranges (out-of-order acks)", "topic", key.topic,
			"subscription", key.sub, "max_ranges", m.caps.MaxAckedRanges, "refused_total", m.acksRefused.Load())
	}
	return ErrTooMany
}

// logLimited reports whether a line may be logged now (at most once every
// capLogEvery per last).
func logLimited(last *atomic.Int64) bool {
	now, prev := time.Now().UnixNano(), last.Load()
	return now-prev >= int64(capLogEvery) && last.CompareAndSwap(prev, now)
}

// CapStats are the counters of the subscription caps.
type CapStats struct {
	AcksRefused     int64 // individual acks refused for the acknowledged-ranges cap
	ConsumerBlocked int64 // dispatch passes that found a consumer at the unacknowledged cap
}

// CapStats returns the manager's cap counters.
func (m *Manager) CapStats() CapStats {
	return CapStats{AcksRefused: m.acksRefused.Load(), ConsumerBlocked: m.blocked.Load()}
}
