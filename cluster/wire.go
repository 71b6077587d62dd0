package cluster

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// memberlist keeps a member's suspect state to itself: its events report
// only join, leave (dead and left alike) and update, and Members() neither
// marks suspects nor can be read without racing its updates. So the
// transport reads the state messages on the wire, both those this member
// sends (its own suspicions and the ones it relays) and those it receives:
// suspect, alive (refutes clear suspicion) and dead (a dead message from
// the node itself is a graceful leave). The message layout is memberlist's
// protocol (versions 2-5), which is append-only by its own rules.
// Compression is turned off in Open so packets are plain, or, with a
// gossip key, plain once decrypted (decrypt).

// memberlist's message types (net.go); the numbers are protocol.
const (
	wireSuspect  = 3
	wireAlive    = 4
	wireDead     = 5
	wireCompound = 7
	wireHasCRC   = 12
)

// wireMsg is the common part of memberlist's suspect, alive and dead
// messages (msgpack maps keyed by field name).
type wireMsg struct {
	Incarnation uint32
	Node        string
	From        string
}

// stateMsg is a decoded state message.
type stateMsg struct {
	kind byte // wireSuspect, wireAlive or wireDead
	wireMsg
}

// inspect calls f for each state message in a gossip packet.
func inspect(buf []byte, f func(stateMsg)) {
	if len(buf) >= 5 && buf[0] == wireHasCRC {
		buf = buf[5:]
	}
	inspectCommand(buf, f, 0)
}

func inspectCommand(buf []byte, f func(stateMsg), depth int) {
	if len(buf) < 1 || depth > 2 {
		return
	}
	kind, body := buf[0], buf[1:]
	switch kind {
	case wireCompound:
		if len(body) < 1 {
			return
		}
		n := int(body[0])
		body = body[1:]
		if len(body) < 2*n {
			return
		}
		lens := body[:2*n]
		body = body[2*n:]
		for i := range n {
			l := int(binary.BigEndian.Uint16(lens[2*i:]))
			if len(body) < l {
				return
			}
			inspectCommand(body[:l], f, depth+1)
			body = body[l:]
		}
	case wireSuspect, wireAlive, wireDead:
		var m wireMsg
		var h codec.MsgpackHandle
		if err := codec.NewDecoder(bytes.NewReader(body), &h).Decode(&m); err != nil || m.Node == "" {
			return
		}
		f(stateMsg{kind: kind, wireMsg: m})
	}
}

// decrypt opens a packet memberlist encrypted (security.go of memberlist,
// no label): encryption version 0 (AES-GCM, PKCS7 padding) or 1 (no
// padding), a 12-byte nonce, the sealed message. It does not modify buf.
func decrypt(keys [][]byte, buf []byte) ([]byte, bool) {
	const nonceSize, tagSize = 12, 16
	if len(buf) < 1+nonceSize+tagSize || buf[0] > 1 {
		return nil, false
	}
	for _, key := range keys {
		block, err := aes.NewCipher(key)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		plain, err := gcm.Open(nil, buf[1:1+nonceSize], buf[1+nonceSize:], nil)
		if err != nil {
			continue
		}
		if buf[0] == 0 { // PKCS7 padding
			n := len(plain)
			if n == 0 || int(plain[n-1]) > n {
				return nil, false
			}
			plain = plain[:n-int(plain[n-1])]
		}
		return plain, true
	}
	return nil, false
}
