package mqtt

import (
	"errors"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Caps on what clients can make the broker hold, beyond the WAL's budget
// and the listener's connection caps (package listen):
//
//   - Retained messages: at most Config.MaxRetained topics and
//     Config.MaxRetainedBytes of payload. A retained publish that would
//     exceed either (a new topic, or a larger payload) is refused — PUBACK
//     0x97 for MQTT 5, a disconnect for 3.1.1, dropped at QoS 0 — and not
//     written to the WAL; clearing a retained topic is always allowed.
//   - Sessions: at most Config.MaxSessions client sessions, connected or
//     kept for their expiry. A CONNECT for a new client id beyond it gets
//     CONNACK 0x97 (3.1.1: 0x03 server unavailable).
//
// Each refusal is counted (Stats) and logged at most every few seconds.

// Defaults of the caps.
const (
	DefaultMaxRetained      = 100_000
	DefaultMaxRetainedBytes = 64 << 20
	DefaultMaxSessions      = 100_000
)

// errRetainedQuota refuses a retained publish over the caps.
var errRetainedQuota = errors.New("mqtt: retained message quota exceeded")

// retained follows the retained topics and their payload sizes (the
// broker's own index has no sizes).
type retained struct {
	mu       sync.Mutex
	sizes    map[string]int
	bytes    int
	maxCount int
	maxBytes int
}

func newRetained(maxCount, maxBytes int) *retained {
	return &retained{sizes: map[string]int{}, maxCount: maxCount, maxBytes: maxBytes}
}

// admit reports whether a retained publish of n payload bytes to topic fits.
func (r *retained) admit(topic string, n int) bool {
	if n == 0 {
		return true // a clear
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.sizes[topic]
	if !ok && r.maxCount > 0 && len(r.sizes) >= r.maxCount {
		return false
	}
	return r.maxBytes <= 0 || r.bytes-old+n <= r.maxBytes
}

// stored records what the broker retained (or cleared) for topic.
func (r *retained) stored(topic string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bytes -= r.sizes[topic]
	if n == 0 {
		delete(r.sizes, topic)
		return
	}
	r.sizes[topic] = n
	r.bytes += n
}

func (r *retained) usage() (count, bytes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sizes), r.bytes
}

// limitsHook enforces the caps above.
type limitsHook struct {
	mochi.HookBase
	s *Server
}

func (h *limitsHook) ID() string { return "tributary-limits" }

func (h *limitsHook) Provides(b byte) bool {
	return b == mochi.OnRetainMessage || b == mochi.OnConnect
}

// OnConnect caps the client's keep-alive: a client asking for none (0) or
// for more than the cap gets the cap, enforced by the read deadline (one
// and a half keep-alives without a packet close the connection), and an
// MQTT 5 client is told in CONNACK's Server Keep Alive [MQTT-3.2.2-21].
// Without a cap a half-open connection of a client that asked for no
// keep-alive would be kept forever. Then it refuses a new session beyond
// Config.MaxSessions.
func (h *limitsHook) OnConnect(cl *mochi.Client, pk packets.Packet) error {
	if ka, max := cl.State.Keepalive, h.s.cfg.MaxKeepAlive; max > 0 && (ka == 0 || ka > max) {
		cl.State.Keepalive = max
		cl.State.ServerKeepalive = true
	}
	return h.sessions(cl)
}

func (h *limitsHook) OnRetainMessage(cl *mochi.Client, pk packets.Packet, r int64) {
	h.s.retained.stored(pk.TopicName, len(pk.Payload))
}

// sessions refuses a new session beyond Config.MaxSessions.
func (h *limitsHook) sessions(cl *mochi.Client) error {
	s := h.s
	if s.cfg.MaxSessions <= 0 || s.broker.Clients.Len() < s.cfg.MaxSessions {
		return nil // the common case, without counting
	}
	if _, ok := s.broker.Clients.Get(cl.ID); ok {
		return nil // an existing session: taking it over adds none
	}
	n := 0
	for _, c := range s.broker.Clients.GetAll() {
		if !c.Net.Inline { // the broker's own clients are no sessions
			n++
		}
	}
	if n < s.cfg.MaxSessions {
		return nil
	}
	s.refusedSessions.Add(1)
	if n, ok := s.capLog.allow(); ok {
		s.log.Warn("connect refused: session limit reached (mqtt.max_sessions)", "limit", s.cfg.MaxSessions,
			"client", cl.ID, "remote", cl.Net.Remote, "refused_since_last_log", n)
	}
	return s.refuseConnect(cl, connectRefusal{packets.ErrQuotaExceeded, packets.Err3ServerUnavailable.Code})
}
