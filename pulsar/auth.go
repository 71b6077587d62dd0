package pulsar

// Authentication and authorization of Pulsar clients.
//
// CONNECT carries the client's credentials: auth_method_name "token" with
// a JWT in auth_data (pulsar.NewAuthenticationToken), or a TLS client
// certificate the listener verified (auth method "tls", or none), or
// nothing (anonymous, when the Authority allows it). A refusal is an ERROR
// with AuthenticationError — pulsar-client-go reads the one command that
// answers CONNECT and gives up on anything but CONNECTED — and the
// connection is closed. A token with an expiry authenticates the
// connection until then: the connection is closed at expiry (the client
// reconnects with the token its provider gives then; the subset of the
// protocol vendored here has no AUTH_CHALLENGE messages to refresh in
// place). SUBSCRIBE needs Consume on the stream with the subscription as
// Group; LOOKUP and PARTITIONED_METADATA of a stream the principal cannot
// consume are AuthorizationError, and GET_TOPICS_OF_NAMESPACE lists only
// the streams it can consume.

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/proto"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/pulsar/pb"
)

// errAuthFailed ends a connection whose CONNECT did not authenticate
// (after the ERROR answering it is written).
var errAuthFailed = errors.New("pulsar: authentication failed")

// authenticate turns CONNECT's credentials into a principal and, for a
// token with an exp claim, the time the connection's authentication ends
// (zero: never).
func (c *conn) authenticate(cmd *pb.CommandConnect) (auth.Principal, time.Time, error) {
	a := c.s.cfg.Auth
	if a == nil || a.Open() {
		// Everything is allowed: credentials are not looked at (clients
		// configured with a token keep working against an open server).
		return auth.Principal{Method: auth.MethodAnonymous}, time.Time{}, nil
	}
	cl := c.client()
	method := cmd.GetAuthMethodName()
	switch method {
	case "token":
		tok := string(cmd.GetAuthData())
		p, err := a.Token(cl, tok)
		if err != nil {
			return p, time.Time{}, err
		}
		return p, tokenExpiry(tok), nil
	case "tls", "", "none":
		if cert := listen.PeerCertificate(c.nc); cert != nil {
			p, err := a.Certificate(cl, cert)
			return p, time.Time{}, err
		}
		if method == "tls" {
			a.Failed(cl, "", "no_client_certificate")
			return auth.Principal{}, time.Time{}, auth.ErrBadCredentials
		}
		p, err := a.Anonymous(cl)
		return p, time.Time{}, err
	}
	a.Failed(cl, "", "unsupported_auth_method")
	return auth.Principal{}, time.Time{}, fmt.Errorf("%w: auth method %q is not supported (token, tls)", auth.ErrBadCredentials, method)
}

// tokenExpiry is the exp claim of a token Authority.Token verified.
func tokenExpiry(tok string) time.Time {
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, claims); err != nil {
		return time.Time{}
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return time.Time{}
	}
	return exp.Time
}

func (c *conn) client() auth.Client {
	return auth.Client{Protocol: "pulsar", Remote: c.nc.RemoteAddr().String()}
}

// refuseConnect answers a CONNECT that did not authenticate. The ERROR is
// written here, on the read goroutine: nothing is queued before CONNECT
// is answered, and the caller closes the connection right after.
func (c *conn) refuseConnect(err error) error {
	b, encErr := appendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(0), Error: pb.ServerError_AuthenticationError.Enum(),
		Message: proto.String("authentication failed: " + err.Error())}})
	if encErr == nil {
		c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.nc.Write(b)
	}
	return fmt.Errorf("%w: %v", errAuthFailed, err)
}

// expireAt closes the connection when its token expires.
func (c *conn) expireAt(exp time.Time) {
	if exp.IsZero() {
		return
	}
	c.expiry = exp
	log, nc := c.log, c.nc
	c.expireTimer = time.AfterFunc(time.Until(exp), func() {
		log.Info("pulsar: token expired; closing the connection")
		nc.Close()
	})
}

// authorize decides whether the connection's principal may do action on
// stream (group: a subscription, "" for none); nil when allowed.
func (c *conn) authorize(stream, group string) error {
	a := c.s.cfg.Auth
	if a == nil {
		return nil
	}
	if !c.expiry.IsZero() && time.Now().After(c.expiry) {
		return fmt.Errorf("%w: token expired", auth.ErrBadCredentials)
	}
	return a.Authorize(auth.Request{Client: c.client(), Principal: c.principal, Action: auth.Consume,
		Stream: stream, Group: group})
}

// mayConsume tells (without an audit line) whether the principal may
// consume stream, for listings.
func (c *conn) mayConsume(stream string) bool {
	a := c.s.cfg.Auth
	return a == nil || a.Allowed(auth.Request{Client: c.client(), Principal: c.principal, Action: auth.Consume, Stream: stream})
}
