package peer

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// The hello (protocol version 2). Every link opens with it, under the
// hello deadline, each frame at most maxHelloFrame bytes, before any
// request is read:
//
//	dialer   -> listener  hello  version 2, auth, nonce D (32 bytes), dialer's node id
//	listener -> dialer    hello  version 2, auth, nonce L (32 bytes), proof L, listener's node id
//	dialer   -> listener  hello  proof D                         (auth = HMAC only)
//
// auth is authNone or authHMAC. With a cluster secret, proof L =
// HMAC-SHA256(secret, "tributary peer v2 listener" | D | L | dialer id |
// listener id) and proof D the same with "dialer": each side proves that it
// holds the secret over the other side's fresh nonce, so the secret never
// crosses the wire, a recorded hello replayed on a new connection fails
// (the nonce it answered is not the new one), a proof cannot be reflected
// (the roles are in the MAC), and the ids cannot be swapped in between.
// Proofs are compared in constant time (hmac.Equal). Both sides must agree
// on auth: a node with a secret refuses one without, and the other way
// round. Under mutual TLS (Config.ServerTLS/ClientTLS) the hello runs
// inside the TLS connection, after the certificates were verified; a
// secret may be set as well.
//
// A refused hello closes the connection before anything else is read from
// it; it is counted (Stats.HandshakesRefused) and logged at warn level,
// at most once every few seconds.

const (
	protoVersion = 2
	nonceLen     = 32
	proofLen     = sha256.Size

	authNone byte = 0
	authHMAC byte = 1
)

// ErrRefused wraps every hello refusal (wrong or missing proof, auth
// mismatch, old protocol version, bad certificate).
var ErrRefused = errors.New("peer: hello refused")

type hello struct {
	auth  byte
	nonce []byte
	proof []byte // the listener's, in its hello only
	node  string
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	rand.Read(b)
	return b
}

// encodeHello: version, auth, nonce, proof length and proof, node id.
func encodeHello(h hello) []byte {
	b := append([]byte{protoVersion, h.auth}, h.nonce...)
	b = append(b, byte(len(h.proof)))
	b = append(b, h.proof...)
	return append(b, h.node...)
}

// decodeHello decodes a hello; every error wraps ErrRefused.
func decodeHello(b []byte) (hello, error) {
	if len(b) < 1 {
		return hello{}, fmt.Errorf("%w: empty hello", ErrRefused)
	}
	if b[0] != protoVersion {
		return hello{}, fmt.Errorf("%w: hello of protocol version %d, this node speaks %d (upgrade every node of the cluster to the same release)",
			ErrRefused, b[0], protoVersion)
	}
	if len(b) < 2+nonceLen+1 {
		return hello{}, fmt.Errorf("%w: short hello", ErrRefused)
	}
	h := hello{auth: b[1], nonce: b[2 : 2+nonceLen]}
	rest := b[2+nonceLen:]
	n := int(rest[0])
	rest = rest[1:]
	if n != 0 && n != proofLen || len(rest) < n {
		return hello{}, fmt.Errorf("%w: bad proof length in hello", ErrRefused)
	}
	h.proof, rest = rest[:n], rest[n:]
	if len(rest) == 0 {
		return hello{}, fmt.Errorf("%w: hello without a node id", ErrRefused)
	}
	h.node = string(rest)
	return h, nil
}

// proof is the HMAC one side sends: role is "dialer" or "listener".
func proof(secret []byte, role string, dialerNonce, listenerNonce []byte, dialer, listener string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tributary peer v2 " + role))
	m.Write(dialerNonce)
	m.Write(listenerNonce)
	// Length-prefixed ids: "ab"+"c" and "a"+"bc" differ.
	m.Write(binary.BigEndian.AppendUint16(nil, uint16(len(dialer))))
	m.Write([]byte(dialer))
	m.Write([]byte(listener))
	return m.Sum(nil)
}

func (p *Peer) auth() byte {
	if len(p.cfg.Secret) > 0 {
		return authHMAC
	}
	return authNone
}

// checkAuth refuses a hello whose auth does not match this node's.
func (p *Peer) checkAuth(remote byte) error {
	switch {
	case remote == p.auth():
		return nil
	case remote == authNone:
		return fmt.Errorf("%w: the other node has no cluster secret (set the same cluster.secret on every node)", ErrRefused)
	case p.auth() == authNone:
		return fmt.Errorf("%w: the other node proves a cluster secret and this one has none (set the same cluster.secret on every node)", ErrRefused)
	default:
		return fmt.Errorf("%w: unknown hello auth %d", ErrRefused, remote)
	}
}

// acceptHello runs the listener's side of the hello on r/w; it returns the
// dialer's node id once the dialer is authenticated.
func (p *Peer) acceptHello(r *bufio.Reader, w *connWriter) (string, error) {
	f, err := readFrameMax(r, maxHelloFrame)
	if err != nil {
		return "", err
	}
	if f.kind != kindHello {
		return "", fmt.Errorf("%w: first frame of kind %d, not a hello", ErrRefused, f.kind)
	}
	d, err := decodeHello(f.payload)
	if err != nil {
		return "", err
	}
	mine := hello{auth: p.auth(), nonce: newNonce(), node: p.cfg.NodeID}
	if err := p.checkAuth(d.auth); err != nil {
		// Answer (without a proof) so that the dialer can say why too.
		w.write(kindHello, 0, 0, encodeHello(mine))
		return d.node, err
	}
	if mine.auth == authHMAC {
		mine.proof = proof(p.cfg.Secret, "listener", d.nonce, mine.nonce, d.node, p.cfg.NodeID)
	}
	if err := w.write(kindHello, 0, 0, encodeHello(mine)); err != nil {
		return d.node, err
	}
	if mine.auth == authHMAC {
		f, err := readFrameMax(r, maxHelloFrame)
		if err != nil {
			return d.node, fmt.Errorf("%w: no proof of the cluster secret: %v", ErrRefused, err)
		}
		want := proof(p.cfg.Secret, "dialer", d.nonce, mine.nonce, d.node, p.cfg.NodeID)
		if f.kind != kindHello || !hmac.Equal(f.payload, want) {
			return d.node, fmt.Errorf("%w: wrong proof of the cluster secret", ErrRefused)
		}
	}
	return d.node, nil
}

// dialHello runs the dialer's side; it returns the listener's node id once
// the listener is authenticated (and, with a secret, has been sent this
// node's proof).
func (p *Peer) dialHello(r *bufio.Reader, w *connWriter) (string, error) {
	mine := hello{auth: p.auth(), nonce: newNonce(), node: p.cfg.NodeID}
	if err := w.write(kindHello, 0, 0, encodeHello(mine)); err != nil {
		return "", err
	}
	f, err := readFrameMax(r, maxHelloFrame)
	if err != nil {
		return "", fmt.Errorf("hello: %w", err)
	}
	if f.kind != kindHello {
		return "", fmt.Errorf("%w: answer of kind %d, not a hello", ErrRefused, f.kind)
	}
	l, err := decodeHello(f.payload)
	if err != nil {
		return "", fmt.Errorf("hello: %w", err)
	}
	if err := p.checkAuth(l.auth); err != nil {
		return l.node, err
	}
	if mine.auth == authHMAC {
		if !hmac.Equal(l.proof, proof(p.cfg.Secret, "listener", mine.nonce, l.nonce, p.cfg.NodeID, l.node)) {
			return l.node, fmt.Errorf("%w: the other node's proof of the cluster secret is wrong", ErrRefused)
		}
		if err := w.write(kindHello, 0, 0, proof(p.cfg.Secret, "dialer", mine.nonce, l.nonce, p.cfg.NodeID, l.node)); err != nil {
			return l.node, err
		}
	}
	return l.node, nil
}

// refused counts a refused hello and logs it, at most every refusedLogEvery.
func (p *Peer) refused(remote net.Addr, node string, err error) {
	p.stats.refused.Add(1)
	now := time.Now().UnixNano()
	last := p.lastRefusedLog.Load()
	if now-last < int64(refusedLogEvery) || !p.lastRefusedLog.CompareAndSwap(last, now) {
		return
	}
	p.log.Warn("peer link refused", "remote", remote.String(), "node", node, "err", err,
		"refused_total", p.stats.refused.Load())
}

// refusedLogEvery spaces the refusal log lines (a variable for tests).
var refusedLogEvery = 5 * time.Second
