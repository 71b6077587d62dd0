package cloudmqtt

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
)

// testAuthority is an Authority whose users (password "pw-" + name) are
// dash, mallory, team-a and ops, with rules (nil: authRules) and
// anonymous clients allowed with the rules of principal anonymous.
func testAuthority(t *testing.T, rules []auth.Rule) *auth.Authority {
	t.Helper()
	users := filepath.Join(t.TempDir(), "passwd")
	for _, u := range []string{"dash", "mallory", "team-a", "ops"} {
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
