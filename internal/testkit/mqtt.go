package testkit

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// MQTTConnect connects an MQTT 5 paho client over conn. The user name and
// password flags follow cp.Username and cp.Password (nil = none); keep-alive
// 0 becomes 30 s. It returns the CONNACK's reason code and, on success, the
// client, disconnected at the end of the test (on a refusal conn is
// closed). onPublish, when set, receives the client's messages. A CONNECT
// without any CONNACK fails the test. The client's errors and a DISCONNECT
// from the server are kept and logged if the test fails.
func MQTTConnect(tb testing.TB, conn net.Conn, cp paho.Connect, onPublish func(paho.PublishReceived) (bool, error)) (*paho.Client, byte) {
	tb.Helper()
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(format string, args ...any) {
		mu.Lock()
		events = append(events, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if tb.Failed() && len(events) > 0 {
			tb.Logf("MQTT client %s (local %s):\n  %s", cp.ClientID, conn.LocalAddr(), strings.Join(events, "\n  "))
		}
	})
	cfg := paho.ClientConfig{ClientID: cp.ClientID, Conn: conn,
		OnClientError: func(err error) { note("client error: %v", err) },
		OnServerDisconnect: func(d *paho.Disconnect) {
			reason := ""
			if d.Properties != nil {
				reason = d.Properties.ReasonString
			}
			note("server DISCONNECT %#x %q", d.ReasonCode, reason)
		},
	}
	if onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onPublish}
	}
	c := paho.NewClient(cfg)
	cp.UsernameFlag, cp.PasswordFlag = cp.Username != "", cp.Password != nil
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &cp)
	if ca == nil {
		tb.Fatalf("connect %s: no CONNACK: %v", cp.ClientID, err)
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, ca.ReasonCode
	}
	tb.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, 0
}

// MQTT wire encoders for tests that write raw packets (bad input,
// hostile clients, fuzz seeds).

// MQTTVarint is n as an MQTT variable byte integer (a remaining length).
func MQTTVarint(n int) []byte {
	var b []byte
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// MQTTString is s as an MQTT UTF-8 string (two-byte length, bytes).
func MQTTString(s string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}

// MQTTPacket is a packet: first byte (type and flags), remaining length, body.
func MQTTPacket(first byte, body []byte) []byte {
	return append(append([]byte{first}, MQTTVarint(len(body))...), body...)
}
