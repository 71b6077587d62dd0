package cluster

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport is memberlist's NetTransport with a switch to drop gossip, for
// tests that simulate a network partition. Isolate drops everything this
// member sends and receives; Block drops packets to and from one peer's
// gossip address and refuses dials to it. Incoming TCP streams cannot be
// told apart by peer (they come from ephemeral ports), so to cut a link
// both ways block each side at the other, or isolate one member.
type Transport struct {
	*memberlist.NetTransport
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	once     sync.Once
	observe  func(stateMsg)      // sees state messages sent and received
	keyring  *memberlist.Keyring // nil: gossip is plain

	mu       sync.RWMutex
	isolated bool
	blocked  map[string]bool
}

var errBlocked = errors.New("cluster: gossip blocked by test hook")

func newTransport(nt *memberlist.NetTransport, keyring *memberlist.Keyring, observe func(stateMsg)) *Transport {
	t := &Transport{NetTransport: nt, observe: observe, keyring: keyring, packetCh: make(chan *memberlist.Packet), streamCh: make(chan net.Conn),
		done: make(chan struct{}), blocked: map[string]bool{}}
	go t.forwardPackets()
	go t.forwardStreams()
	return t
}

// Isolate drops (on) or restores (off) all of this member's gossip.
func (t *Transport) Isolate(on bool) {
	t.mu.Lock()
	t.isolated = on
	t.mu.Unlock()
}

// Block drops (on) or restores (off) gossip to and from the peer whose
// gossip address is addr (host:port).
func (t *Transport) Block(addr string, on bool) {
	t.mu.Lock()
	if on {
		t.blocked[addr] = true
	} else {
		delete(t.blocked, addr)
	}
	t.mu.Unlock()
}

func (t *Transport) drop(addr string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.isolated || (addr != "" && t.blocked[addr])
}

func (t *Transport) forwardPackets() {
	for {
		select {
		case p := <-t.NetTransport.PacketCh():
			from := ""
			if p.From != nil {
				from = p.From.String()
			}
			if t.drop(from) {
				continue
			}
			t.inspect(p.Buf)
			select {
			case t.packetCh <- p:
			case <-t.done:
				return
			}
		case <-t.done:
			return
		}
	}
}

func (t *Transport) forwardStreams() {
	for {
		select {
		case c := <-t.NetTransport.StreamCh():
			if t.drop("") {
				c.Close()
				continue
			}
			select {
			case t.streamCh <- c:
			case <-t.done:
				c.Close()
				return
			}
		case <-t.done:
			return
		}
	}
}

// WriteTo sends a packet unless gossip to addr is blocked (then it is
// silently lost, as on a real network).
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.inspect(b)
	if t.drop(addr) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteTo(b, addr)
}

// DialTimeout dials unless gossip to addr is blocked.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.drop(addr) {
		return nil, errBlocked
	}
	return t.NetTransport.DialTimeout(addr, timeout)
}

// inspect hands the state messages of packet b, sent or received, to
// observe; with a keyring the packet is read decrypted (a packet no key
// opens is not read: memberlist drops it too).
func (t *Transport) inspect(b []byte) {
	if t.keyring != nil {
		var ok bool
		if b, ok = decrypt(t.keyring.GetKeys(), b); !ok {
			return
		}
	}
	inspect(b, t.observe)
}

// PacketCh is the filtered packet channel.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// StreamCh is the filtered stream channel.
func (t *Transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown stops the forwarders and the underlying transport. The
// transport's listeners may be blocked handing a packet or connection to
// a channel the stopped forwarders no longer read, and its Shutdown waits
// for them: drain both channels until it returns, or it never would.
func (t *Transport) Shutdown() error {
	t.once.Do(func() { close(t.done) })
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-t.NetTransport.PacketCh():
			case c := <-t.NetTransport.StreamCh():
				if c != nil {
					c.Close()
				}
			case <-stop:
				return
			}
		}
	}()
	err := t.NetTransport.Shutdown()
	close(stop)
	<-drained
	return err
}

// WriteToAddress is WriteTo for memberlist's node-aware path.
func (t *Transport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, addr.Addr)
}

// DialAddressTimeout is DialTimeout for memberlist's node-aware path.
func (t *Transport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(addr.Addr, timeout)
}
