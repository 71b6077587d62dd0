package peer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// TestHeartbeatDetectsSilentCut: a link whose traffic is silently
// blackholed (a proxy that holds every byte, no reset, no FIN — a pulled
// cable) is declared dead within 5 s with its cause logged once and
// counted; its pending request fails, OnLinkDown hears of it, Go fails at
// once while it is down, the listener side closes its end too; after the
// heal the link is up again within 5 s without any request dialing it.
func TestHeartbeatDetectsSilentCut(t *testing.T) {
	var logs testkit.SyncBuffer
	a, err := Listen(Config{NodeID: "a", Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	b := listenPeer(t, "b")
	b.Handle(43, func(_ string, _ []byte, reply func([]byte, error)) {}) // never answers
	proxy := testkit.NewProxy(t, b.Addr())

	type down struct {
		node string
		err  error
		at   time.Time
	}
	downs := make(chan down, 16)
	a.OnLinkDown(func(node string, err error) { downs <- down{node, err, time.Now()} })

	l := a.Link("b", proxy.Addr())
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	cut := time.Now()
	pending := make(chan error, 1)
	l.Go(43, nil, func(_ []byte, err error) { pending <- err })

	var d down
	select {
	case d = <-downs:
	case <-time.After(15 * time.Second):
		t.Fatal("no OnLinkDown within 15 s of a silent cut")
	}
	if took := d.at.Sub(cut); took > 5*time.Second || d.node != "b" || !strings.Contains(d.err.Error(), "no frame for 4s") {
		t.Fatalf("link down after %s: node %q, %v; want b, no frame for 4s, within 5s", took, d.node, d.err)
	}
	select {
	case err := <-pending:
		if !errors.Is(err, ErrLinkDown) {
			t.Fatalf("pending request: %v, want ErrLinkDown", err)
		}
	default:
		t.Fatal("the pending request was not failed before OnLinkDown ran")
	}
	if up, since, _ := l.Health(); up || since.IsZero() {
		t.Fatalf("health up=%v since %v after the link died", up, since)
	}
	if st := a.Stats(); st.LinkTimeouts != 1 || st.LinkFailures != 1 {
		t.Fatalf("stats %+v, want one link timeout and one failure", st)
	}
	if n := strings.Count(logs.String(), "peer link to b down: no frame for 4s"); n != 1 {
		t.Fatalf("the cut logged %d times:\n%s", n, logs.String())
	}
	// While it is down (and redialing through the cut), Go fails at once.
	returned := false
	var goErr error
	l.Go(TypePing, nil, func(_ []byte, err error) {
		if !returned {
			goErr = err
		}
	})
	returned = true
	if !errors.Is(goErr, ErrLinkDown) {
		t.Fatalf("Go on a link that is down: %v, want ErrLinkDown before it returns", goErr)
	}
	// The listener closes its silent end too.
	testkit.Eventually(t, 10*time.Second, "b to close the silent incoming connection", func() bool { return b.Stats().LinkTimeouts == 1 })

	proxy.Heal()
	healed := time.Now()
	testkit.Eventually(t, 10*time.Second, "the link to redial by itself after the heal", func() bool { up, _, _ := l.Health(); return up })
	if took := time.Since(healed); took > 5*time.Second {
		t.Fatalf("link up %s after the heal, want within 5s", took)
	}
	t.Logf("down %s after the cut, up %s after the heal", d.at.Sub(cut).Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "peer link to b up again") {
		t.Fatalf("the heal not logged:\n%s", logs.String())
	}
}

// TestLinkSocketOptions: both ends of a link have TCP keepalive on and
// TCP_USER_TIMEOUT set to the link timeout (Linux), so that unacknowledged
// writes fail within the heartbeat's bound.
func TestLinkSocketOptions(t *testing.T) {
	a, b := listenPeer(t, "a"), listenPeer(t, "b")
	l := a.Link("b", b.Addr())
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	c := l.conn.w.c
	l.mu.Unlock()
	tc := tcpConn(c)
	if tc == nil {
		t.Fatalf("no TCP connection under %T", c)
	}
	got, err := userTimeout(tc)
	if err != nil {
		t.Fatal(err)
	}
	if got != DefaultLinkTimeout && !(got == 0 && !isLinux) {
		t.Fatalf("TCP_USER_TIMEOUT %s, want %s", got, DefaultLinkTimeout)
	}
	var conns []net.Conn
	b.mu.Lock()
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("b tracks %d connections", len(conns))
	}
	if got, err := userTimeout(tcpConn(conns[0])); err != nil || got != DefaultLinkTimeout && isLinux {
		t.Fatalf("listener side TCP_USER_TIMEOUT %s, %v", got, err)
	}
}

// TestDownKeepsRedialing: a link that broke and then went unused stops
// redialing; asking Down (as admission does before holding a publish
// back) counts as use, so the link comes up again after the heal even
// though no request was sent on it.
func TestDownKeepsRedialing(t *testing.T) {
	defer func(d time.Duration) { linkRedialIdle = d }(linkRedialIdle)
	linkRedialIdle = 200 * time.Millisecond
	a, b := listenPeer(t, "a"), listenPeer(t, "b")
	proxy := testkit.NewProxy(t, b.Addr())
	l := a.Link("b", proxy.Addr())
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	testkit.Eventually(t, 10*time.Second, "the link to be declared dead", func() bool { return a.Stats().LinkTimeouts == 1 })
	testkit.Eventually(t, 10*time.Second, "the unused link to stop redialing", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.redialing
	})
	proxy.Heal()
	if !l.Down() {
		t.Fatal("Down false for a link whose connection died")
	}
	testkit.Eventually(t, 5*time.Second, "Down to bring the link up after the heal", func() bool { return !l.Down() })
	if up, _, _ := l.Health(); !up {
		t.Fatal("link not up")
	}
}

// TestKickRedialsAtOnce: a link that is down and redialing dials again
// as soon as Kick says its node is back (gossip heard from it), not at
// its next redial (made an hour away here), and OnLinkUp hears of the
// link being up again.
func TestKickRedialsAtOnce(t *testing.T) {
	lo, hi := linkRedialMin, linkRedialMax
	t.Cleanup(func() { linkRedialMin, linkRedialMax = lo, hi }) // after the peers' own cleanups: their redial loops read them
	linkRedialMin, linkRedialMax = time.Hour, time.Hour
	a, b := listenPeer(t, "a"), listenPeer(t, "b")
	ups := make(chan string, 4)
	a.OnLinkUp(func(node string) { ups <- node })
	proxy := testkit.NewProxy(t, b.Addr())
	l := a.Link("b", proxy.Addr())
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-ups:
		t.Fatalf("OnLinkUp heard %q for a link's first connection", n)
	default:
	}
	proxy.Cut()
	testkit.Eventually(t, 15*time.Second, "the link to be declared dead", func() bool { return a.Stats().LinkTimeouts == 1 })
	proxy.Heal()
	a.Kick("b")
	select {
	case n := <-ups:
		if n != "b" {
			t.Fatalf("OnLinkUp heard %q, want b", n)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the kicked link did not come up within 15 s (its next redial is an hour away)")
	}
	if up, _, _ := l.Health(); !up {
		t.Fatal("OnLinkUp ran but the link is not up")
	}
	a.Kick("b") // a link that is up is left alone
	if _, err := l.Call(ctx(t), TypePing, nil); err != nil {
		t.Fatal(err)
	}
}
