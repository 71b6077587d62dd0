package auth

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// ThrottleConfig limits password and token guessing, for every protocol
// at once (security.throttle): after Failures failed authentications in
// a row from one address, or for one user name, further attempts from
// it or for it are refused without being checked for Backoff, doubling
// with each further failure up to MaxBackoff. A success resets the
// user's count (not the address's: one valid account must not reset a
// guesser's address).
type ThrottleConfig struct {
	// Failures before the back-off starts. Default 5; < 0 = no throttle.
	Failures int `yaml:"failures"`
	// Backoff is the first refusal period. Default 1s.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps it. Default 1m.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Loopback counts failures of loopback addresses per address too.
	// Default false: local processes (probes, sidecars, tests) share
	// one address, so only their user names are throttled.
	Loopback bool `yaml:"loopback"`
}

func (t *ThrottleConfig) defaults() {
	if t.Failures == 0 {
		t.Failures = 5
	}
	if t.Backoff <= 0 {
		t.Backoff = time.Second
	}
	if t.MaxBackoff <= 0 {
		t.MaxBackoff = time.Minute
	}
}

// maxThrottled bounds each of the throttle's maps; beyond it, entries
// whose back-off has ended are dropped, and if none has, the oldest half.
const maxThrottled = 100_000

type throttleEntry struct {
	failures int
	until    time.Time // refused until then
	last     time.Time
}

// throttle counts failures by key ("addr:IP", "user:NAME").
type throttle struct {
	cfg ThrottleConfig
	mu  sync.Mutex
	m   map[string]*throttleEntry
}

func newThrottle(cfg ThrottleConfig) *throttle {
	cfg.defaults()
	return &throttle{cfg: cfg, m: map[string]*throttleEntry{}}
}

// blocked tells whether any of keys is in its back-off.
func (t *throttle) blocked(now time.Time, keys ...string) bool {
	if t.cfg.Failures < 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if e := t.m[k]; k != "" && e != nil && now.Before(e.until) {
			return true
		}
	}
	return false
}

// failed counts a failure for each of keys.
func (t *throttle) failed(now time.Time, keys ...string) {
	if t.cfg.Failures < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if k == "" {
			continue
		}
		e := t.m[k]
		if e == nil {
			if len(t.m) >= maxThrottled {
				t.prune(now)
			}
			e = &throttleEntry{}
			t.m[k] = e
		}
		e.failures++
		e.last = now
		if over := e.failures - t.cfg.Failures; over >= 0 {
			d := t.cfg.Backoff << min(over, 30)
			if d <= 0 || d > t.cfg.MaxBackoff {
				d = t.cfg.MaxBackoff
			}
			e.until = now.Add(d)
		}
	}
}

// succeeded forgets key's failures.
func (t *throttle) succeeded(key string) {
	t.mu.Lock()
	delete(t.m, key)
	t.mu.Unlock()
}

func (t *throttle) prune(now time.Time) {
	for k, e := range t.m {
		if now.Sub(e.last) > t.cfg.MaxBackoff && !now.Before(e.until) {
			delete(t.m, k)
		}
	}
	if len(t.m) < maxThrottled {
		return
	}
	n := 0
	for k := range t.m { // map order: an arbitrary half
		delete(t.m, k)
		if n++; n >= maxThrottled/2 {
			break
		}
	}
}

// addrKey is the throttle's key for a remote address ("" = not
// throttled by address).
func (t *throttle) addrKey(remote string) string {
	if remote == "" {
		return ""
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Unmap().IsLoopback() && !t.cfg.Loopback {
			return ""
		}
		host = ip.Unmap().String()
	}
	return "addr:" + host
}

func userKey(user string) string {
	if user == "" {
		return ""
	}
	return "user:" + user
}

// ClientAddr is the address r comes from: its RemoteAddr, or — only when
// RemoteAddr is one of security.trusted_proxies — the last address of
// X-Forwarded-For that is not a trusted proxy (the one the nearest
// trusted proxy saw). Off by default: a header any client can write is
// never believed unless the operator named the proxies.
func (a *Authority) ClientAddr(r *http.Request) string {
	if len(a.proxies) == 0 {
		return r.RemoteAddr
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !a.trustedProxy(ip) {
		return r.RemoteAddr
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if !a.trustedProxy(hop) {
			return hop.String()
		}
	}
	return r.RemoteAddr
}

func (a *Authority) trustedProxy(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.proxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
