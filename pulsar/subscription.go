package pulsar

import "github.com/tributary-io/tributary/subscription"

// The subscriptions, their consumers and durable cursors are package
// subscription's (shared with the gRPC API, so a subscription can be read
// over both); the names below keep this package's code as it was.
type (
	SubType          = subscription.SubType
	InitialPosition  = subscription.InitialPosition
	Entry            = subscription.Entry
	Source           = subscription.Source
	Consumer         = subscription.Consumer
	Delivery         = subscription.Delivery
	SubscribeOptions = subscription.SubscribeOptions
	Manager          = subscription.Manager
	Subscription     = subscription.Subscription
	Cursor           = subscription.Cursor
	CursorStore      = subscription.CursorStore
	CapStats         = subscription.CapStats
	SubscriptionInfo = subscription.SubscriptionInfo
)

// Subscription types and initial positions.
const (
	Exclusive = subscription.Exclusive
	Shared    = subscription.Shared
	Failover  = subscription.Failover
	KeyShared = subscription.KeyShared
	Latest    = subscription.Latest
	Earliest  = subscription.Earliest
)

// Errors of subscriptions; the server maps them to ServerError codes.
var (
	ErrConsumerBusy         = subscription.ErrConsumerBusy
	ErrTooMany              = subscription.ErrTooMany
	ErrSubscriptionNotFound = subscription.ErrSubscriptionNotFound
	ErrNotAllowed           = subscription.ErrNotAllowed
	ErrClosed               = subscription.ErrClosed
)

// NewManager and OpenCursorStore are package subscription's.
var (
	NewManager      = subscription.NewManager
	OpenCursorStore = subscription.OpenCursorStore
)
