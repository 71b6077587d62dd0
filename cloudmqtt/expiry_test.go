package cloudmqtt

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
)

// TestTokenExpiryDisconnects: a subscriber that connected with a JWT is
// disconnected with DISCONNECT 0xA0 (maximum connect time) naming the
// expiry when its token expires.
func TestTokenExpiryDisconnects(t *testing.T) {
	_, cat := testServer(t, 3)
	dir := t.TempDir()
	secret := []byte("a cloud mqtt test secret of enough length")
	secretFile := filepath.Join(dir, "jwt.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	off := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &off, JWT: auth.JWTConfig{SecretFile: secretFile},
		ACL: []auth.Rule{{Principal: "reader", Allow: []auth.Action{auth.Subscribe}}}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Addr: "127.0.0.1:0", SessionsDB: "sqlite://" + filepath.Join(dir, "sessions.db"), Auth: a,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, tables.NewReader(cat, tables.ReaderConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})

	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	disc := make(chan *paho.Disconnect, 1)
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
		OnServerDisconnect: func(d *paho.Disconnect) { disc <- d }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "reader", CleanStart: true, KeepAlive: 30, PasswordFlag: true,
		Password: []byte(testkit.HS256Token(t, secret, "reader", 2*time.Second))})
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect with a token: %v %+v", err, ca)
	}
	if sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$stream/" + testStream + "/#"}}}); err != nil || sa.Reasons[0] >= 0x80 {
		t.Fatalf("subscribe: %v %+v", err, sa)
	}
	select {
	case d := <-disc:
		reason := ""
		if d.Properties != nil {
			reason = d.Properties.ReasonString
		}
		if d.ReasonCode != 0xA0 {
			t.Fatalf("DISCONNECT %#x %q, want 0xa0 (maximum connect time)", d.ReasonCode, reason)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the token expired 18s ago and the connection is still open")
	}
}
