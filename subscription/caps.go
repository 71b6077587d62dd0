package subscription

// Caps on what a consumer can make a subscription hold, besides the
// subscription and consumer counts (SetMaxSubscriptions,
// MaxConsumersPerConn):
//
//   - Unacknowledged messages per consumer: at most MaxUnackedPerConsumer
//     (the broker's maxUnackedMessagesPerConsumer default). A consumer
//     that has that many delivered and unacknowledged gets nothing more,
//     whatever permits it granted, until it acknowledges (the broker's
//     "blocked consumer on unacked messages"); the others of its
//     subscription are served. Permits and the pending set are therefore
//     bounded by the cap, not by the client's FLOW.
//   - Individually acknowledged ranges per subscription: maxAckedRanges
//     (cursor.go), in memory as on disk; an ack beyond it is refused.
//
// Each refusal or block is counted (CapStats) and logged at most every
// capLogEvery.

import (
	"sync/atomic"
	"time"
)

// MaxUnackedPerConsumer caps the delivered, unacknowledged messages of
// one consumer (the broker's maxUnackedMessagesPerConsumer default).
const MaxUnackedPerConsumer = 50000

const (
	capLogEvery = 5 * time.Second
)

// room is how many more messages cs may be sent now: its permits, within
// MaxUnackedPerConsumer.
func (cs *consumerState) room(m *Manager) int64 {
	left := int64(MaxUnackedPerConsumer - len(cs.pending))
	if left <= 0 && cs.permits > 0 && m != nil {
		m.blocked.Add(1)
		if logLimited(&m.unackedLog) {
			m.log.Warn("pulsar: consumer blocked: MaxUnackedPerConsumer unacknowledged messages", "max", MaxUnackedPerConsumer,
				"blocked_total", m.blocked.Load())
		}
	}
	return max(min(cs.avail(), left), 0) // avail: permits, unless the connection is backlogged
}

// unackedBlocked reports whether a consumer of s is at
// MaxUnackedPerConsumer; s.mu held.
func (s *Subscription) unackedBlocked() bool {
	for _, cs := range s.consumers {
		if len(cs.pending) >= MaxUnackedPerConsumer {
			return true
		}
	}
	return false
}

// refusedAcks counts and logs n acks of key refused for maxAckedRanges
// and returns the error the ACK gets.
func (m *Manager) refusedAcks(key subKey, n int) error {
	m.acksRefused.Add(int64(n))
	if logLimited(&m.ackLog) {
		m.log.Warn("pulsar: acks refused: too many acknowledged ranges (out-of-order acks)", "topic", key.topic,
			"subscription", key.sub, "max_ranges", maxAckedRanges, "refused_total", m.acksRefused.Load())
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
