package mqtt

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mochi "github.com/mochi-mqtt/server/v2"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
)

// The fixture's rules: devices sensor-* publish and subscribe under
// factory/<their name>/ with client ids <their name>[-*] (written out:
// the default is the name only), reader subscribes to everything under
// factory/, ops is an admin (any topic, any client id). Anonymous clients
// are refused. Passwords are "pw-" + the user name.
var authACL = []auth.Rule{
	{Principal: "sensor-*", Allow: []auth.Action{auth.Publish, auth.Subscribe}, Topics: []string{"factory/%u/#"},
		ClientIDs: []string{"%u", "%u-*"}},
	{Principal: "reader", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"factory/#"}},
	{Principal: "ops", Allow: []auth.Action{auth.Admin}},
}

type authFixture struct {
	*testServer
	secret []byte // the HS256 secret of the tokens
	audit  *testkit.SyncBuffer
}

// startAuthServer starts a server with the fixture's Authority.
func startAuthServer(t *testing.T, mutate func(*Config)) *authFixture {
	t.Helper()
	a, secret, audit := newTestAuthority(t)
	ts := startServer(t, func(c *Config) {
		c.Auth = a
		if mutate != nil {
			mutate(c)
		}
	})
	return &authFixture{testServer: ts, secret: secret, audit: audit}
}

// newTestAuthority is an Authority with the fixture's users (a password
// file written with auth.SetPassword), a JWT secret and rules, auditing
// into audit.
func newTestAuthority(t *testing.T) (a *auth.Authority, secret []byte, audit *testkit.SyncBuffer) {
	t.Helper()
	dir := t.TempDir()
	users := filepath.Join(dir, "passwd")
	for _, u := range []string{"sensor-a", "sensor-b", "reader", "ops"} {
		if err := auth.SetPassword(users, u, []byte("pw-"+u)); err != nil {
			t.Fatal(err)
		}
	}
	secret = []byte("a test secret of enough length for HS256")
	secretFile := filepath.Join(dir, "jwt.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	off := false
	audit = &testkit.SyncBuffer{}
	a, err := auth.Open(auth.Config{AllowAnonymous: &off, UsersFile: users, JWT: auth.JWTConfig{SecretFile: secretFile},
		ACL: authACL}, slog.New(slog.NewTextHandler(audit, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a, secret, audit
}

func (f *authFixture) token(t *testing.T, sub string, exp time.Duration) string {
	return testkit.HS256Token(t, f.secret, sub, exp)
}

// login connects over conn (see testkit.MQTTConnect); rcv (optional)
// collects what the client receives.
func login(t *testing.T, conn net.Conn, cp paho.Connect, rcv *received) (*paho.Client, byte) {
	t.Helper()
	var on func(paho.PublishReceived) (bool, error)
	if rcv != nil {
		on = rcv.add
	}
	return testkit.MQTTConnect(t, conn, cp, on)
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// loginAs connects user (password "pw-"+user) with client id id; it fails
// the test unless the CONNACK is a success.
func (f *authFixture) loginAs(t *testing.T, user, id string, rcv *received) *paho.Client {
	t.Helper()
	return loginAt(t, f.tcp, user, id, rcv)
}

func loginAt(t *testing.T, addr, user, id string, rcv *received) *paho.Client {
	t.Helper()
	c, rc := login(t, dialTCP(t, addr), paho.Connect{ClientID: id, CleanStart: true, Username: user, Password: []byte("pw-" + user)}, rcv)
	if rc != 0 {
		t.Fatalf("connect %s as %s: reason %#x", id, user, rc)
	}
	return c
}

func TestAuthConnect(t *testing.T) {
	f := startAuthServer(t, nil)
	will := &paho.WillMessage{Topic: "factory/sensor-b/status", Payload: []byte("gone")}
	for _, tc := range []struct {
		name string
		cp   paho.Connect
		want byte
	}{
		{"anonymous", paho.Connect{ClientID: "anon"}, 0x87},
		{"wrong password", paho.Connect{ClientID: "sensor-a", Username: "sensor-a", Password: []byte("nope")}, 0x86},
		{"unknown user", paho.Connect{ClientID: "mallory", Username: "mallory", Password: []byte("pw-mallory")}, 0x86},
		{"user without password", paho.Connect{ClientID: "sensor-a", Username: "sensor-a"}, 0x86},
		{"password", paho.Connect{ClientID: "sensor-a", Username: "sensor-a", Password: []byte("pw-sensor-a")}, 0},
		{"client id of another device", paho.Connect{ClientID: "sensor-b", Username: "sensor-a", Password: []byte("pw-sensor-a")}, 0x87},
		{"client id with the user's prefix (a configured pattern)", paho.Connect{ClientID: "sensor-a-2", Username: "sensor-a", Password: []byte("pw-sensor-a")}, 0},
		{"client id assigned by the server", paho.Connect{Username: "sensor-a", Password: []byte("pw-sensor-a")}, 0},
		{"jwt", paho.Connect{ClientID: "sensor-b", Password: []byte(f.token(t, "sensor-b", time.Minute))}, 0},
		{"jwt with its user name", paho.Connect{ClientID: "sensor-b", Username: "sensor-b", Password: []byte(f.token(t, "sensor-b", time.Minute))}, 0},
		{"jwt of another user name", paho.Connect{ClientID: "sensor-b", Username: "sensor-a", Password: []byte(f.token(t, "sensor-b", time.Minute))}, 0x86},
		{"expired jwt", paho.Connect{ClientID: "sensor-b", Password: []byte(f.token(t, "sensor-b", -time.Hour))}, 0x86},
		{"jwt of another key", paho.Connect{ClientID: "sensor-b", Password: []byte((&authFixture{secret: []byte("another secret, as long as the first")}).token(t, "sensor-b", time.Minute))}, 0x86},
		{"will on a topic it may not publish", paho.Connect{ClientID: "sensor-a", Username: "sensor-a", Password: []byte("pw-sensor-a"), WillMessage: will}, 0x87},
		{"will on its own topic", paho.Connect{ClientID: "sensor-b", Username: "sensor-b", Password: []byte("pw-sensor-b"), WillMessage: will}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cp.CleanStart = true
			c, rc := login(t, dialTCP(t, f.tcp), tc.cp, nil)
			if rc != tc.want {
				t.Fatalf("CONNACK reason %#x, want %#x", rc, tc.want)
			}
			if c != nil {
				_ = c.Disconnect(&paho.Disconnect{})
			}
		})
	}
	if n := f.Stats().RefusedConnects; n != 9 {
		t.Errorf("RefusedConnects = %d, want 9", n)
	}
	for _, want := range []string{"reason=no_credentials", "reason=bad_password", "reason=unknown_user", "reason=token_expired",
		`resource=client_id:sensor-b`, `resource="topic:factory/sensor-b/status stream:default.mqtt"`} {
		if !strings.Contains(f.audit.String(), want) {
			t.Errorf("audit log lacks %q:\n%s", want, f.audit)
		}
	}
}

// rawConnectAuth is a CONNECT (clean start, keep-alive 60s) with a user
// name and password ("" = none).
func rawConnectAuth(level byte, clientID, user, pass string) []byte {
	flags := byte(0x02)
	if user != "" {
		flags |= 0x80
	}
	if pass != "" {
		flags |= 0x40
	}
	body := append(mqttString("MQTT"), level, flags, 0x00, 0x3c)
	if level == 5 {
		body = append(body, 0x00)
	}
	body = append(body, mqttString(clientID)...)
	if user != "" {
		body = append(body, mqttString(user)...)
	}
	if pass != "" {
		body = append(body, mqttString(pass)...)
	}
	return packet(0x10, body)
}

// connack3 sends a 3.1.1 CONNECT and returns the CONNACK's return code.
func connack3(t *testing.T, addr, clientID, user, pass string) (net.Conn, byte) {
	t.Helper()
	conn := dialRaw(t, addr, 0, "")
	if _, err := conn.Write(rawConnectAuth(4, clientID, user, pass)); err != nil {
		t.Fatal(err)
	}
	b := readFirst(t, conn)
	if b[0] != 0x20 || b[1] != 2 {
		t.Fatalf("not a 3.1.1 CONNACK: %x", b)
	}
	return conn, b[3]
}

func TestAuthConnect311(t *testing.T) {
	f := startAuthServer(t, nil)
	for _, tc := range []struct {
		name, id, user, pass string
		want                 byte
	}{
		{"anonymous", "anon", "", "", 0x05},
		{"wrong password", "sensor-a", "sensor-a", "nope", 0x04},
		{"unknown user", "mallory", "mallory", "x", 0x04},
		{"password", "sensor-a", "sensor-a", "pw-sensor-a", 0x00},
		{"client id of another device", "sensor-b", "sensor-a", "pw-sensor-a", 0x05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, rc := connack3(t, f.tcp, tc.id, tc.user, tc.pass)
			if rc != tc.want {
				t.Fatalf("CONNACK return code %#x, want %#x", rc, tc.want)
			}
			if rc != 0 {
				readUntilClosed(t, conn, 5*time.Second)
			}
		})
	}
}

func TestAuthPublish(t *testing.T) {
	f := startAuthServer(t, nil)
	var all received
	f.loginAs(t, "ops", "ops-watch", &all)
	subscribe(t, f.loginAs(t, "ops", "ops-sub", &all), "factory/#", 2)
	a := f.loginAs(t, "sensor-a", "sensor-a", nil)

	mustPublish(t, a, "factory/sensor-a/t", 1, "ok-1")
	mustPublish(t, a, "factory/sensor-a/t", 2, "ok-2")
	mustPublish(t, a, "factory/sensor-a/t", 0, "ok-0")
	for _, qos := range []byte{1, 2} {
		resp, _ := publish(t, a, &paho.Publish{Topic: "factory/sensor-b/t", QoS: qos, Payload: []byte("denied")})
		if resp == nil || resp.ReasonCode != 0x87 {
			t.Fatalf("denied qos %d publish: response %+v, want reason 0x87", qos, resp)
		}
	}
	if _, err := publish(t, a, &paho.Publish{Topic: "factory/sensor-b/t", QoS: 0, Payload: []byte("denied")}); err != nil {
		t.Fatal(err)
	}
	resp, _ := publish(t, a, &paho.Publish{Topic: "factory/sensor-b/r", QoS: 1, Retain: true, Payload: []byte("denied")})
	if resp == nil || resp.ReasonCode != 0x87 {
		t.Fatalf("denied retained publish: %+v", resp)
	}
	mustPublish(t, a, "factory/sensor-a/t", 1, "after") // the connection is still good

	testkit.Eventually(t, 5*time.Second, "4 accepted publishes", func() bool { return f.sink.len() == 4 })
	for _, r := range f.sink.records() {
		if r.Topic != "factory/sensor-a/t" || r.Principal != "sensor-a" || r.ClientID != "sensor-a" {
			t.Errorf("record %+v: want topic factory/sensor-a/t, principal and client id sensor-a", r)
		}
	}
	if n := f.Stats().RefusedUnauthorized; n != 4 {
		t.Errorf("RefusedUnauthorized = %d, want 4", n)
	}
	testkit.Eventually(t, 5*time.Second, "4 deliveries", func() bool { return len(all.all()) == 4 })
	time.Sleep(100 * time.Millisecond) // nothing else arrives
	for _, m := range all.all() {
		if m.Topic != "factory/sensor-a/t" {
			t.Errorf("delivered a denied publish: %s %q", m.Topic, m.Payload)
		}
	}
	var late received
	subscribe(t, f.loginAs(t, "ops", "ops-late", &late), "factory/#", 1)
	time.Sleep(100 * time.Millisecond)
	if n := len(late.all()); n != 0 {
		t.Errorf("a denied retained publish was retained: %d messages on subscribe", n)
	}
}

// TestAuthPublishTopicAlias: the ACL sees the topic an alias stands for
// (mochi's own ACL check runs before alias resolution).
func TestAuthPublishTopicAlias(t *testing.T) {
	f := startAuthServer(t, nil)
	conn := dialRaw(t, f.tcp, 0, "")
	if _, err := conn.Write(rawConnectAuth(5, "sensor-a", "sensor-a", "pw-sensor-a")); err != nil {
		t.Fatal(err)
	}
	if b := readFirst(t, conn); b[0] != 0x20 || b[3] != 0 {
		t.Fatalf("connack %x", b)
	}
	pub := func(id uint16, topic string, alias uint16) byte {
		body := mqttString(topic)
		body = binary.BigEndian.AppendUint16(body, id)
		body = append(body, 3, 0x23)
		body = binary.BigEndian.AppendUint16(body, alias)
		body = append(body, "x"...)
		if _, err := conn.Write(packet(0x32, body)); err != nil {
			t.Fatal(err)
		}
		b := readFirst(t, conn)
		if b[0] != 0x40 {
			t.Fatalf("not a PUBACK: %x", b)
		}
		if b[1] < 3 {
			return 0
		}
		return b[4]
	}
	if rc := pub(1, "factory/sensor-a/al", 1); rc != 0 {
		t.Fatalf("allowed publish setting alias 1: %#x", rc)
	}
	if rc := pub(2, "", 1); rc != 0 {
		t.Fatalf("allowed publish by alias 1: %#x", rc)
	}
	if rc := pub(3, "factory/sensor-b/al", 2); rc != 0x87 {
		t.Fatalf("denied publish setting alias 2: %#x", rc)
	}
	if rc := pub(4, "", 2); rc != 0x87 {
		t.Fatalf("denied publish by alias 2: %#x", rc)
	}
	if got := len(f.sink.byTopic("factory/sensor-a/al")); got != 2 || f.sink.len() != 2 {
		t.Fatalf("%d records (%d for the alias), want 2", f.sink.len(), got)
	}
}

// TestAuthPublish311: MQTT 3.1.1 has no negative PUBACK: a denied publish
// closes the connection [MQTT-3.3.5-2], at every QoS, and is not appended.
func TestAuthPublish311(t *testing.T) {
	f := startAuthServer(t, nil)
	for _, qos := range []byte{0, 1, 2} {
		conn, rc := connack3(t, f.tcp, "sensor-a", "sensor-a", "pw-sensor-a")
		if rc != 0 {
			t.Fatalf("connack %#x", rc)
		}
		if _, err := conn.Write(rawPublish(4, qos, 1, "factory/sensor-b/t", []byte("denied"))); err != nil {
			t.Fatal(err)
		}
		if b := readUntilClosed(t, conn, 5*time.Second); len(b) != 0 {
			t.Errorf("qos %d: server answered %x before closing", qos, b)
		}
	}
	if n := f.sink.len(); n != 0 {
		t.Errorf("%d denied publishes appended", n)
	}
}

func TestAuthSubscribe(t *testing.T) {
	f := startAuthServer(t, nil)
	ops := f.loginAs(t, "ops", "ops", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, topic := range []string{"factory/sensor-a/state", "factory/sensor-b/state"} {
		if _, err := ops.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte("retained " + topic)}); err != nil {
			t.Fatal(err)
		}
	}
	var got received
	a := f.loginAs(t, "sensor-a", "sensor-a", &got)
	sa, _ := a.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: "factory/sensor-a/#", QoS: 1}, {Topic: "factory/sensor-b/#", QoS: 1}, {Topic: "factory/+/state", QoS: 1},
		{Topic: "#", QoS: 1}, {Topic: "$share/g/factory/sensor-b/#", QoS: 1}, {Topic: "$share/g/factory/sensor-a/cmd", QoS: 1},
	}})
	want := []byte{1, 0x87, 0x87, 0x87, 0x87, 1}
	if sa == nil || string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK %+v, want reasons %v", sa, want)
	}
	mustPublish(t, ops, "factory/sensor-b/cmd", 1, "not for a")
	mustPublish(t, ops, "factory/sensor-a/cmd", 1, "for a")
	testkit.Eventually(t, 5*time.Second, "a's messages", func() bool { return len(got.all()) >= 2 })
	time.Sleep(100 * time.Millisecond)
	topics := map[string]int{}
	for _, m := range got.all() {
		topics[m.Topic]++
	}
	// The retained message of its own topic, and the command (once: mochi
	// merges a client's shared and ordinary subscriptions).
	if len(topics) != 2 || topics["factory/sensor-a/state"] != 1 || topics["factory/sensor-a/cmd"] != 1 {
		t.Fatalf("sensor-a received %v; want only its own topics", topics)
	}

	// reader may subscribe but not publish.
	var rd received
	r := f.loginAs(t, "reader", "reader", &rd)
	subscribe(t, r, "factory/#", 1)
	if resp, _ := publish(t, r, &paho.Publish{Topic: "factory/sensor-a/t", QoS: 1, Payload: []byte("x")}); resp == nil || resp.ReasonCode != 0x87 {
		t.Fatalf("reader's publish: %+v, want 0x87", resp)
	}
	testkit.Eventually(t, 5*time.Second, "reader gets the retained messages", func() bool { return len(rd.all()) == 2 })

	// MQTT 3.1.1: 0x80 for the denied filter only.
	conn, rc := connack3(t, f.tcp, "sensor-a-311", "sensor-a", "pw-sensor-a")
	if rc != 0 {
		t.Fatalf("connack %#x", rc)
	}
	body := binary.BigEndian.AppendUint16(nil, 7)
	body = append(append(body, mqttString("factory/sensor-a/x")...), 1)
	body = append(append(body, mqttString("factory/#")...), 1)
	if _, err := conn.Write(packet(0x82, body)); err != nil {
		t.Fatal(err)
	}
	if b := readFirst(t, conn); len(b) < 6 || b[0] != 0x90 || b[4] != 1 || b[5] != 0x80 {
		t.Fatalf("3.1.1 SUBACK %x, want codes 01 80", b)
	}
}

// TestAuthClientIDTakeover: a client id belongs to its principal: another
// principal is refused before mochi takes the session over, whether the
// session is connected or kept, and the holder keeps working.
func TestAuthClientIDTakeover(t *testing.T) {
	f := startAuthServer(t, nil)
	expiry := uint32(600)
	var got received
	a, rc := login(t, dialTCP(t, f.tcp), paho.Connect{ClientID: "sensor-a", Username: "sensor-a", Password: []byte("pw-sensor-a"),
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}, &got)
	if rc != 0 {
		t.Fatalf("connect: %#x", rc)
	}
	subscribe(t, a, "factory/sensor-a/cmd", 1)
	try := func(user string) byte {
		t.Helper()
		c, rc := login(t, dialTCP(t, f.tcp), paho.Connect{ClientID: "sensor-a", CleanStart: true, Username: user, Password: []byte("pw-" + user)}, nil)
		if c != nil {
			_ = c.Disconnect(&paho.Disconnect{})
		}
		return rc
	}
	if rc := try("sensor-b"); rc != 0x87 {
		t.Fatalf("sensor-b with sensor-a's client id: %#x, want 0x87", rc)
	}
	if rc := try("ops"); rc != 0x87 { // may use any id, but not a session of another principal
		t.Fatalf("ops with sensor-a's connected session: %#x, want 0x87", rc)
	}
	ops := f.loginAs(t, "ops", "ops", nil)
	mustPublish(t, a, "factory/sensor-a/t", 1, "still connected")
	mustPublish(t, ops, "factory/sensor-a/cmd", 1, "cmd-1")
	testkit.Eventually(t, 5*time.Second, "sensor-a still subscribed", func() bool { return len(got.all()) == 1 })

	// The session is kept after a disconnect: still sensor-a's.
	if err := a.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "sensor-a disconnected", func() bool { return f.Stats().Clients == 1 })
	mustPublish(t, ops, "factory/sensor-a/cmd", 1, "cmd-2") // queued in the kept session
	if rc := try("ops"); rc != 0x87 {
		t.Fatalf("ops with sensor-a's kept session: %#x, want 0x87", rc)
	}
	var back received
	conn := dialTCP(t, f.tcp)
	cfg := paho.ClientConfig{ClientID: "sensor-a", Conn: conn, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){back.add}}
	c := paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "sensor-a", KeepAlive: 30, Username: "sensor-a", UsernameFlag: true,
		Password: []byte("pw-sensor-a"), PasswordFlag: true, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || !ca.SessionPresent {
		t.Fatalf("sensor-a resuming its session: %+v %v", ca, err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	testkit.Eventually(t, 5*time.Second, "the queued command", func() bool { return len(back.all()) == 1 })
	mustPublish(t, c, "factory/sensor-a/t", 1, "resumed")
	if !strings.Contains(f.logs.String(), "its session belongs to another principal") {
		t.Errorf("no audit line for the session owner refusal:\n%s", f.logs)
	}
}

// TestAuthCertificate: a verified client certificate without a user name
// authenticates its CN.
func TestAuthCertificate(t *testing.T) {
	ca := testkit.NewCA(t)
	srv := ca.Server(t)
	f := startAuthServer(t, func(c *Config) {
		c.Limits.TLS = &tls.Config{Certificates: []tls.Certificate{srv.TLS(t)}, ClientCAs: ca.Pool,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	})
	dial := func(cert *testkit.CertFiles) net.Conn {
		cfg := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{cert.TLS(t)}
		}
		conn, err := tls.Dial("tcp", f.tcp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	a := ca.Client(t, "sensor-a")
	c, rc := login(t, dial(&a), paho.Connect{ClientID: "sensor-a", CleanStart: true}, nil)
	if rc != 0 {
		t.Fatalf("certificate login: %#x", rc)
	}
	mustPublish(t, c, "factory/sensor-a/t", 1, "by certificate")
	if r := f.sink.records(); len(r) != 1 || r[0].Principal != "sensor-a" {
		t.Fatalf("records %+v, want one of principal sensor-a", r)
	}
	if _, rc := login(t, dial(&a), paho.Connect{ClientID: "sensor-b", CleanStart: true}, nil); rc != 0x87 {
		t.Errorf("certificate of sensor-a with client id sensor-b: %#x, want 0x87", rc)
	}
	if _, rc := login(t, dial(nil), paho.Connect{ClientID: "sensor-a", CleanStart: true}, nil); rc != 0x87 {
		t.Errorf("TLS without certificate or password: %#x, want 0x87", rc)
	}
	other := testkit.NewCA(t).Client(t, "sensor-a")
	cfg := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{other.TLS(t)}}
	if conn, err := tls.Dial("tcp", f.tcp, cfg); err == nil {
		// TLS 1.3: the client learns of the refusal on its first read.
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write(rawConnect(5, "sensor-a"))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Errorf("a certificate of another CA was accepted")
		}
		conn.Close()
	}
}

// TestAuthOpen: an Authority with nothing to authenticate against admits
// every client (credentials or not) as anonymous, with every right.
func TestAuthOpen(t *testing.T) {
	a, err := auth.Open(auth.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *Config) { c.Auth = a })
	c, rc := login(t, dialTCP(t, ts.tcp), paho.Connect{ClientID: "x", CleanStart: true, Username: "someone", Password: []byte("anything")}, nil)
	if rc != 0 {
		t.Fatalf("connect: %#x", rc)
	}
	subscribe(t, c, "#", 1)
	mustPublish(t, c, "any/topic", 1, "x")
	if r := ts.sink.records(); len(r) != 1 || r[0].Principal != "" {
		t.Fatalf("records %+v, want one anonymous", r)
	}
}

// TestAuthForwarded: a publish another node accepted (and authorized)
// is not checked again where it is delivered, but reaches only the local
// subscriptions that were allowed.
func TestAuthForwarded(t *testing.T) {
	var audits []*testkit.SyncBuffer
	tc := startClusterWith(t, 2, func(c *Config) {
		var audit *testkit.SyncBuffer
		c.Auth, _, audit = newTestAuthority(t)
		audits = append(audits, audit)
	})
	n1, n2 := tc.nodes[0], tc.nodes[1]
	var rd, a received
	subscribe(t, loginAt(t, n2.tcp, "reader", "reader", &rd), "factory/#", 1)
	sa := loginAt(t, n2.tcp, "sensor-a", "sensor-a", &a)
	subscribe(t, sa, "factory/sensor-a/#", 1)
	tc.waitRemote(t, 0, 2)

	b := loginAt(t, n1.tcp, "sensor-b", "sensor-b", nil)
	mustPublish(t, b, "factory/sensor-b/t", 1, "from b")
	testkit.Eventually(t, 5*time.Second, "the reader on n2 gets b's publish", func() bool { return len(rd.all()) == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := len(a.all()); n != 0 {
		t.Fatalf("sensor-a received %d of sensor-b's publishes", n)
	}
	if got := n2.ClusterStats().ForwardedIn; got != 1 {
		t.Fatalf("n2 forwarded in: %d", got)
	}
	if strings.Contains(audits[1].String(), "denied") {
		t.Fatalf("n2 denied something:\n%s", audits[1])
	}
	if r := n1.sink.records(); len(r) != 1 || r[0].Principal != "sensor-b" || n2.sink.len() != 0 {
		t.Fatalf("n1 records %+v, n2 %d", r, n2.sink.len())
	}
}

// TestAuthHolders: the client-id holder table by itself — a connect in
// progress holds its id against another principal (before mochi lists
// the client), the same principal takes over, and the connection taken
// over keeps its principal until it is forgotten.
func TestAuthHolders(t *testing.T) {
	f := startAuthServer(t, nil)
	h, c := f.auth, auth.Client{Protocol: "mqtt"}
	a, b := auth.Principal{Name: "ops"}, auth.Principal{Name: "other-admin"}
	first, second, third := &mochi.Client{ID: "x"}, &mochi.Client{ID: "x"}, &mochi.Client{ID: "x"}
	if err := h.hold(c, a, first); err != nil {
		t.Fatal(err)
	}
	if err := h.hold(c, b, second); !errors.Is(err, auth.ErrDenied) {
		t.Fatalf("another principal while the first connects: %v", err)
	}
	if err := h.hold(c, a, third); err != nil {
		t.Fatalf("the same principal: %v", err)
	}
	for _, cl := range []*mochi.Client{first, third} {
		if p, ok := h.principal(cl); !ok || p.Name != "ops" {
			t.Fatalf("principal of holder or taken-over client: %v %v", p, ok)
		}
	}
	if _, ok := h.principal(second); ok {
		t.Fatal("the refused client has a principal")
	}
	h.forget(first)
	if _, ok := h.principal(first); ok {
		t.Fatal("forgotten client still has a principal")
	}
	if _, ok := h.principal(third); !ok {
		t.Fatal("forgetting the old client dropped the holder")
	}
	h.forget(third)
	if err := h.hold(c, b, second); err != nil {
		t.Fatalf("the id is free again: %v", err)
	}
}

// slowDisconnect holds mochi in OnDisconnect after the auth hook's (hooks
// run in the order added), widening the window in which a session that
// ends with its connection is forgotten by the auth hook but still in the
// broker's clients.
type slowDisconnect struct {
	mochi.HookBase
	delay time.Duration
}

func (h *slowDisconnect) ID() string { return "test-slow-disconnect" }
func (h *slowDisconnect) Provides(b byte) bool {
	return b == mochi.OnDisconnect
}
func (h *slowDisconnect) OnDisconnect(cl *mochi.Client, err error, expire bool) { time.Sleep(h.delay) }

// TestQuickReconnectSameID: a client whose connection just ended
// reconnects with the same client id before the broker has dropped its
// ending session; the CONNECT must be accepted (it was refused "not
// authorized" in that window, under load).
func TestQuickReconnectSameID(t *testing.T) {
	ts := startServer(t, nil)
	if err := ts.broker.AddHook(&slowDisconnect{delay: 500 * time.Millisecond}, nil); err != nil {
		t.Fatal(err)
	}
	for _, level := range []byte{4, 5} {
		first := dialRaw(t, ts.tcp, level, "quick")
		first.Close()
		time.Sleep(100 * time.Millisecond) // inside the 500 ms window
		if _, ok := ts.broker.Clients.Get("quick"); !ok {
			t.Fatal("the ended session is already gone: the test does not reach the window")
		}
		again := dialRaw(t, ts.tcp, level, "quick") // fails the test on a refused CONNACK
		again.Close()
		time.Sleep(600 * time.Millisecond)
	}
}

// TestAuthClientIDDefaults: by default a principal may use its own name
// as client id and nothing else — user sensor cannot take device
// sensor-1's id (and its cmd/sensor-1 commands) — and an anonymous client
// gets an id the server assigns (MQTT 5 Assigned Client Identifier; 3.1.1
// an empty id with clean session) unless a rule lists client ids for it
// (TestAuthConnect: a configured "%u-*" keeps working; auth's TestACL:
// anonymous patterns).
func TestAuthClientIDDefaults(t *testing.T) {
	a := openAuthority(t, []string{"sensor", "sensor-1"}, []auth.Rule{
		{Principal: "sensor*", Allow: []auth.Action{auth.Publish, auth.Subscribe}, Topics: []string{"cmd/%c", "factory/%u/#"}},
		{Principal: "anonymous", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"public/#"}},
	})
	f := startServer(t, func(c *Config) { c.Auth = a })
	for _, tc := range []struct {
		name string
		cp   paho.Connect
		want byte
	}{
		{"another principal's name", paho.Connect{ClientID: "sensor-1", Username: "sensor", Password: []byte("pw-sensor")}, 0x87},
		{"its own name", paho.Connect{ClientID: "sensor-1", Username: "sensor-1", Password: []byte("pw-sensor-1")}, 0},
		{"anonymous with an id", paho.Connect{ClientID: "free-id"}, 0x87},
		{"anonymous with a device's id", paho.Connect{ClientID: "sensor-2"}, 0x87},
		{"anonymous without an id", paho.Connect{}, 0},
	} {
		tc.cp.CleanStart = true
		c, rc := login(t, dialTCP(t, f.tcp), tc.cp, nil)
		if rc != tc.want {
			t.Errorf("%s: CONNACK reason %#x, want %#x", tc.name, rc, tc.want)
		}
		if c != nil {
			_ = c.Disconnect(&paho.Disconnect{})
		}
	}
	for _, tc := range []struct {
		name, id string
		want     byte
	}{{"anonymous with an id", "free-id", 0x05}, {"anonymous without an id", "", 0x00}} {
		conn, rc := connack3(t, f.tcp, tc.id, "", "")
		if rc != tc.want {
			t.Errorf("3.1.1 %s: return code %#x, want %#x", tc.name, rc, tc.want)
		}
		conn.Close()
	}
}

// openAuthority is an Authority with users (password "pw-" + name) and
// rules, anonymous clients allowed with the rules of principal anonymous.
func openAuthority(t *testing.T, users []string, rules []auth.Rule) *auth.Authority {
	t.Helper()
	file := filepath.Join(t.TempDir(), "passwd")
	for _, u := range users {
		if err := auth.SetPassword(file, u, []byte("pw-"+u)); err != nil {
			t.Fatal(err)
		}
	}
	yes := true
	a, err := auth.Open(auth.Config{AllowAnonymous: &yes, UsersFile: file, ACL: rules},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAuthPublishStreams: a publish rule's streams are checked on the
// stream the route picks for the topic (the fixture routes sensors/+/temp
// to plant.temps, the rest of sensors/# to plant.sensors, everything else
// to default.mqtt), so topic wildcards do not reach every stream; a will
// likewise. Publishes inside the rule's streams are accepted.
func TestAuthPublishStreams(t *testing.T) {
	a := openAuthority(t, []string{"sensor-a", "ops"}, []auth.Rule{
		{Principal: "sensor-a", Allow: []auth.Action{auth.Publish}, Topics: []string{"#"}, Streams: []string{"plant.temps"}},
		{Principal: "ops", Allow: []auth.Action{auth.Admin}},
	})
	f := startServer(t, func(c *Config) { c.Auth = a })
	c := loginAt(t, f.tcp, "sensor-a", "sensor-a", nil)
	mustPublish(t, c, "sensors/a/temp", 1, "in its stream")
	for _, topic := range []string{"sensors/a/humidity", "elsewhere/x"} { // plant.sensors, default.mqtt
		for _, qos := range []byte{1, 2} {
			resp, _ := publish(t, c, &paho.Publish{Topic: topic, QoS: qos, Payload: []byte("other stream")})
			if resp == nil || resp.ReasonCode != 0x87 {
				t.Fatalf("qos %d publish to %s (another stream): response %+v, want reason 0x87", qos, topic, resp)
			}
		}
	}
	mustPublish(t, c, "sensors/b/temp", 2, "still in its stream")
	ops := loginAt(t, f.tcp, "ops", "ops", nil)
	mustPublish(t, ops, "elsewhere/x", 1, "admin") // an admin's rule has no streams to keep to
	testkit.Eventually(t, 5*time.Second, "3 accepted publishes", func() bool { return f.sink.len() == 3 })
	for _, r := range f.sink.records() {
		if string(r.Value) == "other stream" {
			t.Errorf("a publish outside the rule's streams was appended: %s to %s", r.Topic, r.Stream)
		}
	}
	for _, tc := range []struct {
		topic string
		want  byte
	}{{"sensors/a/status", 0x87}, {"sensors/a/temp", 0}} {
		cl, rc := login(t, dialTCP(t, f.tcp), paho.Connect{ClientID: "sensor-a", CleanStart: true, Username: "sensor-a",
			Password: []byte("pw-sensor-a"), WillMessage: &paho.WillMessage{Topic: tc.topic, Payload: []byte("gone")}}, nil)
		if rc != tc.want {
			t.Errorf("will on %s: CONNACK %#x, want %#x", tc.topic, rc, tc.want)
		}
		if cl != nil {
			_ = cl.Disconnect(&paho.Disconnect{})
		}
	}
}

// TestAuthShareGroup: a $share group is checked against the rule's
// groups (as in the cloud and for Kafka, Pulsar, gRPC and HTTP groups):
// mallory cannot join team-a's group and divert its messages; team-a
// can, and receives them.
func TestAuthShareGroup(t *testing.T) {
	a := openAuthority(t, []string{"team-a", "mallory", "ops"}, []auth.Rule{
		{Principal: "team-a", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"factory/#"}, Groups: []string{"team-a"}},
		{Principal: "mallory", Allow: []auth.Action{auth.Subscribe}, Topics: []string{"#"}, Groups: []string{"mallory-*"}},
		{Principal: "ops", Allow: []auth.Action{auth.Admin}},
	})
	f := startServer(t, func(c *Config) { c.Auth = a })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := loginAt(t, f.tcp, "mallory", "mallory", nil)
	sa, _ := m.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: "$share/team-a/factory/#", QoS: 1}, {Topic: "$share/mallory-1/factory/#", QoS: 1}}})
	if sa == nil || len(sa.Reasons) != 2 || sa.Reasons[0] != 0x87 || sa.Reasons[1] != 1 {
		t.Fatalf("mallory's SUBACK %+v, want 0x87 for team-a's group, 1 for its own", sa)
	}
	var got received
	subscribe(t, loginAt(t, f.tcp, "team-a", "team-a", &got), "$share/team-a/factory/#", 1)
	mustPublish(t, loginAt(t, f.tcp, "ops", "ops", nil), "factory/x", 1, "for team-a")
	testkit.Eventually(t, 5*time.Second, "team-a's group receives the message", func() bool { return len(got.all()) == 1 })
}
