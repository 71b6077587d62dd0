package grpcapi

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"connectrpc.com/connect"
	"golang.org/x/sync/semaphore"

	"github.com/tributary-io/tributary/auth"
)

// protocol names the gRPC API in the audit log and the auth metrics.
const protocol = "grpc"

// identity is what the middleware found out about a request.
type identity struct {
	p      auth.Principal
	err    error
	remote string
}

type identityKey struct{}

// withIdentity authenticates every request before connect decodes it
// and leaves the answer in its context for the handlers. A call
// authenticated with a token has the token's expiry as its context's
// deadline, with auth.ErrExpired as the cause (see expired).
func withIdentity(a *auth.Authority, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := identity{remote: r.RemoteAddr}
		if !a.Open() {
			id.p, id.err = a.HTTPClient(r, protocol)
		}
		ctx := context.WithValue(r.Context(), identityKey{}, id)
		if id.err == nil && !id.p.Expires.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadlineCause(ctx, id.p.Expires, auth.ErrExpired)
			defer cancel()
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// expired is what a streaming call whose context ended returns:
// Unauthenticated naming the expiry when its token expired, else nil (the
// client went away).
func expired(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), auth.ErrExpired) {
		return connect.NewError(connect.CodeUnauthenticated, auth.ErrExpired)
	}
	return nil
}

// guard checks the call's identity: Unauthenticated when it has none.
func guard(ctx context.Context) (identity, error) {
	id, _ := ctx.Value(identityKey{}).(identity)
	if id.err != nil {
		return id, connect.NewError(connect.CodeUnauthenticated, id.err)
	}
	return id, nil
}

// authorize checks action on stream for id: PermissionDenied when the
// ACL refuses.
func authorize(a *auth.Authority, id identity, action auth.Action, stream string) error {
	if a.Open() {
		return nil
	}
	err := a.Authorize(auth.Request{Client: auth.Client{Protocol: protocol, Remote: id.remote}, Principal: id.p, Action: action, Stream: stream})
	if err != nil {
		return connect.NewError(connect.CodePermissionDenied, errors.New(id.p.String()+" may not "+string(action)+" stream "+stream))
	}
	return nil
}

// Defaults of the caps.
const (
	DefaultMaxRecordBytes = 1 << 20
	DefaultMaxStreams     = 1024
)

// Limits are the caps of a Producer or Reader; zero values take the
// defaults.
type Limits struct {
	// MaxRecordBytes caps one record's key, value and headers.
	MaxRecordBytes int64
	// MaxStreams caps the concurrent calls.
	MaxStreams int
}

func (l *Limits) defaults() {
	if l.MaxRecordBytes <= 0 {
		l.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if l.MaxStreams <= 0 {
		l.MaxStreams = DefaultMaxStreams
	}
}

// calls caps the concurrent calls and counts them.
type calls struct {
	sem      *semaphore.Weighted
	open     *atomic.Int64
	rejected *atomic.Int64
}

func newCalls(max int, open, rejected *atomic.Int64) calls {
	return calls{sem: semaphore.NewWeighted(int64(max)), open: open, rejected: rejected}
}

func (c calls) acquire() error {
	if !c.sem.TryAcquire(1) {
		c.rejected.Add(1)
		err := connect.NewError(connect.CodeResourceExhausted, errors.New("too many concurrent calls (max_streams)"))
		err.Meta().Set("Retry-After", "1")
		return err
	}
	c.open.Add(1)
	return nil
}

func (c calls) release() {
	c.open.Add(-1)
	c.sem.Release(1)
}
