package cloudmqtt

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/cloudmqtt/wire"
	"github.com/tributary-io/tributary/listen"
)

// Reason codes the listener sends.
const (
	codeSuccess          = 0x00
	codeUnspecified      = 0x80
	codeMalformed        = 0x81
	codeProtocolError    = 0x82
	codeImplementation   = 0x83
	codeBadCredentials   = 0x86
	codeNotAuthorized    = 0x87
	codeServerBusy       = 0x89
	codeShuttingDown     = 0x8B
	codeBadAuthMethod    = 0x8C
	codeKeepAliveTimeout = 0x8D
	codeTakenOver        = 0x8E
	codeFilterInvalid    = 0x8F
	codeNotFound         = 0x92 // packet identifier not found
	codePacketTooLarge   = 0x95
	codeQuotaExceeded    = 0x97
	codeSharedNotSupp    = 0x9E
	codeMaxConnectTime   = 0xA0
	codeWildcardNotSupp  = 0xA2
)

// readOnly is the reason string of a refused PUBLISH.
const readOnly = "the cloud MQTT listener is read-only: it serves subscribers from the stream tables; publish to an edge node"

// conn is one client connection.
type conn struct {
	s       *Server
	nc      net.Conn
	remote  string
	version byte // 3, 4 (3.1.1) or 5

	wmu    sync.Mutex // one packet at a time
	closed bool

	maxOut   uint32 // the client's Maximum Packet Size (0: none)
	endOnce  sync.Once
	endCode  byte
	endWhy   string
	sess     *session
	stopOnce sync.Once
}

// serveConn runs one connection to its end.
func (s *Server) serveConn(nc net.Conn) {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	defer nc.Close()
	br := bufio.NewReaderSize(nc, 4096)
	pk, err := wire.ReadPacket(br, s.cfg.MaxPacketBytes, 0)
	if err != nil {
		s.log.Debug("cloud mqtt: bad first packet", "remote", c.remote, "err", err)
		return
	}
	se, ok := c.connect(pk)
	if !ok {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.end(codeShuttingDown, "server shutting down")
		se.finish()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	listen.Ready(nc)
	if exp := se.p.Expires; !exp.IsZero() {
		// A token-authenticated connection ends with its token.
		t := time.AfterFunc(time.Until(exp), func() { c.end(codeMaxConnectTime, "the token expired; connect again with a fresh one") })
		defer t.Stop()
	}
	ctx, cancel := context.WithCancel(s.ctx)
	pumped := make(chan struct{})
	go func() { defer close(pumped); se.pump(ctx) }()
	err = c.readLoop(br, pk.Connect.Keepalive)
	cancel()
	<-pumped
	se.finish()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("cloud mqtt client ended", "client", se.id, "remote", c.remote, "err", err)
	}
}

// connect answers CONNECT: authenticates, takes the session over, loads
// it and sends CONNACK. ok false: refused (answered).
func (c *conn) connect(pk packets.Packet) (*session, bool) {
	s := c.s
	c.version = pk.ProtocolVersion
	if code := pk.ConnectValidate(); code != packets.CodeSuccess {
		c.refuse(code.Code, 0x01, code.Reason)
		return nil, false
	}
	if c.version == 5 {
		c.maxOut = pk.Properties.MaximumPacketSize
	}
	ac := auth.Client{Protocol: "mqtt", Remote: c.remote}
	p, err := c.authenticate(ac, pk)
	if err != nil {
		if errors.Is(err, auth.ErrNoCredentials) {
			c.refuse(codeNotAuthorized, 0x05, "credentials required")
		} else {
			c.refuse(codeBadCredentials, 0x04, "bad user name or password")
		}
		return nil, false
	}
	if pk.Connect.WillFlag {
		c.refuse(codeNotAuthorized, 0x05, "a will is a publish: "+readOnly)
		return nil, false
	}
	id := pk.Connect.ClientIdentifier
	assigned := ""
	if id == "" {
		if !pk.Connect.Clean && c.version < 5 {
			c.refuse(0x85, 0x02, "a persistent session needs a client id")
			return nil, false
		}
		b := make([]byte, 8)
		rand.Read(b)
		id = "cloud-mqtt-" + hex.EncodeToString(b)
		assigned = id
	} else if s.cfg.Auth != nil {
		if err := s.cfg.Auth.AuthorizeClientID(ac, p, id); err != nil {
			c.refuse(codeNotAuthorized, 0x05, "client id not allowed")
			return nil, false
		}
	}
	// Session expiry: MQTT 5 says, 3.1.1 clean session false means "kept".
	var expiry time.Duration
	switch {
	case c.version == 5:
		if pk.Properties.SessionExpiryIntervalFlag {
			expiry = time.Duration(pk.Properties.SessionExpiryInterval) * time.Second
		}
	case !pk.Connect.Clean:
		expiry = s.cfg.MaxSessionExpiry
	}
	capped := false
	if expiry > s.cfg.MaxSessionExpiry {
		expiry, capped = s.cfg.MaxSessionExpiry, true
	}
	se := newSession(s, c, id, p, expiry)
	if rm := pk.Properties.ReceiveMaximum; c.version == 5 && rm > 0 {
		se.maxIn = min(se.maxIn, int(rm)) // the client's Receive Maximum
	}
	// The id's session must be this principal's before anything is ended
	// or deleted (Clean Start included); then one connection per client
	// id on this server: the newest wins.
	old, err := s.take(se)
	if err == nil {
		if old != nil {
			old.conn.end(codeTakenOver, "session taken over")
			<-old.done
		}
		err = se.load(pk.Connect.Clean)
	}
	if err != nil {
		if errors.Is(err, errSessionOwner) {
			s.log.Warn("client id denied: its session belongs to another principal", "event", "authorization",
				"decision", "deny", "protocol", "mqtt", "remote", c.remote, "principal", p.String(),
				"action", "connect", "resource", "client_id:"+id)
			c.refuse(codeNotAuthorized, 0x05, "the client id's session belongs to another principal")
		} else {
			s.log.Warn("cloud mqtt: load session", "client", id, "err", err)
			c.refuse(codeServerBusy, 0x03, "session store unavailable")
		}
		se.finish()
		return nil, false
	}
	present := se.present
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: c.version,
		SessionPresent: present, ReasonCode: codeSuccess}
	if c.version == 5 {
		pr := &ack.Properties
		pr.AssignedClientID = assigned
		// Stored subscriptions the rules in force refuse have no SUBACK
		// to be refused in: the CONNACK names them.
		for _, f := range se.dropped {
			pr.User = append(pr.User, packets.UserProperty{Key: "subscription-dropped", Val: f})
		}
		pr.MaximumQos, pr.MaximumQosFlag = 1, true
		pr.RetainAvailable, pr.RetainAvailableFlag = 0, true
		pr.SharedSubAvailable, pr.SharedSubAvailableFlag = 1, true
		pr.WildcardSubAvailable, pr.WildcardSubAvailableFlag = 1, true
		pr.SubIDAvailable, pr.SubIDAvailableFlag = 1, true
		pr.MaximumPacketSize = uint32(s.cfg.MaxPacketBytes)
		pr.ReceiveMaximum = 1 // publishes are refused anyway
		if capped {
			pr.SessionExpiryInterval, pr.SessionExpiryIntervalFlag = uint32(expiry/time.Second), true
		}
	}
	if err := c.write(&ack); err != nil {
		se.finish()
		return nil, false
	}
	return se, true
}

// authenticate finds the client's principal: user name and password (a
// JWT in the password), else a verified client certificate's CN, else
// anonymous — the edge listener's order.
func (c *conn) authenticate(ac auth.Client, pk packets.Packet) (auth.Principal, error) {
	a := c.s.cfg.Auth
	if a == nil {
		return auth.Principal{Method: auth.MethodAnonymous}, nil
	}
	if pk.Connect.UsernameFlag || pk.Connect.PasswordFlag {
		if !a.Configured() && a.AnonymousAllowed() {
			return a.Anonymous(ac)
		}
		return a.Password(ac, string(pk.Connect.Username), pk.Connect.Password)
	}
	if cert := listen.PeerCertificate(c.nc); cert != nil {
		return a.Certificate(ac, cert)
	}
	return a.Anonymous(ac)
}

// refuse sends a refusing CONNACK: code to MQTT 5 clients, v3 to older.
func (c *conn) refuse(code, v3 byte, why string) {
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: c.version, ReasonCode: code}
	if c.version < 5 {
		ack.ReasonCode = v3
	} else {
		ack.Properties.ReasonString = why
	}
	c.write(&ack)
	c.s.log.Info("cloud mqtt connect refused", "remote", c.remote, "reason", why)
}

// write sends pk (with the listener's write deadline).
func (c *conn) write(pk *packets.Packet) error {
	b, err := wire.Encode(pk)
	if err != nil {
		return err
	}
	return c.writeBytes(b)
}

// writeBytes writes encoded packets (with the listener's write deadline).
func (c *conn) writeBytes(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	_, err := c.nc.Write(b)
	return err
}

// end closes the connection, telling an MQTT 5 client why.
func (c *conn) end(code byte, why string) {
	c.endOnce.Do(func() {
		if c.version == 5 && code != codeSuccess {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: 5, ReasonCode: code}
			pk.Properties.ReasonString = why
			c.write(&pk)
		}
		c.wmu.Lock()
		c.closed = true
		c.wmu.Unlock()
		c.nc.Close()
	})
}

// readLoop handles the client's packets until it disconnects or breaks
// the protocol.
func (c *conn) readLoop(br *bufio.Reader, keepalive uint16) error {
	s, se := c.s, c.sess
	for {
		if keepalive > 0 {
			c.nc.SetReadDeadline(time.Now().Add(time.Duration(keepalive) * 1500 * time.Millisecond))
		}
		pk, err := wire.ReadPacket(br, s.cfg.MaxPacketBytes, c.version)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				c.end(codeKeepAliveTimeout, "keep alive timeout")
			case errors.Is(err, wire.ErrTooLarge):
				c.end(codePacketTooLarge, err.Error())
			case errors.Is(err, wire.ErrMalformed):
				c.end(codeMalformed, err.Error())
			default:
				c.end(codeSuccess, "")
			}
			return err
		}
		switch pk.FixedHeader.Type {
		case packets.Publish:
			if err := c.refusePublish(pk); err != nil {
				return err
			}
		case packets.Puback:
			s.m.acks.Inc()
			se.ack(pk.PacketID)
		case packets.Pubrel:
			// Only after a PUBREC, which this listener sends with 0x87.
			ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, ProtocolVersion: c.version,
				PacketID: pk.PacketID, ReasonCode: codeNotFound}
			if err := c.write(&ack); err != nil {
				return err
			}
		case packets.Pubrec, packets.Pubcomp:
			c.end(codeProtocolError, "this listener sends no QoS 2 messages")
			return errors.New("pubrec/pubcomp from a client")
		case packets.Subscribe:
			if err := se.subscribe(pk); err != nil {
				return err
			}
		case packets.Unsubscribe:
			if err := se.unsubscribe(pk); err != nil {
				return err
			}
		case packets.Pingreq:
			if err := c.write(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingresp}, ProtocolVersion: c.version}); err != nil {
				return err
			}
		case packets.Disconnect:
			if c.version == 5 && pk.Properties.SessionExpiryIntervalFlag {
				if se.expiry == 0 && pk.Properties.SessionExpiryInterval > 0 {
					c.end(codeProtocolError, "session expiry set at DISCONNECT after 0 at CONNECT")
					return errors.New("session expiry changed from 0")
				}
				se.setExpiry(min(time.Duration(pk.Properties.SessionExpiryInterval)*time.Second, s.cfg.MaxSessionExpiry))
			}
			c.end(codeSuccess, "")
			return nil
		case packets.Auth:
			c.end(codeBadAuthMethod, "enhanced authentication is not supported")
			return errors.New("AUTH packet")
		default:
			c.end(codeProtocolError, fmt.Sprintf("unexpected packet type %d", pk.FixedHeader.Type))
			return errors.New("unexpected packet")
		}
	}
}

// refusePublish answers a PUBLISH: MQTT 5 QoS 1 and 2 get PUBACK / PUBREC
// 0x87 with the reason string and the connection stays; a QoS 0 publish
// (which has no answer) and any 3.1.1 publish end the connection, with
// DISCONNECT 0x87 for MQTT 5.
func (c *conn) refusePublish(pk packets.Packet) error {
	c.s.m.refused.Inc()
	if c.version == 5 && pk.FixedHeader.Qos > 0 {
		t := byte(packets.Puback)
		if pk.FixedHeader.Qos == 2 {
			t = packets.Pubrec
		}
		ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: t}, ProtocolVersion: 5, PacketID: pk.PacketID,
			ReasonCode: codeNotAuthorized}
		ack.Properties.ReasonString = readOnly
		return c.write(&ack)
	}
	c.end(codeNotAuthorized, readOnly)
	return errors.New("publish to the read-only listener")
}
