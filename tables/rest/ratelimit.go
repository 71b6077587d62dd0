package rest

import (
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// rateLimits is one token bucket per remote IP address. The map is
// bounded: when it holds maxTracked addresses, those idle for a minute are
// forgotten (and if none are, the new address shares a bucket with every
// other untracked one, so a flood of addresses cannot grow it).
type rateLimits struct {
	r     rate.Limit
	burst int

	mu       sync.Mutex
	byIP     map[string]*ipLimit
	overflow *rate.Limiter
}

type ipLimit struct {
	lim  *rate.Limiter
	last time.Time
}

const maxTracked = 10000

func newRateLimits(perSecond float64, burst int) *rateLimits {
	if perSecond < 0 {
		return nil
	}
	return &rateLimits{r: rate.Limit(perSecond), burst: burst, byIP: map[string]*ipLimit{},
		overflow: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// allow takes a token for the request's remote address.
func (rl *rateLimits) allow(remote string) bool {
	if rl == nil {
		return true
	}
	ip, _, err := net.SplitHostPort(remote)
	if err != nil {
		ip = remote
	}
	now := time.Now()
	rl.mu.Lock()
	e := rl.byIP[ip]
	if e == nil {
		if len(rl.byIP) >= maxTracked {
			for k, v := range rl.byIP {
				if now.Sub(v.last) > time.Minute {
					delete(rl.byIP, k)
				}
			}
		}
		if len(rl.byIP) >= maxTracked {
			rl.mu.Unlock()
			return rl.overflow.Allow()
		}
		e = &ipLimit{lim: rate.NewLimiter(rl.r, rl.burst)}
		rl.byIP[ip] = e
	}
	e.last = now
	rl.mu.Unlock()
	return e.lim.AllowN(now, 1)
}
