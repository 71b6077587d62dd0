package e2e

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// sent is one publish the test made and whether its PUBACK arrived.
type sent struct {
	ID      string // unique, also the payload prefix
	Topic   string
	Payload []byte
	Props   paho.UserProperties
	Acked   bool
}

// ledger records every publish by id.
type ledger struct {
	mu   sync.Mutex
	msgs map[string]*sent
}

func newLedger() *ledger { return &ledger{msgs: map[string]*sent{}} }

func (l *ledger) add(s *sent) {
	l.mu.Lock()
	l.msgs[s.ID] = s
	l.mu.Unlock()
}

func (l *ledger) ack(id string) {
	l.mu.Lock()
	l.msgs[id].Acked = true
	l.mu.Unlock()
}

func (l *ledger) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m.Acked {
			n++
		}
	}
	return n
}

// mqttClient connects a paho MQTT 5 client.
func mqttClient(ctx context.Context, addr, clientID string) (*paho.Client, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {}})
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect %s: %w", clientID, err)
	}
	if ca.ReasonCode != 0 {
		conn.Close()
		return nil, fmt.Errorf("connect %s: reason code 0x%02x", clientID, ca.ReasonCode)
	}
	return c, nil
}

// publishN publishes n QoS 1 messages from one client in order, each with
// a unique id, two user properties and a binary tail, recording each in
// the ledger before sending and marking it acked on PUBACK success. It
// stops at the first error (e.g. the node was killed) and returns it.
func publishN(ctx context.Context, c *paho.Client, l *ledger, client string, start, n int) (int, error) {
	return publishNWith(ctx, c, l, client, start, n, func(id string, i int) []byte {
		return append([]byte(fmt.Sprintf(`{"id":"%s","v":%d}`, id, i)), 0x00, 0xff, byte(i))
	})
}

// publishNWith is publishN with the payloads made by payload (which must
// start with {"id":"<id>": see idOf).
func publishNWith(ctx context.Context, c *paho.Client, l *ledger, client string, start, n int, payload func(id string, i int) []byte) (int, error) {
	for i := start; i < start+n; i++ {
		id := fmt.Sprintf("%s-%06d", client, i)
		payload := payload(id, i)
		s := &sent{ID: id, Topic: fmt.Sprintf("factory/line%d/%s/telemetry", i%3, client), Payload: payload,
			Props: paho.UserProperties{{Key: "device", Value: client}, {Key: "seq", Value: fmt.Sprint(i)}}}
		l.add(s)
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		pr, err := c.Publish(pctx, &paho.Publish{Topic: s.Topic, QoS: 1, Payload: payload,
			Properties: &paho.PublishProperties{User: s.Props}})
		cancel()
		if err != nil {
			return i - start, err
		}
		if pr.ReasonCode >= 0x80 {
			return i - start, fmt.Errorf("publish %s refused: reason 0x%02x", id, pr.ReasonCode)
		}
		l.ack(id)
	}
	return n, nil
}
