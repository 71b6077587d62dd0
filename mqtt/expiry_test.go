package mqtt

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestAuthTokenExpiryDisconnects: a client that connected with a JWT is
// disconnected with DISCONNECT 0xA0 (maximum connect time) naming the
// expiry when its token expires; a password client stays connected.
func TestAuthTokenExpiryDisconnects(t *testing.T) {
	f := startAuthServer(t, nil)
	disc := make(chan *paho.Disconnect, 1)
	conn := dialTCP(t, f.tcp)
	c := paho.NewClient(paho.ClientConfig{ClientID: "sensor-b", Conn: conn, OnClientError: func(error) {},
		OnServerDisconnect: func(d *paho.Disconnect) { disc <- d }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "sensor-b", CleanStart: true, KeepAlive: 30, PasswordFlag: true,
		Password: []byte(f.token(t, "sensor-b", 2*time.Second))})
	if err != nil || ca.ReasonCode != 0 {
		t.Fatalf("connect with a token: %v %+v", err, ca)
	}
	t.Cleanup(func() { conn.Close() })
	steady := f.loginAs(t, "sensor-a", "sensor-a", nil)

	select {
	case d := <-disc:
		reason := ""
		if d.Properties != nil {
			reason = d.Properties.ReasonString
		}
		if d.ReasonCode != 0xA0 {
			t.Fatalf("DISCONNECT %#x %q, want 0xa0 (maximum connect time)", d.ReasonCode, reason)
		}
		t.Logf("DISCONNECT %#x %q", d.ReasonCode, reason)
	case <-time.After(20 * time.Second):
		t.Fatal("the token expired 18s ago and the connection is still open")
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the client is not done after the server's DISCONNECT")
	}
	// The password client is still served.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := steady.Subscribe(ctx2, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "factory/sensor-a/#"}}}); err != nil {
		t.Fatalf("the password client after the other's expiry: %v", err)
	}
}

// TestAuthTokenExpiryClosesV311: an MQTT 3.1.1 client (mosquitto_sub),
// which has no server DISCONNECT, has its connection closed at its
// token's expiry; its reconnect with the expired token is refused, and
// mosquitto_sub gives up.
func TestAuthTokenExpiryClosesV311(t *testing.T) {
	f := startAuthServer(t, nil)
	host, port, _ := net.SplitHostPort(f.tcp)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "stdbuf", "-oL", "mosquitto_sub", "-V", "mqttv311", "-h", host, "-p", port, "-i", "sensor-b",
		"-u", "sensor-b", "-P", f.token(t, "sensor-b", 2*time.Second), "-t", "factory/sensor-b/#", "-k", "30", "-d") // -d: its story, logged
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mosquitto_sub still connected 23s after its token expired: %v %s\n%s", err, out, f.audit.String())
	}
	if !strings.Contains(f.audit.String(), "token_expired") {
		t.Fatalf("no token_expired refusal of the reconnect in the audit log; mosquitto_sub said %v %s", err, out)
	}
	t.Logf("mosquitto_sub: %v %s", err, out)
}
