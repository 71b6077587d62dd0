package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
)

// TestMQTTStoredRefusalLandsOnce: under replication_policy refuse, a
// QoS 1 publish that n1 stored while its replica did not confirm it in
// time (n2 and n3 both paused with SIGSTOP, so whichever it is) is not
// acknowledged — DISCONNECT 0x89 — and paho.golang re-sends it (DUP) when
// it resumes its session; once the replicas are back the re-send is
// acknowledged, and the table holds the message once (issue 27: a
// refused publish's retry lands once).
func TestMQTTStoredRefusalLandsOnce(t *testing.T) {
	c := newReplClusterExtra(t, 200*time.Millisecond, func(string) string { return "  replication_policy: refuse\n" })
	n1 := c.node("n1")
	others := []*proc{c.node("n2"), c.node("n3")}
	st := state.NewInMemory()
	disconnects := make(chan byte, 8)
	dial := func(clean bool) *paho.Client {
		conn, err := net.Dial("tcp", n1.MQTT)
		if err != nil {
			t.Fatal(err)
		}
		cl := paho.NewClient(paho.ClientConfig{ClientID: "stored-dev", Conn: conn, Session: st, PacketTimeout: 90 * time.Second,
			OnServerDisconnect: func(d *paho.Disconnect) { disconnects <- d.ReasonCode }})
		expiry := uint32(3600)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ca, err := cl.Connect(ctx, &paho.Connect{ClientID: "stored-dev", CleanStart: clean, KeepAlive: 30,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
		if err != nil || ca.ReasonCode != 0 {
			t.Fatalf("connect: %v %+v", err, ca)
		}
		if !clean && !ca.SessionPresent {
			t.Fatal("session not present")
		}
		t.Cleanup(func() { _ = cl.Disconnect(&paho.Disconnect{}) })
		return cl
	}
	cl := dial(true)
	pub := func(cl *paho.Client, payload string) chan error {
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			resp, err := cl.Publish(ctx, &paho.Publish{Topic: "factory/stored", QoS: 1, Payload: []byte(payload)})
			if err == nil && resp.ReasonCode != 0 {
				err = &refusedErr{resp.ReasonCode}
			}
			res <- err
		}()
		return res
	}
	if err := <-pub(cl, "before"); err != nil {
		t.Fatalf("publish with both replicas up: %v", err)
	}

	// n1's replica (whichever of the others it is) stops answering: the
	// next publish is stored on n1 and then not confirmed within
	// replication_timeout (2s).
	for _, p := range others {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the node paused", func() bool { return procState(p) == "T" })
	}
	resumed := false
	cont := func() {
		if !resumed {
			resumed = true
			for _, p := range others {
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	}
	t.Cleanup(cont)
	res := pub(cl, "withheld")
	select {
	case code := <-disconnects:
		if code != 0x89 {
			t.Fatalf("disconnect reason %#x, want 0x89", code)
		}
	case err := <-res:
		t.Fatalf("publish answered while the replica was paused: %v\n%s", err, n1.tail(30))
	case <-time.After(30 * time.Second):
		t.Fatalf("no disconnect while the replica was paused\n%s", n1.tail(30))
	}
	<-cl.Done()
	cont()
	waitFor(t, 30*time.Second, "n1 to count the withheld publish", func() bool {
		return metric(t, n1, "tributary_mqtt_publishes_withheld_total") >= 1
	})
	c.waitAlive("n1", "n2", "n3")
	// Resume the session until the re-send is acknowledged (it may be
	// withheld again while the replica catches up).
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		cl = dial(false) // paho re-sends the publish, DUP
		select {
		case err := <-res:
			if err != nil {
				t.Fatalf("re-sent publish: %v", err)
			}
		case code := <-disconnects:
			if code != 0x89 || time.Now().After(deadline) {
				t.Fatalf("round %d: disconnect %#x", round, code)
			}
			<-cl.Done()
			c.waitAlive("n1", "n2", "n3")
			continue
		case <-time.After(60 * time.Second):
			t.Fatalf("re-sent publish not acknowledged\n%s", n1.tail(30))
		}
		break
	}
	if got := metric(t, n1, "tributary_mqtt_publishes_resent_stored_total"); got < 1 {
		t.Fatalf("resent_stored %v, want at least 1", got)
	}
	waitFor(t, 60*time.Second, "both messages in the table", func() bool {
		n := 0
		for _, r := range readTable(t, c.shared, "factory.telemetry") {
			if r.Topic == "factory/stored" {
				n++
			}
		}
		return n >= 2
	})
	count := map[string]int{}
	for _, r := range readTable(t, c.shared, "factory.telemetry") {
		if r.Topic == "factory/stored" {
			count[string(r.Value)]++
		}
	}
	if count["before"] != 1 || count["withheld"] != 1 || len(count) != 2 {
		t.Fatalf("table holds %v, want each message once", count)
	}
}

type refusedErr struct{ code byte }

func (e *refusedErr) Error() string { return fmt.Sprintf("refused with reason %#x", e.code) }

// procState is the state letter of p's process in /proc (T: stopped).
func procState(p *proc) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}
