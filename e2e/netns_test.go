package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A netSite is a private network of Linux network namespaces for one
// test: a "switch" namespace holding a bridge, and one namespace per host
// joined to it by a veth pair, with an address in nsSubnet that exists
// only inside those namespaces (the root namespace has no route there).
// Every host namespace has an nftables table whose set "cut" lists the
// addresses whose frames its input hook drops: a cut puts each side's
// address in the other's set, so frames are dropped silently (no reset,
// no error to the sender), and a heal deletes them again.
//
// Names are nsPrefix-<pid>-<n>-<host>; the namespaces of an earlier run
// whose process is gone are removed first, and a site's are removed when
// its test ends (after the processes in them, which the test started
// later and so are cleaned up first).
type netSite struct {
	t     *testing.T
	name  string // nsPrefix-<pid>-<n>
	sw    string // the switch namespace
	mu    sync.Mutex
	hosts map[string]*nsHost
	order []string
}

// nsHost is one host of a netSite.
type nsHost struct {
	name, ns, ip string
}

const (
	nsPrefix = "tribe2e"
	nsSubnet = "10.201.7" // a /24; hosts are .1 .. .254
)

var netSiteSeq atomic.Int32

// newNetSite creates the switch and one namespace per host (addresses
// nsSubnet.1, .2, ... in the order given). It fails the test, saying why,
// when namespaces cannot be made (not root, no ip or nft binary, a
// kernel without network namespaces, veth, bridges or nf_tables).
func newNetSite(t *testing.T, hosts ...string) *netSite {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the partition tests need root to create network namespaces (ip netns add); running as uid %d", os.Geteuid())
	}
	for _, b := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("the partition tests need %s (Debian packages iproute2 and nftables; make deps installs them): %v", b, err)
		}
	}
	removeStaleNamespaces(t)
	s := &netSite{t: t, name: fmt.Sprintf("%s-%d-%d", nsPrefix, os.Getpid(), netSiteSeq.Add(1)), hosts: map[string]*nsHost{}}
	s.sw = s.name + "-sw"
	t.Cleanup(s.destroy)
	s.must("ip", "netns", "add", s.sw)
	s.must("ip", "-n", s.sw, "link", "add", "br0", "type", "bridge")
	s.must("ip", "-n", s.sw, "link", "set", "br0", "up")
	for _, h := range hosts {
		s.addHost(h)
	}
	return s
}

// addHost creates host h's namespace, its veth pair to the switch, its
// address and its cut table.
func (s *netSite) addHost(h string) *nsHost {
	s.mu.Lock()
	n := len(s.order) + 1
	host := &nsHost{name: h, ns: s.name + "-" + h, ip: fmt.Sprintf("%s.%d", nsSubnet, n)}
	s.hosts[h] = host
	s.order = append(s.order, h)
	s.mu.Unlock()
	port := "p" + strconv.Itoa(n)
	s.must("ip", "netns", "add", host.ns)
	s.must("ip", "-n", s.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host.ns)
	s.must("ip", "-n", s.sw, "link", "set", port, "master", "br0", "up")
	s.must("ip", "-n", host.ns, "addr", "add", host.ip+"/24", "dev", "eth0")
	s.must("ip", "-n", host.ns, "link", "set", "eth0", "up")
	s.must("ip", "-n", host.ns, "link", "set", "lo", "up")
	s.nft(host, "add table inet tribcut")
	s.nft(host, "add set inet tribcut cut { type ipv4_addr; }")
	s.nft(host, "add chain inet tribcut in { type filter hook input priority -10; policy accept; }")
	s.nft(host, "add rule inet tribcut in ip saddr @cut drop")
	return host
}

func (s *netSite) host(h string) *nsHost {
	s.mu.Lock()
	defer s.mu.Unlock()
	host := s.hosts[h]
	if host == nil {
		s.t.Fatalf("no host %q in the site", h)
	}
	return host
}

// cut drops, silently and in both directions, every frame between a and
// each of others.
func (s *netSite) cut(a string, others ...string) {
	s.t.Helper()
	ha := s.host(a)
	for _, b := range others {
		hb := s.host(b)
		s.nft(ha, "add element inet tribcut cut { "+hb.ip+" }")
		s.nft(hb, "add element inet tribcut cut { "+ha.ip+" }")
	}
}

// heal undoes cut(a, others...).
func (s *netSite) heal(a string, others ...string) {
	s.t.Helper()
	ha := s.host(a)
	for _, b := range others {
		hb := s.host(b)
		s.nft(ha, "delete element inet tribcut cut { "+hb.ip+" }")
		s.nft(hb, "delete element inet tribcut cut { "+ha.ip+" }")
	}
}

// others is every host but the ones named.
func (s *netSite) others(but ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, h := range s.order {
		skip := false
		for _, b := range but {
			skip = skip || b == h
		}
		if !skip {
			out = append(out, h)
		}
	}
	return out
}

func (s *netSite) nft(h *nsHost, rule string) {
	s.t.Helper()
	s.must("ip", "netns", "exec", h.ns, "nft", rule)
}

// must runs a command of the plumbing and fails the test with its output
// when it fails.
func (s *netSite) must(argv ...string) {
	s.t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		s.t.Fatalf("network namespaces: %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// destroy deletes the site's namespaces (their veth pairs go with them).
func (s *netSite) destroy() {
	s.mu.Lock()
	names := []string{s.sw}
	for _, h := range s.order {
		names = append(names, s.hosts[h].ns)
	}
	s.mu.Unlock()
	for _, n := range names {
		if out, err := exec.Command("ip", "netns", "del", n).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			s.t.Logf("ip netns del %s: %v: %s", n, err, out)
		}
	}
}

// removeStaleNamespaces deletes the namespaces nsPrefix-<pid>-... of
// test processes that no longer run (a test binary killed before its
// cleanup), after killing what still runs in them.
func removeStaleNamespaces(t *testing.T) {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix+"-")
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			continue // another run's, still going
		}
		// Nodes that run's test started and never ended (it was killed).
		out, _ := exec.Command("ip", "netns", "pids", e.Name()).Output()
		for _, f := range strings.Fields(string(out)) {
			if p, err := strconv.Atoi(f); err == nil {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			t.Logf("removing stale namespace %s: %v: %s", e.Name(), err, out)
		}
	}
}

// inNS runs f on an OS thread switched into namespace ns's network
// namespace. The thread is never switched back: its goroutine exits
// locked, so the runtime ends the thread.
func inNS(ns string, f func()) error {
	fd, err := unix.Open(filepath.Join("/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open namespace %s: %w", ns, err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		f()
		errc <- nil
	}()
	return <-errc
}

// dialer dials from inside host h's namespace (sockets keep the namespace
// they were made in, so the connection may be used from any goroutine).
func (h *nsHost) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		var derr error
		if err := inNS(h.ns, func() {
			var d net.Dialer
			c, derr = d.DialContext(ctx, network, addr)
		}); err != nil {
			return nil, err
		}
		return c, derr
	}
}

// listen listens inside h's namespace.
func (h *nsHost) listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	var lerr error
	if err := inNS(h.ns, func() { l, lerr = net.Listen(network, addr) }); err != nil {
		return nil, err
	}
	return l, lerr
}

// httpClient is an HTTP client whose connections are made from inside
// h's namespace; keep-alives off, so every request sees the network as
// it is now.
func (h *nsHost) httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: h.dialer(), DisableKeepAlives: true}}
}

// wrap is the command prefix that runs a program inside h's namespace
// (ip netns exec execs the program in place: the process is its own).
func (h *nsHost) wrap() []string { return []string{"ip", "netns", "exec", h.ns} }

// TestNetnsPlumbing checks the partition suite's environment: two hosts
// on the site's bridge reach each other (a TCP echo across it), the root
// namespace has no address or route in the site's subnet, a cut drops the
// frames silently (a dial times out rather than being refused, and an
// open connection's write succeeds locally but gets no answer), and the
// heal restores both.
func TestNetnsPlumbing(t *testing.T) {
	s := newNetSite(t, "a", "b")
	a, b := s.host("a"), s.host("b")
	l, err := b.listen("tcp", b.ip+":7000")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n])
				}
			}()
		}
	}()
	echo := func(c net.Conn, d time.Duration) error {
		c.SetDeadline(time.Now().Add(d))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err := c.Read(buf)
		return err
	}
	dial := func(d time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return a.dialer()(ctx, "tcp", b.ip+":7000")
	}
	c, err := dial(5 * time.Second)
	if err != nil {
		t.Fatalf("a cannot reach b across the bridge: %v", err)
	}
	defer c.Close()
	if err := echo(c, 5*time.Second); err != nil {
		t.Fatalf("echo across the bridge: %v", err)
	}
	out, _ := exec.Command("ip", "-o", "addr").CombinedOutput()
	if strings.Contains(string(out), nsSubnet+".") {
		t.Fatalf("the root namespace has an address in %s.0/24:\n%s", nsSubnet, out)
	}
	if out, _ := exec.Command("ip", "route", "show").CombinedOutput(); strings.Contains(string(out), nsSubnet+".") {
		t.Fatalf("the root namespace routes %s.0/24:\n%s", nsSubnet, out)
	}

	s.cut("a", "b")
	start := time.Now()
	if c2, err := dial(time.Second); err == nil {
		c2.Close()
		t.Fatal("a dialed b through a cut")
	} else if !os.IsTimeout(err) && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a dial through a cut failed with %v after %s, want a timeout (frames dropped, not refused)", err, time.Since(start))
	}
	if err := echo(c, time.Second); err == nil {
		t.Fatal("an open connection still echoes through a cut")
	} else if !os.IsTimeout(err) {
		t.Fatalf("an open connection through a cut failed with %v, want a timeout (no reset)", err)
	}

	s.heal("a", "b")
	c3, err := dial(5 * time.Second)
	if err != nil {
		t.Fatalf("a cannot reach b after the heal: %v", err)
	}
	defer c3.Close()
	if err := echo(c3, 5*time.Second); err != nil {
		t.Fatalf("echo after the heal: %v", err)
	}
}
