package mqtt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/wal"
)

func TestPublishLandsInSink(t *testing.T) {
	ts := startServer(t, nil)
	c := dialPaho(t, ts.tcp, "dev-1", nil)

	payload := []byte{0x00, 0xff, 'h', 'i', 0x80, '\n'} // not UTF-8, has NUL: byte-exact
	cases := []struct {
		topic  string
		qos    byte
		stream string
	}{
		{"sensors/a/temp", 0, "plant.temps"},
		{"sensors/a/humidity", 1, "plant.sensors"},
		{"other/Ünïcode/ topic ", 2, "default.mqtt"},
	}
	for _, tc := range cases {
		props := &paho.PublishProperties{}
		props.User.Add("k", "v1").Add("a", "").Add("k", "v2")
		resp, err := publish(t, c, &paho.Publish{Topic: tc.topic, QoS: tc.qos, Payload: payload, Properties: props})
		if err != nil {
			t.Fatalf("qos %d: %v", tc.qos, err)
		}
		if tc.qos > 0 && resp.ReasonCode != 0 {
			t.Fatalf("qos %d: reason %#x", tc.qos, resp.ReasonCode)
		}
		testkit.Eventually(t, 5*time.Second, fmt.Sprintf("record for %q", tc.topic), func() bool { return len(ts.sink.byTopic(tc.topic)) == 1 })
		r := ts.sink.byTopic(tc.topic)[0]
		want := &tributary.Record{
			Stream: tc.stream, Partition: r.Partition, Offset: r.Offset, Topic: tc.topic, Value: payload,
			Headers:  []tributary.Header{{Key: "k", Value: []byte("v1")}, {Key: "a", Value: []byte{}}, {Key: "k", Value: []byte("v2")}},
			Source:   "mqtt",
			ClientID: "dev-1",
			Node:     "node-1",
		}
		if !reflect.DeepEqual(r, want) {
			t.Errorf("qos %d record\n got %+v\nwant %+v", tc.qos, r, want)
		}
	}
	st := ts.Stats()
	if st.Accepted != [3]uint64{1, 1, 1} || st.Clients != 1 || st.PayloadBytes != uint64(3*len(payload)) || st.BytesIn == 0 {
		t.Errorf("stats %+v", st)
	}
}

// The acknowledgement must wait for Append: hold the sink, see the publish
// blocked, release, see it acked.
func TestAckOnlyAfterAppend(t *testing.T) {
	ts := startServer(t, nil)
	c := dialPaho(t, ts.tcp, "dev-ack", nil)
	for _, qos := range []byte{1, 2} {
		release := ts.sink.hold()
		done := make(chan error, 1)
		go func() {
			resp, err := c.Publish(context.Background(), &paho.Publish{Topic: "t/ack", QoS: qos, Payload: []byte{qos}})
			if err == nil && resp.ReasonCode != 0 {
				err = errors.New("reason code " + string(rune('0'+resp.ReasonCode)))
			}
			done <- err
		}()
		testkit.Eventually(t, 5*time.Second, "append held", func() bool { return ts.sink.held() == 1 })
		select {
		case err := <-done:
			t.Fatalf("qos %d: publish returned (%v) before Append did", qos, err)
		case <-time.After(100 * time.Millisecond): // give a wrong ack time to arrive
		}
		if n := len(ts.sink.byTopic("t/ack")); n != int(qos)-1 {
			t.Fatalf("qos %d: %d records before release", qos, n)
		}
		release()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("qos %d: %v", qos, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("qos %d: no ack after release", qos)
		}
		if n := len(ts.sink.byTopic("t/ack")); n != int(qos) {
			t.Fatalf("qos %d: %d records after ack", qos, n)
		}
	}
}

func TestSubscriberDeliveryAndRefusedNotDelivered(t *testing.T) {
	ts := startServer(t, nil)
	var rcv received
	sub := dialPaho(t, ts.tcp, "sub", &rcv)
	subscribe(t, sub, "d/#", 1)
	pub := dialPaho(t, ts.tcp, "pub", nil)

	mustPublish(t, pub, "d/1", 1, "first")
	testkit.Eventually(t, 5*time.Second, "first delivered", func() bool { return len(rcv.all()) == 1 })

	ts.sink.setFail(wal.ErrBudgetExceeded)
	for qos := byte(0); qos <= 2; qos++ {
		_, _ = publish(t, pub, &paho.Publish{Topic: "d/refused", QoS: qos, Payload: []byte("refused"), Retain: true})
	}
	ts.sink.setFail(nil)
	mustPublish(t, pub, "d/2", 1, "second")
	testkit.Eventually(t, 5*time.Second, "second delivered", func() bool { return len(rcv.all()) >= 2 })
	time.Sleep(50 * time.Millisecond) // a wrongly delivered message would have arrived before "second"
	for _, m := range rcv.all() {
		if m.Topic == "d/refused" {
			t.Fatalf("refused publish delivered: %+v", m)
		}
	}
	if got := rcv.all(); len(got) != 2 || string(got[1].Payload) != "second" {
		t.Fatalf("received %d messages", len(got))
	}
	// Nor retained: a new subscriber gets no retained "d/refused".
	var rcv2 received
	sub2 := dialPaho(t, ts.tcp, "sub2", &rcv2)
	subscribe(t, sub2, "d/refused", 1)
	mustPublish(t, pub, "d/refused", 1, "marker")
	testkit.Eventually(t, 5*time.Second, "marker delivered", func() bool { return len(rcv2.all()) >= 1 })
	if got := rcv2.all(); len(got) != 1 || string(got[0].Payload) != "marker" {
		t.Fatalf("new subscriber got %d messages, first %q", len(got), got[0].Payload)
	}
}

func TestBrokerFeatures(t *testing.T) {
	ts := startServer(t, nil)
	pub := dialPaho(t, ts.tcp, "pub", nil)

	// Retained.
	resp, err := publish(t, pub, &paho.Publish{Topic: "r/state", QoS: 1, Retain: true, Payload: []byte("on")})
	if err != nil || resp.ReasonCode != 0 {
		t.Fatalf("retained publish: %v %v", err, resp)
	}
	var rr received
	late := dialPaho(t, ts.tcp, "late", &rr)
	subscribe(t, late, "r/+", 1)
	// mochi writes the PUBACK before it delivers live, so "late" may also
	// get the live copy; the retained copy must arrive either way.
	testkit.Eventually(t, 5*time.Second,

		"retained delivered", func() bool {
			for _, m := range rr.all() {
				if m.Retain && string(m.Payload) == "on" {
					return true
				}
			}
			return false
		})

	// Shared subscription: each message goes to one member of the group.
	var s1, s2 received
	subscribe(t, dialPaho(t, ts.tcp, "s1", &s1), "$share/g/job/#", 1)
	subscribe(t, dialPaho(t, ts.tcp, "s2", &s2), "$share/g/job/#", 1)
	for i := 0; i < 10; i++ {
		mustPublish(t, pub, "job/x", 1, "j")
	}
	testkit.Eventually(t, 5*time.Second, "shared delivered once each", func() bool { return len(s1.all())+len(s2.all()) == 10 })

	// MQTT 5 properties pass through to subscribers.
	var pr received
	subscribe(t, dialPaho(t, ts.tcp, "props", &pr), "p/t", 1)
	props := &paho.PublishProperties{ContentType: "application/json", ResponseTopic: "p/reply"}
	props.User.Add("trace", "abc")
	if _, err := publish(t, pub, &paho.Publish{Topic: "p/t", QoS: 1, Payload: []byte("{}"), Properties: props}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "props delivered", func() bool { return len(pr.all()) == 1 })
	if p := pr.all()[0].Properties; p == nil || p.ContentType != "application/json" || p.ResponseTopic != "p/reply" || p.User.Get("trace") != "abc" {
		t.Fatalf("properties: %+v", p)
	}

	// Will: a client that dies without DISCONNECT has its will delivered.
	var wr received
	subscribe(t, dialPaho(t, ts.tcp, "will-watch", &wr), "wills/#", 1)
	wc := dialRawWill(t, ts.tcp)
	wc.Close()
	testkit.Eventually(t, 5*time.Second, "will delivered", func() bool { return len(wr.all()) == 1 })

	// The inline client publishes to local subscribers and is not logged.
	var ir received
	subscribe(t, dialPaho(t, ts.tcp, "inline-watch", &ir), "node/#", 0)
	if err := ts.Publish("node/hello", []byte("hi"), false, 0); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "inline delivered", func() bool { return len(ir.all()) == 1 })
	if n := len(ts.sink.byTopic("node/hello")); n != 0 {
		t.Fatalf("inline publish logged %d times", n)
	}
}

// dialRawWill connects with MQTT 5 and a will on "wills/dead".
func dialRawWill(t *testing.T, addr string) interface{ Close() error } {
	t.Helper()
	body := append(mqttString("MQTT"), 5, 0x02|0x04|0x08, 0x00, 0x3c, 0x00) // clean, will, will qos 1
	body = append(body, mqttString("will-client")...)
	body = append(body, 0x00) // will properties
	body = append(body, mqttString("wills/dead")...)
	body = append(body, mqttString("gone")...)
	conn := dialRawPacket(t, addr, packet(0x10, body))
	return conn
}

func dialRawPacket(t *testing.T, addr string, connect []byte) interface{ Close() error } {
	conn := dialRaw(t, addr, 0, "")
	if _, err := conn.Write(connect); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(b); err != nil || b[0] != 0x20 {
		t.Fatalf("connack: %v %x", err, b)
	}
	return conn
}

func readFirst(t *testing.T, conn interface{ Read([]byte) (int, error) }) []byte {
	t.Helper()
	b := make([]byte, 64)
	n, err := conn.Read(b)
	if err != nil || n < 4 {
		t.Fatalf("read: %v (%x)", err, b[:n])
	}
	return b[:n]
}

func TestWebSocketListener(t *testing.T) {
	ts := startServer(t, nil)
	if ts.ws == "" || strings.HasSuffix(ts.ws, ":0") || strings.HasSuffix(ts.tcp, ":0") {
		t.Fatalf("addrs %v", ts.Addrs())
	}
	if !strings.Contains(ts.logs.String(), "mqtt listening") {
		t.Errorf("no listening log line:\n%s", ts.logs)
	}
	conn := dialWS(t, ts.ws)
	if _, err := conn.Write(rawConnect(5, "ws-client")); err != nil {
		t.Fatal(err)
	}
	if b := readFirst(t, conn); b[0] != 0x20 || b[3] != 0 {
		t.Fatalf("connack %x", b)
	}
	if _, err := conn.Write(rawPublish(5, 1, 1, "ws/t", []byte("over ws"))); err != nil {
		t.Fatal(err)
	}
	if b := readFirst(t, conn); b[0] != 0x40 {
		t.Fatalf("puback %x", b)
	}
	if r := ts.sink.byTopic("ws/t"); len(r) != 1 || !bytes.Equal(r[0].Value, []byte("over ws")) {
		t.Fatalf("records %v", r)
	}
}

// Appends of different connections run concurrently (so they can share a
// group commit); Close cancels appends still held and acks none of them.
func TestConcurrentAppendsAndClose(t *testing.T) {
	ts := startServer(t, nil)
	release := ts.sink.hold()
	defer release()
	results := make(chan error, 3)
	for i := 0; i < 3; i++ {
		c := dialPaho(t, ts.tcp, "conc-"+string(rune('a'+i)), nil)
		go func() {
			// paho may wait for its context once the server is gone.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			resp, err := c.Publish(ctx, &paho.Publish{Topic: "conc/t", QoS: 1, Payload: []byte("x")})
			if err == nil && resp.ReasonCode < 0x80 {
				results <- nil // acknowledged
				return
			}
			results <- errors.New("not acknowledged")
		}()
	}
	testkit.Eventually(t, 5*time.Second, "three appends in progress at once", func() bool { return ts.sink.held() == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	for i := 0; i < 3; i++ {
		select {
		case err := <-results:
			if err == nil {
				t.Fatal("publish acknowledged although its append was canceled by Close")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("publish neither acked nor failed after Close")
		}
	}
	if n := ts.sink.len(); n != 0 {
		t.Fatalf("%d records", n)
	}
	if err := ts.Start(); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
}
