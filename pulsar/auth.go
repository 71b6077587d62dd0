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
// connection until then. At expiry a client that announced
// supports_auth_refresh is sent AUTH_CHALLENGE and has authRefreshGrace to
// answer AUTH_RESPONSE with a token of the same principal that expires
// later (pulsar-client-go asks its token provider again); any other
// answer, none, or a client without the feature closes the connection
// (it reconnects with its provider's current token). The vendored
// protocol subset has no types for these two commands: they travel as the
// BaseCommand fields 36 and 37, encoded here with protowire. SUBSCRIBE
// needs Consume on the stream with the subscription as Group; LOOKUP and
// PARTITIONED_METADATA of a stream the principal cannot consume are
// AuthorizationError, and GET_TOPICS_OF_NAMESPACE lists only the streams
// it can consume.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tributary-io/tributary/pulsar/wire"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/encoding/protowire"
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
	b, encErr := wire.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
		RequestId: proto.Uint64(0), Error: pb.ServerError_AuthenticationError.Enum(),
		Message: proto.String("authentication failed: " + err.Error())}})
	if encErr == nil {
		c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.nc.Write(b)
	}
	return fmt.Errorf("%w: %v", errAuthFailed, err)
}

// authRefreshGrace is how long a client has to answer AUTH_CHALLENGE (a
// variable for the tests).
var authRefreshGrace = 10 * time.Second

// expireAt makes exp the end of the connection's authentication (zero:
// none): then the client is challenged for a fresh token, or closed.
func (c *conn) expireAt(exp time.Time) {
	c.amu.Lock()
	defer c.amu.Unlock()
	c.expiry = exp
	if c.expireTimer != nil {
		c.expireTimer.Stop()
	}
	if !exp.IsZero() {
		log := c.log
		c.expireTimer = time.AfterFunc(time.Until(exp), func() { c.tokenExpired(exp, log) })
	}
}

// tokenExpired runs when the token of expiry exp expired: the client is
// challenged (and closed if it has not refreshed within authRefreshGrace)
// or closed at once.
func (c *conn) tokenExpired(exp time.Time, log *slog.Logger) {
	c.amu.Lock()
	if !c.expiry.Equal(exp) { // refreshed meanwhile
		c.amu.Unlock()
		return
	}
	refresh := c.authRefresh
	if refresh {
		c.expireTimer = time.AfterFunc(authRefreshGrace, func() {
			c.amu.Lock()
			missed := c.expiry.Equal(exp)
			c.amu.Unlock()
			if missed {
				log.Info("pulsar: token expired and not refreshed; closing the connection")
				c.nc.Close()
			}
		})
	}
	c.amu.Unlock()
	if !refresh {
		log.Info("pulsar: token expired; closing the connection")
		c.nc.Close()
		return
	}
	log.Debug("pulsar: token expired; challenging the client for a fresh one")
	c.send(authCommand(pb.BaseCommand_AUTH_CHALLENGE, serverVersion, "token", []byte("refresh")))
}

// Field numbers of the AUTH_CHALLENGE / AUTH_RESPONSE messages
// (PulsarApi.proto: BaseCommand.authChallenge = 36, authResponse = 37;
// CommandAuthChallenge/Response: version 1, AuthData 2, protocol_version 3;
// AuthData: auth_method_name 1, auth_data 2).
const (
	fieldAuthChallenge protowire.Number = 36
	fieldAuthResponse  protowire.Number = 37
)

// authCommand is an AUTH_CHALLENGE (the server's) or AUTH_RESPONSE (a
// client's) carrying method and data.
func authCommand(t pb.BaseCommand_Type, version, method string, data []byte) *pb.BaseCommand {
	var authData []byte
	authData = protowire.AppendTag(authData, 1, protowire.BytesType)
	authData = protowire.AppendString(authData, method)
	authData = protowire.AppendTag(authData, 2, protowire.BytesType)
	authData = protowire.AppendBytes(authData, data)
	var body []byte
	body = protowire.AppendTag(body, 1, protowire.BytesType)
	body = protowire.AppendString(body, version)
	body = protowire.AppendTag(body, 2, protowire.BytesType)
	body = protowire.AppendBytes(body, authData)
	body = protowire.AppendTag(body, 3, protowire.VarintType)
	body = protowire.AppendVarint(body, uint64(protocolVersion))
	field := fieldAuthChallenge
	if t == pb.BaseCommand_AUTH_RESPONSE {
		field = fieldAuthResponse
	}
	var raw []byte
	raw = protowire.AppendTag(raw, field, protowire.BytesType)
	raw = protowire.AppendBytes(raw, body)
	cmd := &pb.BaseCommand{Type: t.Enum()}
	cmd.ProtoReflect().SetUnknown(raw)
	return cmd
}

// authPayload finds the AuthData of an AUTH_CHALLENGE or AUTH_RESPONSE.
func authPayload(cmd *pb.BaseCommand) (method string, data []byte, ok bool) {
	field := fieldAuthChallenge
	if cmd.GetType() == pb.BaseCommand_AUTH_RESPONSE {
		field = fieldAuthResponse
	}
	body, ok := bytesField(cmd.ProtoReflect().GetUnknown(), field)
	if !ok {
		return "", nil, false
	}
	ad, ok := bytesField(body, 2)
	if !ok {
		return "", nil, false
	}
	m, _ := bytesField(ad, 1)
	d, _ := bytesField(ad, 2)
	return string(m), d, true
}

// bytesField is the last length-delimited field num of the protobuf
// message b.
func bytesField(b []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	found := false
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, false
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil, false
			}
			out, found = v, true
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil, false
		}
		b = b[l:]
	}
	return out, found
}

// handleAuthResponse takes a client's fresh token: of the same principal,
// expiring later than the one it replaces. Anything else ends the
// connection.
func (c *conn) handleAuthResponse(cmd *pb.BaseCommand) error {
	a := c.s.cfg.Auth
	if a == nil || a.Open() || !c.authRefresh {
		return nil // nothing was asked
	}
	method, data, ok := authPayload(cmd)
	if !ok {
		return fmt.Errorf("%w: AUTH_RESPONSE without auth data", wire.ErrMalformedFrame)
	}
	if method != "token" {
		a.Failed(c.client(), c.principal.Name, "refresh_method_changed")
		return fmt.Errorf("%w: refreshed with method %q", errAuthFailed, method)
	}
	tok := string(data)
	p, err := a.Token(c.client(), tok)
	if err != nil {
		return fmt.Errorf("%w: refreshed token: %v", errAuthFailed, err)
	}
	c.amu.Lock()
	old := c.expiry
	c.amu.Unlock()
	exp := tokenExpiry(tok)
	if p.Name != c.principal.Name || (!exp.IsZero() && !exp.After(old)) {
		a.Failed(c.client(), p.Name, "refresh_not_fresh")
		return fmt.Errorf("%w: the refreshed token is not a later one of %s", errAuthFailed, c.principal)
	}
	c.log.Debug("pulsar: token refreshed", "expires", exp)
	c.expireAt(exp)
	return nil
}

// authorize decides whether the connection's principal may do action on
// stream (group: a subscription, "" for none); nil when allowed.
func (c *conn) authorize(stream, group string) error {
	return c.authorizeRequest(auth.Request{Action: auth.Consume, Stream: stream, Group: group})
}

// authorizeAction decides whether the principal may do action on stream.
func (c *conn) authorizeAction(action auth.Action, stream string) error {
	return c.authorizeRequest(auth.Request{Action: action, Stream: stream})
}

// mayProduce tells (without an audit line) whether producing is on and
// the principal may produce to stream.
func (c *conn) mayProduce(stream string) bool {
	a := c.s.cfg.Auth
	return c.s.cfg.Produce != nil && (a == nil || a.Allowed(auth.Request{Client: c.client(), Principal: c.principal, Action: auth.Produce, Stream: stream}))
}

func (c *conn) authorizeRequest(r auth.Request) error {
	a := c.s.cfg.Auth
	if a == nil {
		return nil
	}
	c.amu.Lock()
	exp := c.expiry
	c.amu.Unlock()
	if !exp.IsZero() && time.Now().After(exp) {
		return fmt.Errorf("%w: token expired", auth.ErrBadCredentials)
	}
	r.Client, r.Principal = c.client(), c.principal
	return a.Authorize(r)
}

// mayConsume tells (without an audit line) whether the principal may
// consume stream, for listings.
func (c *conn) mayConsume(stream string) bool {
	a := c.s.cfg.Auth
	return a == nil || a.Allowed(auth.Request{Client: c.client(), Principal: c.principal, Action: auth.Consume, Stream: stream})
}
