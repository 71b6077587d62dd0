package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

func splitLines(s string) []string { return strings.Split(s, "\n") }
func contains(s, sub string) bool  { return strings.Contains(s, sub) }

// TestBadInput: malformed packets, oversize payloads and invalid topic
// names while a good client publishes: bad connections are closed or
// refused, the node keeps serving, and nothing accepted is lost.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	ctx := context.Background()
	l := newLedger()
	var wg sync.WaitGroup
	wg.Add(1)
	goodErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		cl, err := mqttClient(ctx, p.MQTT, "good")
		if err != nil {
			goodErr <- err
			return
		}
		defer cl.Disconnect(&paho.Disconnect{})
		if _, err := publishN(ctx, cl, l, "good", 0, 2000); err != nil {
			goodErr <- err
		}
	}()

	connect := []byte{0x10, 0x10, 0x00, 0x04, 'M', 'Q', 'T', 'T', 0x04, 0x02, 0x00, 0x3c, 0x00, 0x04, 'b', 'a', 'd', '1'}
	garbage := [][]byte{
		{0xff, 0xff, 0xff, 0xff, 0xff},                                                     // invalid remaining length
		{0x30, 0x05, 0x00, 0x01, 'a'},                                                      // publish before connect
		append(append([]byte{}, connect...), 0xf0, 0x00),                                   // reserved packet type 15
		append(append([]byte{}, connect...), 0x30, 0x06, 0x00, 0x04, 0xc3, 0x28, 'a', 'b'), // invalid UTF-8 topic
		bytes.Repeat([]byte{0x00}, 64),
	}
	for i, g := range garbage {
		if err := expectClosed(p.MQTT, g, false); err != nil {
			t.Errorf("garbage %d: %v", i, err)
		}
	}
	// A truncated publish, then the client goes away mid-frame.
	if err := expectClosed(p.MQTT, append(append([]byte{}, connect...), 0x32, 0x7f, 0x00), true); err != nil {
		t.Errorf("truncated frame: %v", err)
	}

	// A wildcard in a publish topic and an oversize payload are refused.
	cl, err := mqttClient(ctx, p.MQTT, "bad-topics")
	if err != nil {
		t.Fatal(err)
	}
	if pr, err := cl.Publish(ctx, &paho.Publish{Topic: "factory/+/x", QoS: 1, Payload: []byte("x")}); err == nil && pr.ReasonCode < 0x80 {
		t.Errorf("publish to a wildcard topic was accepted")
	}
	cl2, err := mqttClient(ctx, p.MQTT, "oversize")
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	pr, err := cl2.Publish(pctx, &paho.Publish{Topic: "factory/big", QoS: 1, Payload: make([]byte, 2<<20)})
	cancel()
	if err == nil && pr.ReasonCode < 0x80 {
		t.Errorf("2 MiB publish accepted although max packet size is 1 MiB")
	}

	wg.Wait()
	select {
	case err := <-goodErr:
		t.Fatalf("good client failed while bad input arrived: %v", err)
	default:
	}
	p.stop()
	rows := readTable(t, dir, "factory.telemetry")
	checkDense(t, rows)
	checkRows(t, l, rows)
	if len(rows) != 2000 {
		t.Fatalf("%d rows, want the good client's 2000", len(rows))
	}
}

// expectClosed writes b on a fresh connection and expects the server to
// close it (possibly after a CONNACK or DISCONNECT) within 10 s.
func expectClosed(addr string, b []byte, halfClose bool) error {
	return expectClosedWithin(addr, b, halfClose, 10*time.Second)
}

// expectClosedWithin is expectClosed with the time the server has.
func expectClosedWithin(addr string, b []byte, halfClose bool, d time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		return nil // already closed
	}
	if halfClose {
		c.(*net.TCPConn).CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 1024)
	for {
		_, err := c.Read(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return fmt.Errorf("connection still open %s after malformed input %x", d, b)
			}
			return nil
		}
	}
}
