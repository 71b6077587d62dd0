// Package cluster is edge-node membership over hashicorp/memberlist (SWIM
// gossip): who is in the cluster, how to reach each member, which
// partitions each one writes and how healthy its WAL and uplink are.
//
// # Invariants
//
//   - Membership is advisory. A member's state (alive, suspect, dead, left)
//     is one node's current opinion, and two nodes may disagree for a while;
//     nothing here decides who may write a partition. Ownership changes
//     (takeover of a dead node's partitions, package replica) are fenced by
//     epochs in the catalog's table properties (package owner), checked in
//     the uplink's compare-and-swap commit — never by gossip alone.
//   - Gossiped metadata fits memberlist's 512-byte meta limit: addresses and
//     health always, then as many partitions as fit (Meta.Truncated says
//     when some were left out; the member's own GET /cluster has them all).
//   - With a gossip key (Config.GossipKey) every packet and stream is
//     AES-GCM encrypted and authenticated with memberlist's keyring, and
//     nothing unencrypted or sealed with another key is accepted
//     (GossipVerifyIncoming/Outgoing): a process without the key can
//     neither join, nor read the members' metadata, nor forge suspicion,
//     death or leave notices. The key encrypts; Config.SecondaryKeys only
//     decrypt, which is how a key is rotated without a split (every node
//     gets the new key as a secondary, then as its key with the old one
//     as secondary, then the old one goes). Without a key, gossip is plain
//     and open to anyone who reaches the port.
//   - A member started before its seeds keeps retrying the join with
//     backoff, so nodes may start in any order; a member declared dead is
//     re-joined periodically (for 24h, then forgotten; members that left
//     are listed for 1h), so a healed partition merges again.
//
// # Outline
//
// Open binds memberlist on Config.BindAddr (port 0 picks a free port, see
// Addr), starts the join loop, and a loop that republishes local metadata
// when it changes (Config.Meta, at most every MetaInterval) and re-joins
// dead members. memberlist's events report join, leave and update; the
// transport reads suspicion, refutation and graceful leave off the wire
// (wire.go, decrypting with the keyring when there is one), since
// memberlist exposes neither. Every state change is
// logged and counted (Transitions). Close sends each live peer a leave
// notice over TCP, leaves through memberlist and shuts down. Transport
// wraps memberlist's NetTransport with a switch to drop gossip, for tests.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// State is a member's state as this node sees it.
type State string

// Member states.
const (
	Alive   State = "alive"
	Suspect State = "suspect"
	Dead    State = "dead"
	Left    State = "left"
)

// States lists every state, for metrics.
var States = []State{Alive, Suspect, Dead, Left}

// Profiles are memberlist timing presets: "lan" (memberlist's
// DefaultLANConfig: 1s probes, suspicion ~5s+, the default) and "local"
// (DefaultLocalConfig: faster failure detection, for one host and tests).
var Profiles = []string{"lan", "local"}

// Config configures a member.
type Config struct {
	// NodeID is the member's unique name.
	NodeID string
	// BindAddr is the gossip host:port (UDP and TCP); port 0 picks one.
	BindAddr string
	// AdvertiseAddr is the host:port peers should use; default the bound
	// address. A missing or zero port means the bound port.
	AdvertiseAddr string
	// Join lists seed gossip addresses; retried with backoff until one
	// answers. Empty: this member waits for others to join it.
	Join []string
	// Profile is "lan" (default) or "local".
	Profile string
	// Meta returns this member's current metadata; nil gossips none.
	Meta func() Meta
	// MetaInterval is how often Meta is re-read and, when it changed,
	// re-gossiped. Default 2s.
	MetaInterval time.Duration
	// GossipKey, when set, encrypts and authenticates all gossip (AES-GCM
	// with a 16, 24 or 32 byte key: memberlist's keyring, with
	// GossipVerifyIncoming and GossipVerifyOutgoing): a member without
	// the key can neither join nor be heard. SecondaryKeys are accepted
	// for decryption too but never used to encrypt, for key rotation.
	GossipKey     []byte
	SecondaryKeys [][]byte
	// OnAlive, when set, is called on a goroutine of its own whenever a
	// member other than this one becomes alive (joined, recovered from a
	// suspicion, or back after it was declared dead): gossip has just
	// heard from it, so the node's data links to it redial now (a healed
	// cut) rather than at their next redial.
	OnAlive func(id string)
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Member is one member as this node sees it.
type Member struct {
	ID    string    `json:"id"`
	State State     `json:"state"`
	Addr  string    `json:"gossip_addr"`
	Since time.Time `json:"since"` // when it entered State
	Meta
}

// Cluster is this node's membership.
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	ml   *memberlist.Memberlist
	tr   *Transport
	conf *memberlist.Config

	mu          sync.Mutex
	members     map[string]*Member
	transitions map[State]int64
	meta        []byte            // last gossiped local metadata
	incarnation map[string]uint32 // highest seen on the wire, per member
	suspectInc  map[string]uint32 // incarnation a suspect was suspected at
	leaving     map[string]bool   // dead message sent by the member itself

	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Open starts the member and (in the background) joins the seeds.
func Open(cfg Config) (*Cluster, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("cluster: NodeID is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MetaInterval <= 0 {
		cfg.MetaInterval = 2 * time.Second
	}
	var conf *memberlist.Config
	switch cfg.Profile {
	case "", "lan":
		conf = memberlist.DefaultLANConfig()
	case "local":
		conf = memberlist.DefaultLocalConfig()
	default:
		return nil, fmt.Errorf("cluster: profile %q: want lan or local", cfg.Profile)
	}
	host, port, err := splitAddr(cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: bind address %q: %w", cfg.BindAddr, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger.With("component", "cluster"), conf: conf,
		members: map[string]*Member{}, transitions: map[State]int64{}, stop: make(chan struct{}),
		incarnation: map[string]uint32{}, suspectInc: map[string]uint32{}, leaving: map[string]bool{}}
	mlLog := log.New(&logWriter{log: cfg.Logger.With("component", "memberlist")}, "", 0)
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: mlLog})
	if err != nil {
		return nil, fmt.Errorf("cluster: listen %s: %w", cfg.BindAddr, err)
	}
	var keyring *memberlist.Keyring
	if len(cfg.GossipKey) > 0 {
		if keyring, err = memberlist.NewKeyring(cfg.SecondaryKeys, cfg.GossipKey); err != nil {
			nt.Shutdown()
			return nil, fmt.Errorf("cluster: gossip key: %w", err)
		}
		conf.Keyring = keyring
		conf.GossipVerifyIncoming, conf.GossipVerifyOutgoing = true, true
	} else if len(cfg.SecondaryKeys) > 0 {
		nt.Shutdown()
		return nil, errors.New("cluster: secondary gossip keys without a gossip key")
	}
	c.tr = newTransport(nt, keyring, c.observe)
	conf.Name = cfg.NodeID
	conf.Transport = c.tr
	conf.BindAddr, conf.BindPort = host, nt.GetAutoBindPort()
	conf.AdvertisePort = conf.BindPort
	if cfg.AdvertiseAddr != "" {
		ah, ap, err := splitAddr(cfg.AdvertiseAddr)
		if err != nil {
			c.tr.Shutdown()
			return nil, fmt.Errorf("cluster: advertise address %q: %w", cfg.AdvertiseAddr, err)
		}
		conf.AdvertiseAddr = ah
		if ap != 0 {
			conf.AdvertisePort = ap
		}
	}
	conf.Delegate = (*delegate)(c)
	conf.Events = (*events)(c)
	conf.Logger = mlLog
	conf.EnableCompression = false // the transport reads state messages (wire.go)
	// A restarted member may come back on a new port (port 0): let it
	// reclaim its name once the old incarnation has been dead this long.
	conf.DeadNodeReclaimTime = conf.GossipToTheDeadTime
	c.ml, err = memberlist.Create(conf)
	if err != nil {
		c.tr.Shutdown()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.log.Info("gossip listening", "node", cfg.NodeID, "addr", c.Addr(), "profile", cmpOr(cfg.Profile, "lan"), "join", cfg.Join,
		"encrypted", keyring != nil, "keys", len(cfg.SecondaryKeys)+min(1, len(cfg.GossipKey)))
	seeds := c.seeds()
	if len(seeds) > 0 {
		c.wg.Add(1)
		go c.joinLoop(seeds)
	}
	c.wg.Add(1)
	go c.watchLoop()
	return c, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// splitAddr parses host:port (port may be empty or 0), resolving a host
// name to an IP (memberlist wants IPs).
func splitAddr(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port := 0
	if ps != "" {
		if port, err = strconv.Atoi(ps); err != nil || port < 0 || port > 65535 {
			return "", 0, fmt.Errorf("bad port %q", ps)
		}
	}
	if host != "" && net.ParseIP(host) == nil {
		ips, err := net.LookupIP(host)
		if err != nil || len(ips) == 0 {
			return "", 0, fmt.Errorf("resolve %s: %v", host, err)
		}
		host = ips[0].String()
		for _, ip := range ips {
			if ip.To4() != nil {
				host = ip.String()
				break
			}
		}
	}
	return host, port, nil
}

// seeds are the configured join addresses other than this member's own.
func (c *Cluster) seeds() []string {
	self := c.Addr()
	var out []string
	for _, s := range c.cfg.Join {
		if s != "" && s != self && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Addr is the member's advertised gossip address (host:port), with the
// bound port when BindAddr asked for port 0.
func (c *Cluster) Addr() string {
	return c.ml.LocalNode().Address()
}

// LocalID is this member's id.
func (c *Cluster) LocalID() string { return c.cfg.NodeID }

// Transport is the gossip transport; tests use it to drop gossip.
func (c *Cluster) Transport() *Transport { return c.tr }

func (c *Cluster) sleep(d time.Duration) bool {
	select {
	case <-c.stop:
		return false
	case <-time.After(d):
		return true
	}
}

// joinLoop contacts the seeds until one answers, backing off from 100ms
// to 5s, so members may start in any order.
func (c *Cluster) joinLoop(seeds []string) {
	defer c.wg.Done()
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		n, err := c.ml.Join(seeds)
		if n > 0 {
			c.log.Info("joined cluster", "seeds", seeds, "contacted", n, "attempts", attempt)
			return
		}
		if attempt == 1 || attempt%10 == 0 {
			c.log.Info("join: no seed answered yet; retrying", "seeds", seeds, "attempts", attempt, "err", err)
		}
		if !c.sleep(backoff) {
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// watchLoop republishes local metadata when it changed and re-joins dead
// members.
func (c *Cluster) watchLoop() {
	defer c.wg.Done()
	poll := c.conf.ProbeInterval / 4
	// Dead members are re-joined every probe interval, so that a healed
	// cut merges within about a second (it took up to five, and the
	// replicas of a healed member wait for it to be alive again). A
	// re-join runs beside the loop (a join towards a member still cut
	// off waits for its TCP timeout), one at a time.
	reconnect := c.conf.ProbeInterval
	var lastMeta, lastReconnect time.Time
	var joining atomic.Bool
	for c.sleep(poll) {
		if time.Since(lastMeta) >= c.cfg.MetaInterval {
			lastMeta = time.Now()
			c.refreshMeta()
		}
		if time.Since(lastReconnect) >= reconnect && joining.CompareAndSwap(false, true) {
			lastReconnect = time.Now()
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer joining.Store(false)
				c.reconnect()
			}()
		}
		c.expire(time.Now())
	}
}

func (c *Cluster) localMeta() Meta {
	if c.cfg.Meta == nil {
		return Meta{}
	}
	m := c.cfg.Meta()
	m.PartitionCount = len(m.Partitions)
	return m
}

func (c *Cluster) refreshMeta() {
	enc := c.localMeta().encode(memberlist.MetaMaxSize)
	c.mu.Lock()
	same := string(enc) == string(c.meta)
	c.mu.Unlock()
	if same {
		return
	}
	if err := c.ml.UpdateNode(c.conf.TCPTimeout); err != nil {
		c.log.Debug("gossip metadata update", "err", err)
	}
}

// reconnect re-joins members declared dead (not those that left), and the
// seeds when this member is alone, so that a healed partition merges.
func (c *Cluster) reconnect() {
	var addrs []string
	alive := 0
	c.mu.Lock()
	for _, m := range c.members {
		switch m.State {
		case Dead:
			addrs = append(addrs, m.Addr)
		case Alive, Suspect:
			alive++
		}
	}
	c.mu.Unlock()
	if alive <= 1 {
		addrs = append(addrs, c.seeds()...)
	}
	if len(addrs) == 0 {
		return
	}
	if n, _ := c.ml.Join(addrs); n > 0 {
		c.log.Debug("reconnected", "addrs", addrs, "contacted", n)
	}
}

// How long departed members stay listed (and dead ones are re-joined).
const (
	keepLeft = time.Hour
	keepDead = 24 * time.Hour
)

// expire clears a suspicion memberlist has outlived (it would have
// declared the member dead by now, so a refute was missed) and forgets
// members that left or died long ago.
func (c *Cluster) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// memberlist's longest suspicion: SuspicionMaxTimeoutMult times
	// SuspicionMult * max(1, log10(n)) probe intervals; plus a margin.
	scale := max(1, math.Log10(float64(max(1, len(c.members)))))
	maxSuspect := time.Duration(float64(c.conf.SuspicionMaxTimeoutMult*c.conf.SuspicionMult)*scale*float64(c.conf.ProbeInterval)) +
		2*c.conf.ProbeInterval
	for id, m := range c.members {
		switch {
		case m.State == Suspect && now.Sub(m.Since) > maxSuspect:
			c.setState(m, Alive)
		case m.State == Left && now.Sub(m.Since) > keepLeft, m.State == Dead && now.Sub(m.Since) > keepDead:
			delete(c.members, id)
			delete(c.incarnation, id)
			delete(c.suspectInc, id)
		}
	}
}

// observe follows suspicion from the state messages on the wire (see
// wire.go): memberlist's events do not report it.
func (c *Cluster) observe(m stateMsg) {
	if m.Node == c.cfg.NodeID {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	mem := c.members[m.Node]
	switch m.kind {
	case wireSuspect:
		if mem != nil && mem.State == Alive && m.Incarnation >= c.incarnation[m.Node] {
			c.suspectInc[m.Node] = m.Incarnation
			c.setState(mem, Suspect)
		}
	case wireAlive:
		switch {
		case mem != nil && mem.State == Suspect && m.Incarnation > c.suspectInc[m.Node]:
			c.setState(mem, Alive)
		case mem != nil && mem.State == Left && c.leaving[m.Node] && m.Incarnation > c.incarnation[m.Node]:
			// Back before memberlist took its leave notice in: memberlist
			// never saw it go, so there is no join event.
			delete(c.leaving, m.Node)
			c.setState(mem, Alive)
		}
		c.incarnation[m.Node] = max(c.incarnation[m.Node], m.Incarnation)
	case wireDead:
		c.log.Debug("dead message seen", "member", m.Node, "from", m.From, "incarnation", m.Incarnation)
		if m.From == m.Node {
			c.leaving[m.Node] = true
		}
	}
}

// update records a member's state and metadata from a memberlist event
// (memberlist holds its lock, so n may be read).
func (c *Cluster) update(n *memberlist.Node, st State) {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		c.log.Warn("member metadata", "member", n.Name, "err", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[n.Name]
	if m == nil {
		m = &Member{ID: n.Name}
		c.members[n.Name] = m
	}
	m.Addr, m.Meta = n.Address(), meta
	switch st {
	case Alive:
		delete(c.leaving, n.Name)
	case Dead:
		if c.leaving[n.Name] {
			st = Left
		}
		delete(c.leaving, n.Name)
	case Suspect: // NotifyUpdate: keep the state the wire says
		return
	}
	c.setState(m, st)
}

// setState changes a member's state, logging and counting the change.
// c.mu is held.
func (c *Cluster) setState(m *Member, st State) {
	if m.State == st {
		return
	}
	from := m.State
	m.State, m.Since = st, time.Now()
	c.transitions[st]++
	if m.ID == c.cfg.NodeID {
		return
	}
	if st == Alive && c.cfg.OnAlive != nil {
		go c.cfg.OnAlive(m.ID)
	}
	args := []any{"member", m.ID, "addr", m.Addr, "from", string(from), "to", string(st)}
	switch {
	case st == Alive && (from == "" || from == Dead || from == Left):
		c.log.Info("member joined", args...)
	case st == Alive:
		c.log.Info("member recovered", args...)
	case st == Suspect:
		c.log.Warn("member suspected", args...)
	case st == Dead:
		c.log.Warn("member declared dead", args...)
	case st == Left:
		c.log.Info("member left gracefully", args...)
	}
}

// Members lists every member this node knows of, itself included (with
// its full, untruncated metadata), sorted by id.
func (c *Cluster) Members() []Member {
	self := c.localMeta()
	c.mu.Lock()
	out := make([]Member, 0, len(c.members))
	for _, m := range c.members {
		mm := *m
		if mm.ID == c.cfg.NodeID {
			mm.Meta = self
		}
		out = append(out, mm)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Counts is the number of members in each state.
func (c *Cluster) Counts() map[State]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[State]int{}
	for _, m := range c.members {
		out[m.State]++
	}
	return out
}

// Transitions counts state changes by the state entered (this member's
// own join included).
func (c *Cluster) Transitions() map[State]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[State]int64, len(c.transitions))
	for k, v := range c.transitions {
		out[k] = v
	}
	return out
}

// Close leaves the cluster gracefully (peers see "left", not "dead") and
// stops gossip. ctx bounds the leave broadcast (default 5s). Calls after
// the first return the first's result.
func (c *Cluster) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		timeout := 5 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		close(c.stop)
		c.wg.Wait()
		c.log.Info("leaving cluster", "node", c.cfg.NodeID)
		c.announceLeave(ctx)
		c.closeErr = c.ml.Leave(timeout)
		c.log.Debug("leave broadcast handed to gossip", "err", c.closeErr)
		// Leave returns once the leave message has been handed to the
		// last gossip round, not when that round has sent it: give the
		// round time to reach the wire before the transport closes.
		select {
		case <-time.After(3 * c.conf.GossipInterval):
		case <-ctx.Done():
		}
		if err := c.ml.Shutdown(); c.closeErr == nil {
			c.closeErr = err
		}
	})
	return c.closeErr
}

// msgLeave, followed by the node id, is a member's notice to each live
// peer that it is about to leave.
const msgLeave = 'L'

// announceLeave tells every live peer, over TCP, that this member is
// leaving. memberlist's own leave message is gossiped only a few times
// (RetransmitMult * log(N+1) packets, some of which may go to members
// already dead), so in a small cluster a peer can miss it and would then
// declare the member dead instead of left.
func (c *Cluster) announceLeave(ctx context.Context) {
	var peers []*memberlist.Node
	c.mu.Lock()
	for _, m := range c.members {
		if m.ID == c.cfg.NodeID || (m.State != Alive && m.State != Suspect) {
			continue
		}
		host, ps, err := net.SplitHostPort(m.Addr)
		port, err2 := strconv.Atoi(ps)
		if err != nil || err2 != nil {
			continue
		}
		peers = append(peers, &memberlist.Node{Name: m.ID, Addr: net.ParseIP(host), Port: uint16(port)})
	}
	c.mu.Unlock()
	msg := append([]byte{msgLeave}, c.cfg.NodeID...)
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() {
			if err := c.ml.SendReliable(p, msg); err != nil {
				c.log.Debug("leave notice", "member", p.Name, "err", err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// delegate gossips the local metadata.
type delegate Cluster

func (d *delegate) NodeMeta(limit int) []byte {
	c := (*Cluster)(d)
	enc := c.localMeta().encode(limit)
	c.mu.Lock()
	c.meta = enc
	c.mu.Unlock()
	return enc
}

// NotifyMsg takes a peer's leave notice: the peer is listed as left at
// once (memberlist's own leave message may still be on its way, or lost).
func (d *delegate) NotifyMsg(b []byte) {
	if len(b) < 2 || b[0] != msgLeave {
		return
	}
	c, id := (*Cluster)(d), string(b[1:])
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaving[id] = true
	if m := c.members[id]; m != nil && (m.State == Alive || m.State == Suspect) {
		c.setState(m, Left)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// events turns memberlist's join, leave and update events into state
// changes. Suspicion is not an event in memberlist; see observe.
type events Cluster

func (e *events) NotifyJoin(n *memberlist.Node) { (*Cluster)(e).update(n, Alive) }

// NotifyUpdate is a metadata change; the state is left as it is.
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Cluster)(e).update(n, Suspect) }

// NotifyLeave is a death or, when the member said so itself, a leave.
func (e *events) NotifyLeave(n *memberlist.Node) { (*Cluster)(e).update(n, Dead) }

// logWriter sends memberlist's "[LEVEL] memberlist: msg" lines to slog.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	lvl := slog.LevelDebug
	switch {
	case strings.HasPrefix(s, "[WARN]"), strings.HasPrefix(s, "[ERR]"):
		lvl = slog.LevelWarn
	}
	if i := strings.Index(s, "memberlist: "); i >= 0 {
		s = s[i+len("memberlist: "):]
	}
	w.log.Log(context.Background(), lvl, s)
	return len(p), nil
}
