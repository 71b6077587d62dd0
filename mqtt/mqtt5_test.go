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
// default) and the blocking hook (Config.BlockingAcks).
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
				sent := time.Now()
				testkit.Eventually(t, 5*time.Second, "three messages queued for the offline session",
					func() bool { return offlineInflight(subNode, "expiry-sub") == 3 })
				// mochi's sweep (once a second) drops the two whose interval passed.
				testkit.Eventually(t, 10*time.Second, "expired messages dropped from the offline session",
					func() bool { return offlineInflight(subNode, "expiry-sub") == 1 })
				testkit.Eventually(t, 10*time.Second, "waited 3 s", func() bool { return time.Since(start) >= 3*time.Second })

				var rcv received
				resumed := time.Now()
				_, present := dialSession(t, subNode.tcp, "expiry-sub", &rcv, false, 3600, nil)
				if !present {
					t.Fatal("session not present")
				}
				testkit.Eventually(t, 5*time.Second, "the unexpired message delivered", func() bool { return len(rcv.all()) >= 1 })
				got := rcv.all()
				if len(got) != 1 || string(got[0].Payload) != "2" {
					t.Fatalf("received %s, want only [2]", payloads(&rcv))
				}
				p := got[0].Properties
				if p == nil || p.MessageExpiry == nil {
					t.Fatalf("no message expiry interval: %+v", p)
				}
				// Created after start and before sent, delivered after
				// resumed and before now.
				left := int(*p.MessageExpiry)
				if hi, lo := 3600-int(resumed.Sub(sent).Seconds()), 3600-int(time.Since(start).Seconds())-1; left > hi || left < lo || hi >= 3600 {
					t.Fatalf("remaining expiry %d s, want %d to %d", left, lo, hi)
				}
			})
		}
	}
}

// live drops the copies of a payload received more than once, keeping
// one without the retain flag if there is one: mochi (v2.7.9) writes the
// SUBACK before it sends the retained messages of the new subscription,
// so a retained publish made just after the SUBACK can also arrive as
// retained-on-subscribe (flag set) beside its live copy.
func live(msgs []*paho.Publish) []*paho.Publish {
	var out []*paho.Publish
	at := map[string]int{}
	for _, m := range msgs {
		i, ok := at[string(m.Payload)]
		switch {
		case !ok:
			at[string(m.Payload)] = len(out)
			out = append(out, m)
		case out[i].Retain && !m.Retain:
			out[i] = m
		}
	}
	return out
}

// TestMQTT5PropertiesDelivered: the MQTT 5 properties of a publish and the
// subscription options reach subscribers the same way on both ack paths
// (the pipeline delivers through an inline client, the blocking hook
// through mochi's own path): payload format indicator, content type,
// response topic, correlation data, user properties in order,
// subscription identifiers, topic aliases (the publisher's resolved, the
// subscriber's own assigned), retain-as-published and no-local.
// propSub is a subscriber of TestMQTT5PropertiesDelivered.
type propSub struct {
	id     string
	opts   paho.SubscribeOptions
	subID  int    // subscription identifier, 0: none
	aliasM uint16 // the subscriber's Topic Alias Maximum
}

// propPub is a publish of TestMQTT5PropertiesDelivered.
type propPub struct {
	topic  string
	retain bool
	props  *paho.PublishProperties
}

func TestMQTT5PropertiesDelivered(t *testing.T) {
	u8 := func(b byte) *byte { return &b }
	u16 := func(v uint16) *uint16 { return &v }
	cases := []struct {
		name  string
		subs  []propSub
		pubs  []propPub
		check func(t *testing.T, got map[string][]*paho.Publish)
	}{
		{
			// The subscriber (paho with CONNECT properties) sends Request
			// Problem Information 0, which must not cost a PUBLISH its
			// user properties [MQTT-3.1.2-29].
			name: "publish properties",
			subs: []propSub{{id: "s", opts: paho.SubscribeOptions{Topic: "pp/#", QoS: 1}}},
			pubs: []propPub{{topic: "pp/a", props: &paho.PublishProperties{PayloadFormat: u8(1), ContentType: "application/json",
				ResponseTopic: "pp/reply", CorrelationData: []byte{0, 1, 0xff},
				User: paho.UserProperties{{Key: "b", Value: "1"}, {Key: "a", Value: "2"}, {Key: "b", Value: "3"}, {Key: "", Value: ""}}}}},
			check: func(t *testing.T, got map[string][]*paho.Publish) {
				p := got["s"][0].Properties
				if p == nil || p.PayloadFormat == nil || *p.PayloadFormat != 1 || p.ContentType != "application/json" ||
					p.ResponseTopic != "pp/reply" || string(p.CorrelationData) != "\x00\x01\xff" {
					t.Fatalf("properties %+v", p)
				}
				want := paho.UserProperties{{Key: "b", Value: "1"}, {Key: "a", Value: "2"}, {Key: "b", Value: "3"}, {Key: "", Value: ""}}
				if fmt.Sprint(p.User) != fmt.Sprint(want) {
					t.Fatalf("user properties %v, want %v in order", p.User, want)
				}
			},
		},
		{
			name: "subscription identifiers",
			subs: []propSub{{id: "s7", opts: paho.SubscribeOptions{Topic: "si/a/#", QoS: 1}, subID: 7},
				{id: "s9", opts: paho.SubscribeOptions{Topic: "si/+/x", QoS: 1}, subID: 9},
				{id: "s0", opts: paho.SubscribeOptions{Topic: "si/#", QoS: 1}}},
			pubs: []propPub{{topic: "si/a/x"}},
			check: func(t *testing.T, got map[string][]*paho.Publish) {
				for id, want := range map[string]int{"s7": 7, "s9": 9} {
					p := got[id][0].Properties
					if p == nil || p.SubscriptionIdentifier == nil || *p.SubscriptionIdentifier != want {
						t.Fatalf("%s: subscription identifier %+v, want %d", id, p, want)
					}
				}
				if p := got["s0"][0].Properties; p != nil && p.SubscriptionIdentifier != nil {
					t.Fatalf("s0: subscription identifier %d without one", *p.SubscriptionIdentifier)
				}
			},
		},
		{
			name: "topic aliases",
			subs: []propSub{{id: "plain", opts: paho.SubscribeOptions{Topic: "ta/#", QoS: 1}},
				{id: "aliased", opts: paho.SubscribeOptions{Topic: "ta/#", QoS: 1}, aliasM: 10}},
			// The publisher sets alias 3 with the topic, then uses it alone.
			pubs: []propPub{{topic: "ta/t", props: &paho.PublishProperties{TopicAlias: u16(3)}},
				{topic: "", props: &paho.PublishProperties{TopicAlias: u16(3)}}},
			check: func(t *testing.T, got map[string][]*paho.Publish) {
				for _, m := range got["plain"] {
					if m.Topic != "ta/t" || m.Properties != nil && m.Properties.TopicAlias != nil {
						t.Fatalf("plain subscriber: topic %q alias %+v", m.Topic, m.Properties)
					}
				}
				a := got["aliased"]
				p0, p1 := a[0].Properties, a[1].Properties
				if a[0].Topic != "ta/t" || p0 == nil || p0.TopicAlias == nil || a[1].Topic != "" || p1 == nil ||
					p1.TopicAlias == nil || *p1.TopicAlias != *p0.TopicAlias {
					t.Fatalf("aliased subscriber: %q %+v then %q %+v", a[0].Topic, p0, a[1].Topic, p1)
				}
			},
		},
		{
			name: "retain as published",
			subs: []propSub{{id: "rap", opts: paho.SubscribeOptions{Topic: "rp/#", QoS: 1, RetainAsPublished: true}},
				{id: "norap", opts: paho.SubscribeOptions{Topic: "rp/#", QoS: 1}}},
			pubs: []propPub{{topic: "rp/t", retain: true}, {topic: "rp/u"}},
			check: func(t *testing.T, got map[string][]*paho.Publish) {
				if r := got["rap"]; !r[0].Retain || r[1].Retain {
					t.Fatalf("retain as published: retain %v then %v, want true then false", r[0].Retain, r[1].Retain)
				}
				if r := got["norap"]; r[0].Retain || r[1].Retain {
					t.Fatalf("without retain as published: retain %v, %v", r[0].Retain, r[1].Retain)
				}
			},
		},
		{
			name: "no local",
			subs: []propSub{{id: "publisher", opts: paho.SubscribeOptions{Topic: "nl/#", QoS: 1, NoLocal: true}},
				{id: "other", opts: paho.SubscribeOptions{Topic: "nl/#", QoS: 1, NoLocal: true}}},
			pubs: []propPub{{topic: "nl/t"}},
			check: func(t *testing.T, got map[string][]*paho.Publish) {
				if len(got["publisher"]) != 0 {
					t.Fatalf("no-local subscriber got %d of its own", len(got["publisher"]))
				}
			},
		},
	}
	for _, mode := range ackModes {
		for _, where := range []string{"one node", "cluster"} {
			for _, tc := range cases {
				t.Run(mode.name+"/"+where+"/"+tc.name, func(t *testing.T) {
					propertiesCase(t, mode.blocking, where == "cluster", tc.subs, tc.pubs, tc.check)
				})
			}
		}
	}
}

// propertiesCase runs one case of TestMQTT5PropertiesDelivered: the
// subscribers on the publisher's node, or (cluster) on another node but
// for the publisher's own subscription.
func propertiesCase(t *testing.T, blocking, cluster bool, subs []propSub, pubs []propPub, check func(*testing.T, map[string][]*paho.Publish)) {
	var ts, subNode *testServer
	if cluster {
		tc := startClusterWith(t, 2, func(c *Config) { c.BlockingAcks = blocking })
		ts, subNode = tc.nodes[0], tc.nodes[1]
	} else {
		ts = startServer(t, func(c *Config) { c.BlockingAcks = blocking; c.WSAddr = "" })
		subNode = ts
	}
	rcv := map[string]*received{}
	clients := map[string]*paho.Client{}
	remote := map[string]bool{}
	for _, s := range subs {
		r := &received{}
		rcv[s.id] = r
		node := subNode
		if s.id == "publisher" {
			node = ts
		} else if cluster {
			remote[s.opts.Topic] = true
		}
		c, _ := dialSession(t, node.tcp, s.id, r, true, 0, func(_ *paho.ClientConfig, cp *paho.Connect) {
			if s.aliasM > 0 {
				cp.Properties.TopicAliasMaximum = &s.aliasM
			}
		})
		clients[s.id] = c
		sp := &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{s.opts}}
		if s.subID > 0 {
			sp.Properties = &paho.SubscribeProperties{SubscriptionIdentifier: &s.subID}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sa, err := c.Subscribe(ctx, sp)
		cancel()
		if err != nil || sa.Reasons[0] >= 0x80 {
			t.Fatalf("subscribe %s: %v %+v", s.id, err, sa)
		}
	}
	if cluster {
		testkit.Eventually(t, 5*time.Second, "the publisher's node knows the subscriptions",
			func() bool { return ts.ClusterStats().RemoteSubscriptions >= len(remote) })
	}
	pc := clients["publisher"]
	if pc == nil {
		pc = dialPaho(t, ts.tcp, "publisher", nil)
	}
	for i, p := range pubs {
		resp, err := publish(t, pc, &paho.Publish{Topic: p.topic, QoS: 1, Retain: p.retain,
			Payload: []byte(fmt.Sprint(i)), Properties: p.props})
		if err != nil || resp.ReasonCode != 0 {
			t.Fatalf("publish %d: %v %+v", i, err, resp)
		}
	}
	got := map[string][]*paho.Publish{}
	for _, s := range subs {
		want := len(pubs)
		if s.opts.NoLocal && s.id == "publisher" {
			want = 0
		}
		testkit.Eventually(t, 5*time.Second, s.id+" received every publish", func() bool { return len(live(rcv[s.id].all())) >= want })
		got[s.id] = live(rcv[s.id].all())
		for i, m := range got[s.id] {
			if string(m.Payload) != fmt.Sprint(i) {
				t.Fatalf("%s: message %d is %q", s.id, i, m.Payload)
			}
		}
	}
	if _, ok := rcv["publisher"]; ok {
		// What "other" received was delivered after the publisher's
		// own copy would have been: wait for it, then check.
		testkit.Eventually(t, 5*time.Second, "other received", func() bool { return len(rcv["other"].all()) == len(pubs) })
		got["publisher"] = rcv["publisher"].all()
	}
	check(t, got)
}
