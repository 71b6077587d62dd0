package mqtt

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/listen"
)

// authHook is the broker's door: it authenticates every CONNECT against
// Config.Auth and answers mochi's ACL checks (see the package comment for
// the behaviour clients see).
//
// Invariants:
//
//   - A client is admitted only with a principal. The principal is found
//     in OnConnect — the last refusal point of mochi's attachClient
//     before the session is established — and kept per client id with the
//     client that holds the id (and, until the new one's session is
//     established, the connection it takes over, of the same principal),
//     so that a lookup from any other client (an ended one) finds nothing
//     and is denied.
//   - A session belongs to its principal. A CONNECT whose client id is not
//     allowed to its principal (auth.AuthorizeClientID), or whose client
//     id names a session (connected or kept) of another principal, is
//     refused in OnConnect, before mochi's inheritClientSession takes the
//     existing session over: one device cannot kick another off, nor
//     inherit its subscriptions and queued messages.
//   - Every subscription was allowed. mochi asks OnACLCheck (read) for
//     each SUBSCRIBE filter and again for every delivery (publishToClient,
//     retained messages included), so a topic reaches a client only
//     through a filter its principal may subscribe to.
//   - Publishes are checked after topic-alias resolution, on their topic
//     and on the stream the router picks for it (a rule's streams must
//     cover it), wills likewise at CONNECT: OnACLCheck
//     (write) runs before mochi resolves an alias, so the publish check is
//     in publishHook.OnPublish instead, before the WAL; a denied publish is
//     never appended, retained or delivered.
//
// With Config.Auth nil every client is admitted anonymously and allowed
// everything (unit tests, embedded uses).
type authHook struct {
	mochi.HookBase
	s *Server

	mu       sync.RWMutex
	sessions map[string]session // by client id
}

// session is the principal of the client that holds a client id, and of
// the one it is taking over (same principal) until its session is
// established: deliveries mochi makes to the old one meanwhile go into
// the inflight state the new one inherits.
type session struct {
	cl, prev *mochi.Client
	p        auth.Principal
}

func newAuthHook(s *Server) *authHook {
	return &authHook{s: s, sessions: map[string]session{}}
}

func (h *authHook) ID() string { return "tributary-auth" }

func (h *authHook) Provides(b byte) bool {
	switch b {
	case mochi.OnConnect, mochi.OnConnectAuthenticate, mochi.OnSessionEstablished, mochi.OnACLCheck,
		mochi.OnDisconnect, mochi.OnClientExpired:
		return true
	}
	return false
}

// principal is cl's principal; ok is false for a client that is not (or
// no longer) the holder of its client id.
func (h *authHook) principal(cl *mochi.Client) (auth.Principal, bool) {
	h.mu.RLock()
	e, ok := h.sessions[cl.ID]
	h.mu.RUnlock()
	if !ok || (e.cl != cl && e.prev != cl) {
		return auth.Principal{}, false
	}
	return e.p, true
}

// forget drops cl's entry when cl still holds its client id.
func (h *authHook) forget(cl *mochi.Client) {
	h.mu.Lock()
	if e, ok := h.sessions[cl.ID]; ok {
		switch cl {
		case e.cl:
			delete(h.sessions, cl.ID)
		case e.prev:
			e.prev = nil
			h.sessions[cl.ID] = e
		}
	}
	h.mu.Unlock()
}

// connectRefusal is a CONNACK refusal: its MQTT 5 reason code and the
// MQTT 3.1.1 return code.
type connectRefusal struct {
	code packets.Code
	v3   byte
}

var (
	// refuseCredentials: bad user name or password (also a bad or expired
	// token, an unknown user).
	refuseCredentials = connectRefusal{packets.ErrBadUsernameOrPassword, 0x04}
	// refuseNotAuthorized: no credentials while anonymous access is off,
	// a client id the principal may not use, a will it may not publish.
	refuseNotAuthorized = connectRefusal{packets.ErrNotAuthorized, 0x05}
)

// OnConnect authenticates the client and decides its client id and will;
// a refusal writes the CONNACK itself (mochi v2.7.9 maps its own 0x86 to
// the 3.1.1 code 0x05, not 0x04, and sends 0x87 to 3.1.1 clients as is)
// and returns the code, which ends the connection.
func (h *authHook) OnConnect(cl *mochi.Client, pk packets.Packet) error {
	c := auth.Client{Protocol: "mqtt", Remote: cl.Net.Remote}
	p, refusal, err := h.admit(c, cl, pk)
	if err == nil {
		err, refusal = h.hold(c, p, cl), refuseNotAuthorized
	}
	if err != nil {
		h.s.refusedConnects.Add(1)
		return h.s.refuseConnect(cl, refusal)
	}
	return nil
}

// OnSessionEstablished: the session taken over (if any) is gone; a
// client that authenticated with a token is disconnected when it expires.
func (h *authHook) OnSessionEstablished(cl *mochi.Client, pk packets.Packet) {
	h.mu.Lock()
	e, ok := h.sessions[cl.ID]
	if ok && e.cl == cl && e.prev != nil {
		e.prev = nil
		h.sessions[cl.ID] = e
	}
	h.mu.Unlock()
	if ok && e.cl == cl && !e.p.Expires.IsZero() {
		time.AfterFunc(time.Until(e.p.Expires), func() { h.expire(cl) })
	}
}

// expire ends cl's connection at its token's expiry: MQTT 5 clients get
// DISCONNECT 0xA0 (maximum connect time) saying why, 3.1.1 clients (which
// have no server DISCONNECT) a closed connection. The session itself is
// kept or ended as its expiry interval says, like any other disconnect.
func (h *authHook) expire(cl *mochi.Client) {
	if cl.Closed() {
		return
	}
	h.s.log.Info("mqtt connection ended: its token expired", "client", cl.ID, "remote", cl.Net.Remote)
	if cl.Properties.ProtocolVersion >= 5 {
		code := packets.ErrMaxConnectTime
		code.Reason = "the token expired; connect again with a fresh one"
		_ = h.s.broker.DisconnectClient(cl, code)
		return
	}
	cl.Stop(auth.ErrExpired)
}

// admit authenticates cl and decides its client id and will.
func (h *authHook) admit(c auth.Client, cl *mochi.Client, pk packets.Packet) (p auth.Principal, r connectRefusal, err error) {
	a := h.s.cfg.Auth
	if a == nil {
		return auth.Principal{Method: auth.MethodAnonymous}, connectRefusal{}, nil
	}
	if p, err = h.authenticate(a, c, cl, pk); err != nil {
		if errors.Is(err, auth.ErrNoCredentials) {
			return p, refuseNotAuthorized, err
		}
		return p, refuseCredentials, err
	}
	// A client id the server assigned (the client sent none) is fresh and
	// names no other session: nothing to bind.
	if pk.Connect.ClientIdentifier != "" {
		if err = a.AuthorizeClientID(c, p, cl.ID); err != nil {
			return p, refuseNotAuthorized, err
		}
	}
	if pk.Connect.WillFlag {
		// A will is a publish: on its topic and the stream the route picks.
		err = a.Authorize(auth.Request{Client: c, Principal: p, Action: auth.Publish, Topic: pk.Connect.WillTopic,
			Stream: h.s.router.StreamFor(pk.Connect.WillTopic), ClientID: cl.ID})
		if err != nil {
			return p, refuseNotAuthorized, err
		}
	}
	return p, connectRefusal{}, nil
}

// authenticate finds cl's principal: user name and password (or a JWT in
// the password), else a verified client certificate's CN, else anonymous.
func (h *authHook) authenticate(a *auth.Authority, c auth.Client, cl *mochi.Client, pk packets.Packet) (auth.Principal, error) {
	if pk.Connect.UsernameFlag || pk.Connect.PasswordFlag {
		if !a.Configured() && a.AnonymousAllowed() {
			// Nothing to check credentials against: an open node admits
			// the client as anonymous, as mosquitto without a password
			// file does.
			return a.Anonymous(c)
		}
		return a.Password(c, string(pk.Connect.Username), pk.Connect.Password)
	}
	if cert := listen.PeerCertificate(cl.Net.Conn); cert != nil {
		return a.Certificate(c, cert)
	}
	return a.Anonymous(c)
}

// errSessionOwner refuses a client id whose session belongs to another
// principal.
var errSessionOwner = fmt.Errorf("%w: the client id's session belongs to another principal", auth.ErrDenied)

// hold makes cl, of principal p, the holder of its client id — unless the
// id's session (connected, kept for its expiry, or being connected
// concurrently) belongs to another principal: checked and set under one
// lock, so that two CONNECTs racing for an id cannot both pass.
//
// An id in the broker but no longer held is refused (its owner is not
// known) unless that client's connection has ended: then it is a session
// ending with its connection, forgotten by OnDisconnect just before the
// broker drops it, and a quick reconnect of the id must not be refused in
// that window.
func (h *authHook) hold(c auth.Client, p auth.Principal, cl *mochi.Client) error {
	old, inBroker := h.s.broker.Clients.Get(cl.ID)
	ending := inBroker && old != cl && old.Closed()
	h.mu.Lock()
	e, held := h.sessions[cl.ID]
	ok := held && e.p.Name == p.Name || !held && (!inBroker || ending)
	if ok {
		h.sessions[cl.ID] = session{cl: cl, prev: e.cl, p: p}
	}
	h.mu.Unlock()
	if ok {
		return nil
	}
	h.s.log.Warn("client id denied: its session belongs to another principal", "event", "authorization",
		"decision", "deny", "protocol", c.Protocol, "remote", c.Remote, "principal", p.String(),
		"action", "connect", "resource", "client_id:"+cl.ID)
	return errSessionOwner
}

// OnConnectAuthenticate admits the client OnConnect authenticated, and
// tells the listener that the CONNECT handshake is done.
func (h *authHook) OnConnectAuthenticate(cl *mochi.Client, pk packets.Packet) bool {
	if _, ok := h.principal(cl); !ok {
		return false
	}
	listen.Ready(cl.Net.Conn) // CONNECT accepted: the handshake deadline is met
	return true
}

// OnACLCheck answers mochi's checks: reads (a SUBSCRIBE filter, and the
// topic of every delivery) need Subscribe; writes are allowed here and
// decided in publishHook.OnPublish, after topic-alias resolution.
func (h *authHook) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	if write || cl.Net.Inline {
		return true
	}
	_, err := h.authorize(cl, auth.Subscribe, topic, "")
	return err == nil
}

// authorize decides action on topic (and, for a publish, the stream its
// route picks, which a rule listing streams must cover) for a network
// client (denials audited) and returns its principal.
func (h *authHook) authorize(cl *mochi.Client, action auth.Action, topic, stream string) (auth.Principal, error) {
	a := h.s.cfg.Auth
	p, ok := h.principal(cl)
	if !ok {
		return p, auth.ErrDenied // a connection that ended or was taken over
	}
	if a == nil {
		return p, nil
	}
	return p, a.Authorize(auth.Request{Client: auth.Client{Protocol: "mqtt", Remote: cl.Net.Remote},
		Principal: p, Action: action, Topic: topic, Stream: stream, ClientID: cl.ID})
}

// OnDisconnect forgets the principal of a session that ends with its
// connection (taken over ones are replaced by the new holder).
// A connection that ends for another cause than the client's own EOF or
// DISCONNECT is logged at info level (takeovers, refusals, write
// timeouts), so that a client's lost connection can be explained from the
// node's log.
func (h *authHook) OnDisconnect(cl *mochi.Client, err error, expire bool) {
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, packets.CodeDisconnect) && !errors.Is(err, net.ErrClosed) {
		h.s.log.Info("mqtt connection ended", "client", cl.ID, "remote", cl.Net.Remote, "cause", err.Error(),
			"taken_over", cl.IsTakenOver(), "session_kept", !expire)
	}
	if expire {
		h.forget(cl)
	}
}

// OnClientExpired forgets the principal of a kept session that expired.
func (h *authHook) OnClientExpired(cl *mochi.Client) { h.forget(cl) }

// refuseConnect answers a CONNECT with r's code (MQTT 5) or return code
// (3.1.1) and returns the code, for a hook's OnConnect to end the
// connection with.
func (s *Server) refuseConnect(cl *mochi.Client, r connectRefusal) error {
	if cl.Properties.ProtocolVersion < 5 {
		_ = cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ReasonCode: r.v3})
	} else {
		_ = s.broker.SendConnack(cl, r.code, false, nil)
	}
	return r.code
}
