package mqtt

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary/internal/testkit"
)

// ackModes are the two acknowledgement paths every MQTT 5 behaviour is
// checked on, so that they cannot drift: the pipeline (acks.go, the
// default with a PipelinedSink) and the blocking hook (Config.BlockingAcks).
var ackModes = []struct {
	name     string
	blocking bool
}{{"pipelined", false}, {"blocking", true}}

// dialSession connects an MQTT 5 paho client with a session expiry;
// rcv (optional) collects what it receives. It returns the client and
// whether the server had a session.
func dialSession(t testing.TB, addr, id string, rcv *received, clean bool, expiry uint32, mutate func(*paho.ClientConfig, *paho.Connect)) (*paho.Client, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	cfg := paho.ClientConfig{ClientID: id, Conn: conn}
	if rcv != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){rcv.add}
	}
	cp := &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
	if mutate != nil {
		mutate(&cfg, cp)
	}
	c := paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	if ca.ReasonCode != 0 {
		t.Fatalf("connect %s: reason %#x", id, ca.ReasonCode)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ca.SessionPresent
}

// offlineInflight is the number of messages mochi holds for the kept
// session of id (-1: no session).
func offlineInflight(ts *testServer, id string) int {
	cl, ok := ts.broker.Clients.Get(id)
	if !ok {
		return -1
	}
	return cl.State.Inflight.Len()
}

// TestMQTT5ExpiryOfflineSession: messages queued for a persistent session
// while it is offline expire [MQTT-3.3.2-5] and the unexpired one arrives
// with its remaining interval [MQTT-3.3.2-6], on both acknowledgement
// paths, published on the subscriber's node and on another node.
func TestMQTT5ExpiryOfflineSession(t *testing.T) {
	for _, mode := range ackModes {
		for _, where := range []string{"one node", "cluster"} {
			t.Run(mode.name+"/"+where, func(t *testing.T) {
				var pubNode, subNode *testServer
				if where == "one node" {
					pubNode = startServer(t, func(c *Config) { c.BlockingAcks = mode.blocking; c.WSAddr = "" })
					subNode = pubNode
				} else {
					tc := startClusterWith(t, 2, func(c *Config) { c.BlockingAcks = mode.blocking })
					pubNode, subNode = tc.nodes[0], tc.nodes[1]
				}
				sub, _ := dialSession(t, subNode.tcp, "expiry-sub", nil, true, 3600, nil)
				subscribe(t, sub, "exp/#", 1)
				if pubNode != subNode {
					testkit.Eventually(t, 5*time.Second, "the publisher's node knows the subscription",
						func() bool { return pubNode.ClusterStats().RemoteSubscriptions == 1 })
				}
				if err := sub.Disconnect(&paho.Disconnect{}); err != nil {
					t.Fatal(err)
				}
				testkit.Eventually(t, 5*time.Second, "subscriber offline", func() bool { return subNode.Stats().Clients == 0 })

				pub := dialPaho(t, pubNode.tcp, "expiry-pub", nil)
				start := time.Now()
				for i, exp := range []uint32{1, 1, 3600} {
					e := exp
					resp, err := publish(t, pub, &paho.Publish{Topic: "exp/t", QoS: 1, Payload: []byte(fmt.Sprint(i)),
						Properties: &paho.PublishProperties{MessageExpiry: &e}})
					if err != nil || resp.ReasonCode != 0 {
						t.Fatalf("publish %d: %v %+v", i, err, resp)
					}
				}
				testkit.Eventually(t, 5*time.Second, "three messages queued for the offline session",
					func() bool { return offlineInflight(subNode, "expiry-sub") == 3 })
				// mochi's sweep (once a second) drops the two whose interval passed.
				testkit.Eventually(t, 10*time.Second, "expired messages dropped from the offline session",
					func() bool { return offlineInflight(subNode, "expiry-sub") == 1 })
				testkit.Eventually(t, 10*time.Second, "waited 3 s", func() bool { return time.Since(start) >= 3*time.Second })

				var rcv received
				_, present := dialSession(t, subNode.tcp, "expiry-sub", &rcv, false, 3600, nil)
				if !present {
					t.Fatal("session not present")
				}
				waited := time.Since(start)
				testkit.Eventually(t, 5*time.Second, "the unexpired message delivered", func() bool { return len(rcv.all()) >= 1 })
				// A message the expired ones would come before: give them
				// the chance of the one that arrived.
				got := rcv.all()
				if len(got) != 1 || string(got[0].Payload) != "2" {
					t.Fatalf("received %s, want only [2]", payloads(&rcv))
				}
				p := got[0].Properties
				if p == nil || p.MessageExpiry == nil {
					t.Fatalf("no message expiry interval: %+v", p)
				}
				left := int(*p.MessageExpiry)
				if max := 3600 - int(waited.Seconds()) + 1; left > max || left < 3600-int(waited.Seconds())-10 {
					t.Fatalf("remaining expiry %d s after waiting %v, want about %d", left, waited, 3600-int(waited.Seconds()))
				}
			})
		}
	}
}
