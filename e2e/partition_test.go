package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/uplink/quarantine"
)

// The partition suite (issue 27): edge nodes, each a real `tributary
// edge` process in its own network namespace (netns_test.go), sharing one
// catalog — `tributary cloud` serving the Iceberg REST catalog from a
// namespace of its own, over a SQLite catalog and a file warehouse on the
// shared disk — with a QoS 1 publisher at about 100 msg/s inside each
// node's namespace, and silent network cuts, kill -9 and SIGSTOP. After
// the site has healed and settled, the table is read back with iceberg-go
// (from the shared disk) and checked: every acknowledged message exactly
// once, no message twice (acknowledged or not: a refused publish is
// retried with the same id, as a device would), dense offsets per
// partition, and nothing in any node's quarantine.

// ownerLease is cluster.owner_lease for every node: short, so that a
// takeover of a node that is really gone happens within the suite's
// holds ("" leaves the key out: the default 10s).
const ownerLease = "3s"

// partToken is the cloud's catalog.node_token, the edge nodes' catalog.token.
const partToken = "partition-suite-node-token"

// Ports inside the namespaces: each namespace has its own, so they are
// fixed (a restarted node comes back on the same addresses).
const (
	partCatalogPort = "8181"
	partMQTTPort    = "1883"
	partHTTPPort    = "8080"
	partGossipPort  = "7946"
	partPeerPort    = "7947"
)

// partTimes are the suite's timings: short in make test, long under the
// bench tag (bench_partition_test.go).
type partTimes struct {
	hold    time.Duration // a cut (or a pause) held past the takeover time
	flapCut time.Duration // one cut of a flapping node
	flapUp  time.Duration // and the link up between two cuts
	catalog time.Duration // the whole site cut from the catalog
}

var shortTimes = partTimes{hold: 15 * time.Second, flapCut: 3 * time.Second, flapUp: 2 * time.Second, catalog: 20 * time.Second}

// partSite is a site of edge nodes n1..nN and the catalog host "cat".
type partSite struct {
	t      *testing.T
	net    *netSite
	base   string
	shared string
	policy string
	ids    []string
	cloud  *proc

	mu    sync.Mutex
	nodes map[string]*proc
	load  *partLoad
}

func newPartSite(t *testing.T, n int, policy string) *partSite {
	t.Helper()
	s := &partSite{t: t, base: t.TempDir(), policy: policy, nodes: map[string]*proc{}}
	s.shared = filepath.Join(s.base, "shared")
	for i := 1; i <= n; i++ {
		s.ids = append(s.ids, fmt.Sprintf("n%d", i))
	}
	s.net = newNetSite(t, append([]string{"cat"}, s.ids...)...)
	cat := s.net.host("cat")
	sec := filepath.Join(s.base, "cloud-security.yaml")
	writeFile(t, sec, "allow_anonymous: true\n")
	s.cloud = startProcWrapped(t, cat.wrap(), s.shared, "cloud", "--data", s.shared, "--catalog-addr", cat.ip+":"+partCatalogPort,
		"--kafka-addr", "", "--pulsar-addr", "", "--http-addr", "", "--mqtt-addr", "", "--maintenance=false",
		"--node-token", partToken, "--security", sec)
	for _, id := range s.ids {
		s.start(id)
	}
	s.waitAlive(s.ids...)
	return s
}

// start starts (or restarts, on its data directory) node id.
func (s *partSite) start(id string) *proc {
	t := s.t
	t.Helper()
	h := s.net.host(id)
	dir := filepath.Join(s.base, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var join strings.Builder
	for _, o := range s.ids {
		if o != id {
			fmt.Fprintf(&join, "    - %s:%s\n", s.net.host(o).ip, partGossipPort)
		}
	}
	lease := ""
	if ownerLease != "" {
		lease = "  owner_lease: " + ownerLease + "\n"
	}
	cfg := fmt.Sprintf(`node_id: %[1]s
data_dir: %[2]s
catalog:
  uri: http://%[3]s:%[4]s
  token: %[5]s
  warehouse: file://%[6]s/warehouse
mqtt:
  addr: %[7]s:%[8]s
  routes:
    - {filter: "factory/#", stream: factory.telemetry}
uplink:
  commit_interval: 200ms
maintenance:
  enabled: false
http_addr: %[7]s:%[9]s
security:
  allow_anonymous: true
cluster:
  gossip_addr: %[7]s:%[10]s
  peer_addr: %[7]s:%[11]s
  gossip_profile: local
  replication_factor: 2
  replication_policy: %[12]s
  replication_timeout: 1s
  takeover_grace: 2s
%[13]s  join:
%[14]s`, id, dir, s.net.host("cat").ip, partCatalogPort, partToken, s.shared, h.ip, partMQTTPort, partHTTPPort,
		partGossipPort, partPeerPort, s.policy, lease, join.String())
	path := filepath.Join(s.base, id+".yaml")
	writeFile(t, path, cfg)
	p := startProcWrapped(t, h.wrap(), dir, "edge", "-config", path)
	p.dial = h.dialer()
	keepLogs(t, p, id)
	s.mu.Lock()
	s.nodes[id] = p
	s.mu.Unlock()
	return p
}

// keepLogs writes everything p logged to $TRIBUTARY_PARTITION_LOGS/<test>-<id>-<start time>.log
// when the test ends, when that variable names a directory: the
// timestamped logs of every node, to follow a heal step by step.
func keepLogs(t *testing.T, p *proc, id string) {
	dir := os.Getenv("TRIBUTARY_PARTITION_LOGS")
	if dir == "" {
		return
	}
	name := fmt.Sprintf("%s-%s-%s.log", strings.ReplaceAll(t.Name(), "/", "_"), id, time.Now().Format("150405.000"))
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(p.logs()+"\n"), 0o644); err != nil {
			t.Logf("keep logs: %v", err)
		}
	})
}

func (s *partSite) node(id string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[id]
}

// members is GET /cluster of node id: member -> state ("" and an error
// when the node does not answer within 2 s).
func (s *partSite) members(id string) (map[string]peerMember, error) {
	var st struct {
		Members []struct {
			ID string `json:"id"`
			peerMember
		} `json:"members"`
	}
	if err := s.getJSON(id, "/cluster", &st); err != nil {
		return nil, err
	}
	out := map[string]peerMember{}
	for _, m := range st.Members {
		out[m.ID] = m.peerMember
	}
	return out, nil
}

func (s *partSite) getJSON(id, path string, v any) error {
	p := s.node(id)
	resp, err := s.net.host(id).httpClient(2 * time.Second).Get("http://" + p.HTTP + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// metrics is node id's /metrics, each family summed over its labels.
func (s *partSite) metrics(id string) (map[string]float64, error) {
	p := s.node(id)
	resp, err := s.net.host(id).httpClient(2 * time.Second).Get("http://" + p.HTTP + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// waitAlive waits until every node sees every one of ids alive with a
// peer address.
func (s *partSite) waitAlive(ids ...string) {
	s.t.Helper()
	var last string
	if !poll(60*time.Second, func() bool {
		for _, n := range s.ids {
			ms, err := s.members(n)
			if err != nil {
				last = fmt.Sprintf("%s: %v", n, err)
				return false
			}
			for _, id := range ids {
				if ms[id].State != "alive" || ms[id].Peer == "" {
					last = fmt.Sprintf("%s sees %s %q (peer %q)", n, id, ms[id].State, ms[id].Peer)
					return false
				}
			}
		}
		return true
	}) {
		s.t.Fatalf("timed out after 60s waiting for %v alive with peer addresses on every node; last: %s\n%s", ids, last, s.logs())
	}
}

func (s *partSite) logs() string {
	var b strings.Builder
	for _, id := range s.ids {
		fmt.Fprintf(&b, "---- %s ----\n%s\n", id, s.node(id).tail(40))
	}
	return b.String()
}

// kill sends SIGKILL to node id and waits for it to exit.
func (s *partSite) kill(id string) { s.node(id).kill() }

// signal sends sig to node id's process (ip netns exec execs it in place).
func (s *partSite) signal(id string, sig syscall.Signal) {
	s.t.Helper()
	if err := s.node(id).cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %s to %s: %v", sig, id, err)
	}
}

// partPub is one device next to its node: a paho QoS 1 publisher inside
// the node's namespace, about 100 messages a second, one at a time, each
// with a unique id. A refused publish is retried with the same id (a
// device re-sends what was refused); a publish whose outcome is unknown
// (timeout, connection lost) is given up and the next one gets a new id,
// so no id is ever sent twice unless it was refused.
type partPub struct {
	node    string
	mu      sync.Mutex
	acked   map[string]bool
	ackAt   []time.Time
	refused map[byte]int
	// refusedIDs are the ids refused at least once.
	refusedIDs map[string]bool
	sent       int
	unknown    int // publishes without an answer (timeout, connection lost)
	lastErr    string
}

type partLoad struct {
	pubs map[string]*partPub
	stop chan struct{}
	wg   sync.WaitGroup
}

func (s *partSite) startLoad() *partLoad {
	ld := &partLoad{pubs: map[string]*partPub{}, stop: make(chan struct{})}
	for _, id := range s.ids {
		pp := &partPub{node: id, acked: map[string]bool{}, refused: map[byte]int{}, refusedIDs: map[string]bool{}}
		ld.pubs[id] = pp
		ld.wg.Go(func() { s.publish(ld, pp) })
	}
	s.load = ld
	s.t.Cleanup(ld.finish)
	return ld
}

func (s *partSite) publish(ld *partLoad, pp *partPub) {
	h := s.net.host(pp.node)
	addr := h.ip + ":" + partMQTTPort
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	seq := 0
	stopped := func() bool {
		select {
		case <-ld.stop:
			return true
		default:
			return false
		}
	}
	for !stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		conn, err := h.dialer()(ctx, "tcp", addr)
		if err == nil {
			cl := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {}})
			var ca *paho.Connack
			ca, err = cl.Connect(ctx, &paho.Connect{ClientID: "dev-" + pp.node, CleanStart: true, KeepAlive: 5})
			cancel()
			if err == nil && ca.ReasonCode == 0 {
				seq = s.publishOn(ld, pp, cl, tick, seq)
				cl.Disconnect(&paho.Disconnect{})
			}
			conn.Close()
		} else {
			cancel()
		}
		if err != nil {
			pp.mu.Lock()
			pp.lastErr = err.Error()
			pp.mu.Unlock()
		}
		select {
		case <-ld.stop:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// publishOn publishes on one connection until it fails or the load stops;
// it returns the next sequence number.
func (s *partSite) publishOn(ld *partLoad, pp *partPub, cl *paho.Client, tick *time.Ticker, seq int) int {
	for {
		select {
		case <-ld.stop:
			return seq
		case <-tick.C:
		}
		id := fmt.Sprintf("%s-%06d", pp.node, seq)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pr, err := cl.Publish(ctx, &paho.Publish{Topic: "factory/" + pp.node + "/telemetry", QoS: 1,
			Payload: fmt.Appendf(nil, `{"id":"%s","v":%d}`, id, seq)})
		cancel()
		pp.mu.Lock()
		pp.sent++
		switch {
		case pr != nil && pr.ReasonCode >= 0x80: // paho returns the PUBACK and an error
			pp.refused[pr.ReasonCode]++ // re-sent with the same id
			pp.refusedIDs[id] = true
			err = nil
		case err != nil:
			pp.lastErr = err.Error()
			pp.unknown++
			seq++ // unknown outcome: never re-sent
		default:
			pp.acked[id] = true
			pp.ackAt = append(pp.ackAt, time.Now())
			seq++
		}
		pp.mu.Unlock()
		if err != nil {
			return seq
		}
	}
}

// finish stops the publishers (idempotent).
func (ld *partLoad) finish() {
	select {
	case <-ld.stop:
	default:
		close(ld.stop)
	}
	ld.wg.Wait()
}

// acks is how many publishes of node id were acknowledged.
func (ld *partLoad) acks(id string) int {
	pp := ld.pubs[id]
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return len(pp.acked)
}

// rate is node ids' acknowledgements per second in [from, to).
func (ld *partLoad) rate(from, to time.Time, ids ...string) float64 {
	n := 0
	for _, id := range ids {
		pp := ld.pubs[id]
		pp.mu.Lock()
		for _, at := range pp.ackAt {
			if !at.Before(from) && at.Before(to) {
				n++
			}
		}
		pp.mu.Unlock()
	}
	return float64(n) / to.Sub(from).Seconds()
}

// waitLoad waits until every node's publisher has min more
// acknowledgements; it reports a timeout with t.Errorf and returns false.
func (s *partSite) waitLoad(min int) bool {
	s.t.Helper()
	before := map[string]int{}
	for _, id := range s.ids {
		before[id] = s.load.acks(id)
	}
	var last string
	if !poll(60*time.Second, func() bool {
		for _, id := range s.ids {
			if n := s.load.acks(id); n < before[id]+min {
				pp := s.load.pubs[id]
				pp.mu.Lock()
				last = fmt.Sprintf("%s: %d acknowledged, refused %v, last error %q", id, n-before[id], pp.refused, pp.lastErr)
				pp.mu.Unlock()
				return false
			}
		}
		return true
	}) {
		s.t.Errorf("timed out after 60s waiting for %d more acknowledgements on every node; %s", min, last)
		return false
	}
	return true
}

// watch samples the takeover counters of every node that answers every
// 200 ms while f runs, and returns how long after from the first takeover
// was counted (0: none).
func (s *partSite) watch(from time.Time, f func()) time.Duration {
	done := make(chan struct{})
	var first time.Duration
	base := map[string]float64{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for _, id := range s.ids {
				m, err := s.metrics(id)
				if err != nil {
					continue
				}
				v := m["tributary_partition_takeovers_total"]
				if _, ok := base[id]; !ok {
					base[id] = v
				}
				if v > base[id] && first == 0 {
					first = time.Since(from)
				}
			}
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	f()
	close(done)
	wg.Wait()
	return first
}

// replicationRestored waits (up to 60 s) until, on every node, replicas
// confirm records again (tributary_replicated_records_total grows by 50
// from its value at the call) and nothing is acknowledged degraded; it
// returns how long that took ("" and an error when it did not happen).
func (s *partSite) replicationRestored(from time.Time) (time.Duration, error) {
	base := map[string]float64{}
	var last string
	ok := poll(60*time.Second, func() bool {
		for _, id := range s.ids {
			m, err := s.metrics(id)
			if err != nil {
				last = fmt.Sprintf("%s: %v", id, err)
				return false
			}
			v := m["tributary_replicated_records_total"]
			b, seen := base[id]
			if !seen || v < b {
				base[id] = v // first sample, or the node restarted
				last = id + ": first sample"
				return false
			}
			if v < b+50 || m["tributary_replication_degraded"] != 0 {
				last = fmt.Sprintf("%s: %v more replicated, degraded %v", id, v-b, m["tributary_replication_degraded"])
				return false
			}
		}
		return true
	})
	if !ok {
		return 0, fmt.Errorf("replication not restored 60s after the heal: %s", last)
	}
	return time.Since(from), nil
}

// partResult is what a scenario prints.
type partResult struct {
	name                             string
	acked, inTable, missing, dups    int
	refused                          map[string]int // "node 0xNN" -> publishes refused
	refusedInTable, quarantined      int
	unknown                          int
	takeover, restored               time.Duration
	rateBefore, rateDuring           float64
	missingInQuarantine, missingNote string
}

func (r partResult) String() string {
	codes := []string{}
	for c, n := range r.refused {
		codes = append(codes, fmt.Sprintf("%s×%d", c, n))
	}
	sort.Strings(codes)
	dur := func(d time.Duration) string {
		if d == 0 {
			return "none"
		}
		return d.Round(100 * time.Millisecond).String()
	}
	s := fmt.Sprintf("%s: acknowledged %d, in the table %d, missing %d%s, duplicated %d, refused by node and code [%s] (ids in the table after a refusal: %d), unanswered %d, quarantined %d, takeover %s, replication restored %s after the heal",
		r.name, r.acked, r.inTable, r.missing, r.missingInQuarantine, r.dups, strings.Join(codes, " "), r.refusedInTable, r.unknown, r.quarantined, dur(r.takeover), dur(r.restored))
	if r.rateBefore > 0 {
		s += fmt.Sprintf(", majority ingest %.0f/s during the cut against %.0f/s before (%.2f)", r.rateDuring, r.rateBefore, r.rateDuring/r.rateBefore)
	}
	return s
}

// settle waits until the site has drained — every node answers with no
// record in its WAL (tributary_wal_records) — and the table's row count
// has stopped moving for 2 s; up to 90 s, after which it reports what it
// waited for (the checks then run on what the table has). A node whose
// WAL is empty but whose tributary_replication_lag_records is not (a
// gauge left over from a fence, seen on today's code) is logged, not
// waited for: nothing of it is pending.
func (s *partSite) settle() {
	t := s.t
	var last string
	rows, stable := -1, time.Time{}
	lag := map[string]float64{}
	defer func() {
		for id, v := range lag {
			if v != 0 {
				t.Logf("note: %s's WAL is empty but tributary_replication_lag_records is %v", id, v)
			}
		}
	}()
	ok := poll(90*time.Second, func() bool {
		for _, id := range s.ids {
			m, err := s.metrics(id)
			if err != nil {
				last = fmt.Sprintf("%s: %v", id, err)
				return false
			}
			if m["tributary_wal_records"] != 0 {
				last = fmt.Sprintf("%s: %v records in the WAL", id, m["tributary_wal_records"])
				return false
			}
			lag[id] = m["tributary_replication_lag_records"]
		}
		n := len(readTable(t, s.shared, "factory.telemetry"))
		if n != rows {
			rows, stable = n, time.Now()
			last = fmt.Sprintf("table at %d rows", n)
			return false
		}
		return time.Since(stable) > 2*time.Second
	})
	if !ok {
		t.Errorf("the site did not settle within 90s: %s", last)
	}
}

// check reads the table back and checks every invariant, reporting each
// breach with t.Errorf so that the figures are printed either way.
func (s *partSite) check(r *partResult) {
	t := s.t
	s.load.finish()
	s.settle()
	rows := readTable(t, s.shared, "factory.telemetry")
	acked := map[string]bool{}
	r.refused = map[string]int{}
	for _, pp := range s.load.pubs {
		pp.mu.Lock()
		for id := range pp.acked {
			acked[id] = true
		}
		for c, n := range pp.refused {
			r.refused[fmt.Sprintf("%s 0x%02x", pp.node, c)] += n
		}
		r.unknown += pp.unknown
		pp.mu.Unlock()
	}
	seen := map[string]int{}
	for _, row := range rows {
		seen[rowID(row)]++
	}
	r.acked, r.inTable = len(acked), len(rows)
	var missing []string
	for id := range acked {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	var dups []string
	for id, n := range seen {
		if n > 1 {
			r.dups += n - 1
			dups = append(dups, id)
		}
	}
	r.missing = len(missing)
	// A refused id whose copies in the table outnumber its acknowledgement
	// (one if it was acknowledged on a retry, none otherwise): a refused
	// publish that was uploaded anyway.
	for _, pp := range s.load.pubs {
		pp.mu.Lock()
		for id := range pp.refusedIDs {
			want := 0
			if pp.acked[id] {
				want = 1
			}
			if seen[id] > want {
				r.refusedInTable++
			}
		}
		pp.mu.Unlock()
	}
	quarantined := s.quarantined()
	r.quarantined = len(quarantined)
	inQ := 0
	for _, id := range missing {
		if quarantined[id] {
			inQ++
		}
	}
	if len(missing) > 0 {
		r.missingInQuarantine = fmt.Sprintf(" (%d of them in a quarantine)", inQ)
	}
	t.Log(r.String())
	sort.Strings(missing)
	sort.Strings(dups)
	if len(missing) > 0 {
		t.Errorf("%d acknowledged messages are not in the table, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if len(dups) > 0 {
		t.Errorf("%d messages are in the table more than once (%d extra copies), e.g. %v", len(dups), r.dups, dups[:min(5, len(dups))])
	}
	if len(quarantined) > 0 {
		t.Errorf("%d records are in the nodes' quarantines (an operator step), %d of them acknowledged", len(quarantined), countAcked(quarantined, acked))
	}
	checkDenseErr(t, rows)
	if t.Failed() {
		t.Logf("nodes' last lines:\n%s", s.logs())
	}
}

func countAcked(ids, acked map[string]bool) int {
	n := 0
	for id := range ids {
		if acked[id] {
			n++
		}
	}
	return n
}

// quarantined is the ids of the records in every node's quarantine
// directory (what `tributary quarantine list` lists).
func (s *partSite) quarantined() map[string]bool {
	out := map[string]bool{}
	for _, id := range s.ids {
		files, _ := filepath.Glob(filepath.Join(s.base, id, "quarantine", "*"+quarantine.FileSuffix))
		for _, f := range files {
			recs, _, err := quarantine.ReadReason(f)
			if err != nil {
				s.t.Errorf("quarantine file %s: %v", f, err)
				continue
			}
			for _, r := range recs {
				out[rowID(r)] = true
			}
		}
	}
	return out
}

// checkDenseErr is checkDense reporting with t.Errorf.
func checkDenseErr(t *testing.T, rows []*tributary.Record) {
	t.Helper()
	seen := map[int32]map[int64]int{}
	for _, r := range rows {
		if seen[r.Partition] == nil {
			seen[r.Partition] = map[int64]int{}
		}
		seen[r.Partition][r.Offset]++
	}
	parts := slices.Sorted(maps.Keys(seen))
	for _, p := range parts {
		offs := seen[p]
		for o, n := range offs {
			if n > 1 {
				t.Errorf("partition %d offset %d is in the table %d times", p, o, n)
			}
		}
		for i := int64(0); i < int64(len(offs)); i++ {
			if offs[i] == 0 {
				t.Errorf("partition %d: offset %d missing among %d offsets (not dense)", p, i, len(offs))
				break
			}
		}
	}
}
