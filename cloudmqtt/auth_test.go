package cloudmqtt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/tabletest"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
)

// testAuthority is an Authority whose users (password "pw-" + name) are
// dash, mallory, team-a, ops, sensor and sensor-1, with rules (nil: authRules) and
// anonymous clients allowed with the rules of principal anonymous.
func testAuthority(t *testing.T, rules []auth.Rule) *auth.Authority {
	t.Helper()
	users := filepath.Join(t.TempDir(), "passwd")
	for _, u := range []string{"dash", "mallory", "team-a", "ops", "sensor", "sensor-1"} {
		if err := auth.SetPassword(users, u, []byte("pw-"+u)); err != nil {
			t.Fatal(err)
		}
	}
	if rules == nil {
		rules = authRules
	}
	yes := true
	a, err := auth.Open(auth.Config{AllowAnonymous: &yes, UsersFile: users, ACL: rules},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// authRules: dash reads factory/ topics with client ids dash*; mallory
// reads everything and may use dash* ids too (a rule too wide, or ids
// shared by a fleet); anonymous clients read public/ topics with any
// client id; ops is an admin.
var authRules = []auth.Rule{
	{Principal: "dash", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"factory/#"}, ClientIDs: []string{"dash*"}},
	{Principal: "mallory", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"#"}, ClientIDs: []string{"dash*", "mallory*"}},
	{Principal: "anonymous", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"public/#"}, ClientIDs: []string{"*"}},
	{Principal: "ops", Allow: []auth.Action{auth.Admin}},
}

func userConnect(user, id string, clean bool, expiry uint32) paho.Connect {
	cp := paho.Connect{ClientID: id, CleanStart: clean, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
	if user != "" {
		cp.Username, cp.Password = user, []byte("pw-"+user)
	}
	return cp
}

// TestSessionTakeoverRefused: a principal that may use a client id, but
// does not own the id's session, is refused (0x87) before anything is
// ended or deleted — with Clean Start too, and anonymously: the owner
// stays connected, keeps its stored session and positions, and resumes
// them.
func TestSessionTakeoverRefused(t *testing.T) {
	cat, uri := testCatalog(t, 30)
	s := startServer(t, cat, uri, func(c *Config) { c.Auth = testAuthority(t, nil) })
	const id = "dash-1"
	owner, ca := connect(t, s.Addr(), userConnect("dash", id, false, 600), true)
	if ca.ReasonCode != 0 {
		t.Fatalf("owner: CONNACK 0x%02x", ca.ReasonCode)
	}
	if code := owner.sub(t, "$stream/"+testStream+"/factory/1/#", "earliest"); code != 1 {
		t.Fatalf("owner: SUBACK 0x%02x", code)
	}
	off, m := owner.offset(t)
	if off != 1 {
		t.Fatalf("owner: first offset %d, want 1", off)
	}
	if err := owner.Ack(m); err != nil {
		t.Fatal(err)
	}
	// paho sends manual acks on a ticker: without this wait the test could
	// close the connection before the PUBACK left, and the stored position
	// (rightly) stayed at 1.
	testkit.Eventually(t, 10*time.Second, "the owner's PUBACK at the server", func() bool { return testutil.ToFloat64(s.m.acks) >= 1 })
	// While the owner is connected: another user, then an anonymous
	// client, with Clean Start; then another user resuming.
	for _, cp := range []paho.Connect{userConnect("mallory", id, true, 0), userConnect("", id, true, 0),
		userConnect("mallory", id, false, 600)} {
		_, ca := connect(t, s.Addr(), cp, false)
		if ca.ReasonCode != codeNotAuthorized {
			t.Fatalf("%q (clean %v) on the owner's connected session: CONNACK 0x%02x, want 0x87", cp.Username, cp.CleanStart, ca.ReasonCode)
		}
	}
	// The owner's connection is still served (a SUBACK comes back).
	if code := owner.sub(t, "$stream/"+testStream+"/factory/0/#", "latest"); code != 1 {
		t.Fatalf("owner after the refusals: SUBACK 0x%02x", code)
	}
	// Rows 4 … are unacknowledged: the position stays at 4 once stored.
	for want := int64(4); want < 30; want += 3 {
		if off, _ := owner.offset(t); off != want {
			t.Fatalf("owner: offset %d, want %d", off, want)
		}
	}
	owner.conn.Close()
	testkit.Eventually(t, 10*time.Second, "the owner's session written back", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sessions[id] == nil
	})
	// The stored session, not connected: the same refusals.
	for _, cp := range []paho.Connect{userConnect("mallory", id, true, 0), userConnect("", id, true, 0),
		userConnect("mallory", id, false, 600), userConnect("", id, false, 600)} {
		_, ca := connect(t, s.Addr(), cp, false)
		if ca.ReasonCode != codeNotAuthorized {
			t.Fatalf("%q (clean %v) on the owner's stored session: CONNACK 0x%02x, want 0x87", cp.Username, cp.CleanStart, ca.ReasonCode)
		}
	}
	if ss, pos, err := s.store.Load(context.Background(), id); err != nil || ss == nil || ss.Principal != "dash" || pos[ss.Subs[0].Filter][testStream][0] != 4 {
		t.Fatalf("stored session %+v, positions %v (%v): want dash's, at 4", ss, pos, err)
	}
	owner, ca = connect(t, s.Addr(), userConnect("dash", id, false, 600), true)
	if ca.ReasonCode != 0 || !owner.present {
		t.Fatalf("owner again: CONNACK 0x%02x, present %v", ca.ReasonCode, owner.present)
	}
	if off, _ := owner.offset(t); off != 4 {
		t.Fatalf("owner resumed at %d, want 4 (its first unacknowledged row)", off)
	}
	// Its own Clean Start is still its to make.
	owner.conn.Close()
	if _, ca := connect(t, s.Addr(), userConnect("dash", id, true, 0), false); ca.ReasonCode != 0 {
		t.Fatalf("owner's clean start: CONNACK 0x%02x", ca.ReasonCode)
	}
	testkit.Eventually(t, 10*time.Second, "the session deleted by its owner's clean start", func() bool {
		ss, _, err := s.store.Load(context.Background(), id)
		return ss == nil && err == nil
	})
}

// TestResumeReauthorized: a persistent session stored under wider rules
// is authorised again when it resumes after a restart with narrower
// ones: the subscription the rules now refuse is dropped (named in the
// CONNACK's user property subscription-dropped, counted, its positions
// deleted) and sends nothing more, the one still allowed resumes, and a
// fresh SUBSCRIBE of the dropped filter is refused.
func TestResumeReauthorized(t *testing.T) {
	cat, uri := testCatalog(t, 30)
	wide := []auth.Rule{{Principal: "dash", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"factory/#"}}}
	narrow := []auth.Rule{{Principal: "dash", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"factory/1/#"}}}
	const keep, gone = "$stream/" + testStream + "/factory/1/#", "$stream/" + testStream + "/factory/2/#"
	s := startServer(t, cat, uri, func(c *Config) { c.Auth = testAuthority(t, wide) })
	c, ca := connect(t, s.Addr(), userConnect("dash", "dash", false, 600), false)
	if ca.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02x", ca.ReasonCode)
	}
	for _, f := range []string{keep, gone} {
		if code := c.sub(t, f, "earliest"); code != 1 {
			t.Fatalf("%s: SUBACK 0x%02x", f, code)
		}
	}
	for range 20 { // rows 1, 4, … and 2, 5, …: every row of both filters
		c.offset(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The rules narrow; the server restarts; more rows arrive.
	s = startServer(t, cat, uri, func(c *Config) { c.Auth = testAuthority(t, narrow) })
	c, ca = connect(t, s.Addr(), userConnect("dash", "dash", false, 600), false)
	if ca.ReasonCode != 0 || !c.present {
		t.Fatalf("resume: CONNACK 0x%02x, present %v", ca.ReasonCode, c.present)
	}
	if got := ca.Properties.User.Get("subscription-dropped"); got != gone {
		t.Errorf("CONNACK subscription-dropped %q, want %q", got, gone)
	}
	commitRows(t, cat, 30, 36)
	// Rows of keep not acknowledged before the restart may come again;
	// a row of gone must not come at all.
	for last := int64(0); last < 34; {
		off, m := c.offset(t)
		if m.Topic != "factory/1/t" {
			t.Fatalf("resumed: offset %d of %s, want only %s's rows", off, m.Topic, keep)
		}
		last = off
	}
	if code := c.sub(t, gone, "earliest"); code != codeNotAuthorized {
		t.Fatalf("fresh SUBSCRIBE of %s: SUBACK 0x%02x, want 0x87", gone, code)
	}
	s.mu.Lock()
	var filters []string
	for _, su := range s.sessions["dash"].subs {
		filters = append(filters, su.filter)
	}
	s.mu.Unlock()
	if len(filters) != 1 || filters[0] != keep {
		t.Fatalf("resumed session's subscriptions %v, want [%s]", filters, keep)
	}
	ss, pos, err := s.store.Load(ctx, "dash")
	if err != nil || ss == nil || len(ss.Subs) != 1 || ss.Subs[0].Filter != keep || pos[gone] != nil {
		t.Fatalf("stored session %+v, positions %v (%v): want only %s", ss, pos, err, keep)
	}
	if n := counter(t, s, "tributary_cloud_mqtt_resumed_subscriptions_dropped_total"); n != 1 {
		t.Errorf("resumed subscriptions dropped: %v, want 1", n)
	}
	select {
	case m := <-c.msgs:
		t.Fatalf("a row of %s after all: offset %s %s", gone, m.Properties.User.Get("offset"), m.Topic)
	default:
	}
}

// commitRows commits rows [from, to) to the test stream (topics
// factory/<i%3>/t).
func commitRows(t *testing.T, cat *tables.Catalog, from, to int) {
	t.Helper()
	var recs []*tributary.Record
	for i := from; i < to; i++ {
		recs = append(recs, &tributary.Record{Stream: testStream, Offset: int64(i), Timestamp: time.Now().UnixMicro(),
			Topic: fmt.Sprintf("factory/%d/t", i%3), Value: []byte(fmt.Sprintf("value %d", i)), Source: "mqtt", ClientID: "c", Node: "edge-1"})
	}
	tabletest.Commit(t, cat, testStream, recs)
}

// TestShareGroupACL: a $share group is checked against the rule's
// groups, as gRPC and HTTP subscriptions are: mallory cannot join
// team-a's group (and divert its rows); team-a can, and a rule without
// groups allows any group.
func TestShareGroupACL(t *testing.T) {
	cat, uri := testCatalog(t, 30)
	rules := []auth.Rule{
		{Principal: "team-a", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"factory/#"}, Groups: []string{"team-a*"}},
		{Principal: "mallory", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"#"}, Groups: []string{"mallory-*"}},
		{Principal: "dash", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"factory/#"}},
	}
	s := startServer(t, cat, uri, func(c *Config) { c.Auth = testAuthority(t, rules) })
	const team = "$share/team-a/$stream/" + testStream + "/factory/#"
	for _, c := range []struct {
		user, filter string
		want         byte
	}{
		{"mallory", team, codeNotAuthorized},
		{"mallory", "$share/team-a/factory/#", codeNotAuthorized},
		{"mallory", "$share/mallory-1/$stream/" + testStream + "/factory/#", 1},
		{"mallory", "$stream/" + testStream + "/factory/#", 1},
		{"team-a", "$share/other/$stream/" + testStream + "/factory/#", codeNotAuthorized},
		{"dash", "$share/anything/$stream/" + testStream + "/factory/#", 1},
	} {
		cl, ca := connect(t, s.Addr(), userConnect(c.user, c.user, true, 0), false)
		if ca.ReasonCode != 0 {
			t.Fatalf("%s: CONNACK 0x%02x", c.user, ca.ReasonCode)
		}
		if code := cl.sub(t, c.filter, "earliest"); code != c.want {
			t.Errorf("%s subscribing %s: SUBACK 0x%02x, want 0x%02x", c.user, c.filter, code, c.want)
		}
		cl.conn.Close()
	}
	// team-a's group (new: no member yet) gets every row from earliest:
	// nobody else took a share.
	cl, _ := connect(t, s.Addr(), userConnect("team-a", "team-a", true, 0), false)
	if code := cl.sub(t, team, "earliest"); code != 1 {
		t.Fatalf("team-a: SUBACK 0x%02x", code)
	}
	for want := int64(0); want < 30; want++ {
		if off, _ := cl.offset(t); off != want {
			t.Fatalf("team-a's group: offset %d, want %d", off, want)
		}
	}
}

// TestClientIDDefaults: by default a principal may use its own name as
// client id and nothing else — user sensor cannot take device sensor-1's
// id — and an anonymous client gets an id the server assigns (MQTT 5
// Assigned Client Identifier; 3.1.1 an empty id with clean session)
// unless a rule lists client ids for it (auth's TestACL: those patterns,
// and configured ones such as "%u-*", keep working).
func TestClientIDDefaults(t *testing.T) {
	cat, uri := testCatalog(t, 3)
	s := startServer(t, cat, uri, func(c *Config) {
		c.Auth = testAuthority(t, []auth.Rule{
			{Principal: "sensor*", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"cmd/%c"}},
			{Principal: "anonymous", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"public/#"}},
		})
	})
	for _, c := range []struct {
		name     string
		user, id string
		want     byte
	}{
		{"another principal's name", "sensor", "sensor-1", codeNotAuthorized},
		{"its own name", "sensor-1", "sensor-1", 0},
		{"anonymous with an id", "", "free-id", codeNotAuthorized},
		{"anonymous without an id", "", "", 0},
	} {
		cl, ca := connect(t, s.Addr(), userConnect(c.user, c.id, true, 0), false)
		if ca.ReasonCode != c.want {
			t.Errorf("%s: CONNACK 0x%02x, want 0x%02x", c.name, ca.ReasonCode, c.want)
		}
		if c.id == "" && ca.ReasonCode == 0 && (ca.Properties == nil || ca.Properties.AssignedClientID == "") {
			t.Errorf("%s: no Assigned Client Identifier", c.name)
		}
		cl.conn.Close()
	}
	// MQTT 3.1.1: an empty id with clean session is assigned one.
	for _, c := range []struct {
		id   string
		want byte
	}{{"free-id", 0x05}, {"", 0x00}} {
		if rc := connack311(t, s.Addr(), c.id); rc != c.want {
			t.Errorf("3.1.1 anonymous, client id %q: return code 0x%02x, want 0x%02x", c.id, rc, c.want)
		}
	}
}

// connack311 sends an MQTT 3.1.1 CONNECT (clean session, no credentials)
// and returns the CONNACK's return code.
func connack311(t *testing.T, addr, id string) byte {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, byte(len(id) >> 8), byte(len(id))}
	body = append(body, id...)
	if _, err := conn.Write(append([]byte{0x10, byte(len(body))}, body...)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 4)
	if _, err := io.ReadFull(conn, b); err != nil || b[0] != 0x20 {
		t.Fatalf("no 3.1.1 CONNACK: %x %v", b, err)
	}
	return b[3]
}

// counter is the value of s's counter name (0 when s has none).
func counter(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	return 0
}
