package pulsar

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tributary-io/tributary/wal"
)

// SubType is a subscription type; the numbers equal the protocol's
// CommandSubscribe.SubType.
type SubType int32

// Subscription types.
const (
	Exclusive SubType = 0
	Shared    SubType = 1
	Failover  SubType = 2
	KeyShared SubType = 3
)

// InitialPosition is where a subscription without a cursor starts; the
// numbers equal the protocol's CommandSubscribe.InitialPosition.
type InitialPosition int32

// Initial positions.
const (
	Latest   InitialPosition = 0
	Earliest InitialPosition = 1
)

// Entry is one message of one topic partition: its row.
type Entry struct {
	Offset int64
	Record *wal.Record
}

// Source is one topic partition's committed rows. Read returns up to max
// entries from offset `from` on (none = nothing committed yet there); End is
// the next offset not yet committed; OffsetForTime is the first offset whose
// timestamp (publish time = wal.Record.Timestamp, µs) is >= t, or End.
type Source interface {
	Read(ctx context.Context, from int64, max int) ([]Entry, error)
	End(ctx context.Context) (int64, error)
	OffsetForTime(ctx context.Context, t time.Time) (int64, error)
}

// Consumer is the server side of one consumer. Deliver must not block (the
// connection queues); ActiveChanged is sent to Failover/Exclusive consumers
// (CommandActiveConsumerChange).
type Consumer interface {
	Name() string
	Priority() int32
	Deliver(ds []Delivery)
	ActiveChanged(active bool)
}

// Delivery is one entry handed to a consumer.
type Delivery struct {
	Entry
	RedeliveryCount uint32
}

// SubscribeOptions describe one CommandSubscribe.
type SubscribeOptions struct {
	Topic              string // full partition topic name, e.g. persistent://tributary/factory/telemetry-partition-0
	Subscription       string
	Type               SubType
	Durable            bool            // false for readers (non-durable): cursor kept in memory only
	Initial            InitialPosition // used when the subscription has no cursor yet
	StartOffset        *int64          // readers: start at this offset (inclusive) instead of Initial
	KeySharedAutoSplit bool            // Key_Shared: auto-split hash ranges (the default)

	ReplicateSubscriptionState, ReadCompacted bool // accepted, ignored
}

// Sentinel errors; the server maps them to ServerError codes.
var (
	// ErrConsumerBusy: an Exclusive subscription already has a consumer, the
	// subscription exists with another type, or an unsubscribe while other
	// consumers are connected (ServerError ConsumerBusy).
	ErrConsumerBusy = errors.New("pulsar: consumer busy")
	// ErrSubscriptionNotFound: no such subscription (ServerError SubscriptionNotFound).
	ErrSubscriptionNotFound = errors.New("pulsar: subscription not found")
	// ErrNotAllowed: e.g. a cumulative ack on a Shared or Key_Shared
	// subscription (ServerError NotAllowedError).
	ErrNotAllowed = errors.New("pulsar: not allowed")
	// ErrClosed: the manager or subscription is closed (ServerError ServiceNotReady).
	ErrClosed = errors.New("pulsar: closed")
)

// Manager owns every subscription of this server and the cursor store.
type Manager struct {
	store CursorStore
	log   *slog.Logger
}

// NewManager returns a manager persisting durable cursors in store.
func NewManager(store CursorStore, log *slog.Logger) *Manager {
	return &Manager{store: store, log: log}
}

// Subscription is one named subscription of one topic partition.
type Subscription struct {
	m *Manager
}

// Subscribe adds consumer c to the subscription o names, creating it if needed.
func (m *Manager) Subscribe(ctx context.Context, src Source, o SubscribeOptions, c Consumer) (*Subscription, error) {
	return &Subscription{m: m}, nil
}

// Flow grants c permits more messages.
func (s *Subscription) Flow(c Consumer, permits uint32) {}

// Ack acknowledges offsets individually, or everything up to offsets[0]
// when cumulative.
func (s *Subscription) Ack(ctx context.Context, c Consumer, offsets []int64, cumulative bool) error {
	return nil
}

// Redeliver gives c's unacked offsets back for redelivery; nil/empty = all of
// c's unacked messages.
func (s *Subscription) Redeliver(c Consumer, offsets []int64) {}

// Seek resets the cursor to offset; consumers get redelivered from there.
func (s *Subscription) Seek(ctx context.Context, offset int64) error { return nil }

// SeekTime resets the cursor to the first offset published at or after t.
func (s *Subscription) SeekTime(ctx context.Context, t time.Time) error { return nil }

// Remove detaches c (CLOSE_CONSUMER or disconnect): its unacked messages go
// to the other consumers.
func (s *Subscription) Remove(c Consumer) {}

// Unsubscribe deletes the subscription and its durable cursor.
func (m *Manager) Unsubscribe(ctx context.Context, topic, sub string) error { return nil }

// Close stops every subscription and flushes durable cursors.
func (m *Manager) Close(ctx context.Context) error { return nil }
