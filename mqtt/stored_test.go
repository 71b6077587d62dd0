package mqtt

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// TestStoredRefusalResentOnce: a publish stored but not confirmed by the
// replicas in time (ErrAfterAppend) is refused without an acknowledgement
// (DISCONNECT 0x89), paho keeps it in its session and re-sends it (DUP)
// when it resumes the session; the re-send is confirmed, not appended:
// one record, acknowledged, delivered once — on both ack paths, QoS 1 and 2.
// A re-send whose confirmation fails again is refused the same way, and
// the next one lands.
func TestStoredRefusalResentOnce(t *testing.T) {
	for _, mode := range ackModes {
		for _, qos := range []byte{1, 2} {
			for _, confirmFail := range []int{0, 1} {
				t.Run(fmt.Sprintf("%s/qos%d/confirm-fails-%d", mode.name, qos, confirmFail), func(t *testing.T) {
					ts := startServer(t, func(c *Config) { c.BlockingAcks = mode.blocking; c.WSAddr = "" })
					var rcv received
					sub := dialPaho(t, ts.tcp, "stored-sub", &rcv)
					subscribe(t, sub, "stored/#", 2)
					ts.sink.mu.Lock()
					ts.sink.storedFail, ts.sink.confirmFail = 1, confirmFail
					ts.sink.mu.Unlock()

					st := state.NewInMemory()
					disconnects := make(chan byte, 4)
					conf := func(cfg *paho.ClientConfig, cp *paho.Connect) {
						cfg.Session = st
						cfg.PacketTimeout = 30 * time.Second
						cfg.OnServerDisconnect = func(d *paho.Disconnect) { disconnects <- d.ReasonCode }
					}
					c, _ := dialSession(t, ts.tcp, "stored-pub", nil, true, 3600, conf)
					type result struct {
						resp *paho.PublishResponse
						err  error
					}
					res := make(chan result, 1)
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						resp, err := c.Publish(ctx, &paho.Publish{Topic: "stored/t", QoS: qos, Payload: []byte("once")})
						res <- result{resp, err}
					}()
					for round := 0; round <= confirmFail; round++ {
						select {
						case code := <-disconnects:
							if code != codeStoredUnconfirmed.Code {
								t.Fatalf("round %d: disconnect reason %#x, want %#x", round, code, codeStoredUnconfirmed.Code)
							}
						case r := <-res:
							t.Fatalf("round %d: publish answered before the disconnect: %+v %v", round, r.resp, r.err)
						case <-time.After(10 * time.Second):
							t.Fatalf("round %d: no disconnect", round)
						}
						<-c.Done()
						var present bool
						c, present = dialSession(t, ts.tcp, "stored-pub", nil, false, 3600, conf) // paho re-sends, DUP
						if !present {
							t.Fatalf("round %d: session not present", round)
						}
					}
					select {
					case r := <-res:
						if r.err != nil || r.resp.ReasonCode != 0 {
							t.Fatalf("re-sent publish: %+v %v", r.resp, r.err)
						}
					case <-time.After(20 * time.Second):
						t.Fatal("re-sent publish not acknowledged")
					}
					if got := len(ts.sink.byTopic("stored/t")); got != 1 {
						t.Fatalf("%d records, want 1", got)
					}
					if got := ts.sink.confirms(); got != 1 {
						t.Fatalf("%d confirmations, want 1", got)
					}
					testkit.Eventually(t, 5*time.Second, "delivered", func() bool { return len(rcv.all()) == 1 })
					st2 := ts.Stats()
					if st2.WithheldAcks != uint64(1+confirmFail) || st2.ResentStored != uint64(1+confirmFail) || st2.Accepted[qos] != 1 {
						t.Fatalf("stats: withheld %d resent %d accepted %v", st2.WithheldAcks, st2.ResentStored, st2.Accepted)
					}
					if n := ts.stored.len(); n != 0 {
						t.Fatalf("%d stored publishes still remembered", n)
					}
					if got := payloads(&rcv); got != "[once]" {
						t.Fatalf("delivered %s", got)
					}
				})
			}
		}
	}
}

// TestStoredRefusalMQTT311AndCleanStart: an MQTT 3.1.1 client (raw) whose
// publish was stored but not confirmed is disconnected without a PUBACK;
// its DUP re-send on the kept session is acknowledged and not appended.
// After a clean start the same packet is a new message: appended again
// (the duplicate README describes).
func TestStoredRefusalMQTT311AndCleanStart(t *testing.T) {
	for _, mode := range ackModes {
		t.Run(mode.name, func(t *testing.T) {
			ts := startServer(t, func(c *Config) { c.BlockingAcks = mode.blocking; c.WSAddr = "" })
			ts.sink.mu.Lock()
			ts.sink.storedFail = 2
			ts.sink.mu.Unlock()
			connect := func(clean bool) []byte {
				body := append(mqttString("MQTT"), 4, 0x00, 0x00, 0x3c)
				if clean {
					body[len(body)-3] = 0x02
				}
				return packet(0x10, append(body, mqttString("dev311")...))
			}
			pub := rawPublish(4, 1, 9, "s311/t", []byte("x"))
			dup := append([]byte{pub[0] | 0x08}, pub[1:]...)

			conn, _ := connectRaw(t, ts.tcp, connect(false))
			if _, err := conn.Write(pub); err != nil {
				t.Fatal(err)
			}
			if b := readUntilClosed(t, conn, 10*time.Second); len(b) != 0 {
				t.Fatalf("got %x before the close, want nothing", b)
			}
			testkit.Eventually(t, 5*time.Second, "disconnected", func() bool { return ts.Stats().Clients == 0 })
			conn, r := connectRaw(t, ts.tcp, connect(false))
			if _, err := conn.Write(dup); err != nil {
				t.Fatal(err)
			}
			if ids, codes := readAcks(t, conn, r, 1); ids[0] != 9 || codes[0] != 0 {
				t.Fatalf("puback %v %x", ids, codes)
			}
			if got := len(ts.sink.byTopic("s311/t")); got != 1 {
				t.Fatalf("%d records after the re-send, want 1", got)
			}
			conn.Close()
			testkit.Eventually(t, 5*time.Second, "disconnected", func() bool { return ts.Stats().Clients == 0 })

			// Stored and withheld again, then a clean start: the re-send is new.
			conn, _ = connectRaw(t, ts.tcp, connect(false))
			if _, err := conn.Write(pub); err != nil {
				t.Fatal(err)
			}
			readUntilClosed(t, conn, 10*time.Second)
			testkit.Eventually(t, 5*time.Second, "disconnected", func() bool { return ts.Stats().Clients == 0 })
			conn, r = connectRaw(t, ts.tcp, connect(true))
			if _, err := conn.Write(dup); err != nil {
				t.Fatal(err)
			}
			if ids, codes := readAcks(t, conn, r, 1); ids[0] != 9 || codes[0] != 0 {
				t.Fatalf("puback after a clean start %v %x", ids, codes)
			}
			if got := len(ts.sink.byTopic("s311/t")); got != 3 {
				t.Fatalf("%d records, want 3 (the clean start's re-send is new)", got)
			}
		})
	}
}

// TestStoredPubsBounds: the remembered publishes are capped and expire,
// evictions counted; a re-send matches only with DUP and the same topic
// and payload.
func TestStoredPubsBounds(t *testing.T) {
	s := newStoredPubs(2, time.Hour)
	pk := func(id uint16, dup bool, payload string) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Dup: dup}, PacketID: id,
			TopicName: "t", Payload: []byte(payload)}
	}
	rec := func(off int64) *tributary.Record { return &tributary.Record{Stream: "s", Offset: off} }
	s.remember("a", pk(1, false, "p"), rec(1), false)
	s.remember("a", pk(2, false, "p"), rec(2), false)
	s.remember("b", pk(1, false, "p"), rec(3), false)
	if s.len() != 2 || s.evicted.Load() != 1 {
		t.Fatalf("len %d evicted %d", s.len(), s.evicted.Load())
	}
	if e := s.take("a", pk(1, true, "p")); e != nil {
		t.Fatalf("evicted entry found: %+v", e)
	}
	if e := s.take("a", pk(2, false, "p")); e != nil {
		t.Fatal("matched without DUP")
	}
	if e := s.take("b", pk(1, true, "other")); e != nil {
		t.Fatal("matched another payload")
	}
	s.remember("b", pk(1, false, "p"), rec(3), false)
	if e := s.take("b", pk(1, true, "p")); e == nil || e.rec.Offset != 3 || !bytes.Equal([]byte(e.topic), []byte("t")) {
		t.Fatalf("re-send not matched: %+v", e)
	}
	old := newStoredPubs(10, time.Nanosecond)
	old.remember("a", pk(1, false, "p"), rec(1), false)
	time.Sleep(time.Millisecond) // the entry's age passes its 1 ns bound
	if e := old.take("a", pk(1, true, "p")); e != nil || old.evicted.Load() != 1 {
		t.Fatalf("expired entry: %+v, evicted %d", e, old.evicted.Load())
	}
	s.remember("c", pk(5, false, "p"), rec(5), false)
	s.forget("c")
	if e := s.take("c", pk(5, true, "p")); e != nil {
		t.Fatal("forgotten entry found")
	}
}

// TestStoredRefusalInflightAfterIt: publishes in flight behind the
// withheld one on the same connection are not lost or doubled by its
// disconnect: after the client resumes its session and re-sends all
// three (DUP), each is acknowledged, stored once and delivered once — on
// both ack paths (the pipeline may have made the later ones durable and
// delivered already, their PUBACKs unwritable).
func TestStoredRefusalInflightAfterIt(t *testing.T) {
	for _, mode := range ackModes {
		t.Run(mode.name, func(t *testing.T) {
			ts := startServer(t, func(c *Config) { c.BlockingAcks = mode.blocking; c.WSAddr = "" })
			var rcv received
			subscribe(t, dialPaho(t, ts.tcp, "inflight-sub", &rcv), "inf/#", 1)
			ts.sink.mu.Lock()
			ts.sink.storedFail = 1
			ts.sink.mu.Unlock()
			release := ts.sink.hold()
			conn, _ := connectRaw(t, ts.tcp, rawConnectSession("inflight", true))
			var all []byte
			for id := uint16(1); id <= 3; id++ {
				all = append(all, rawPublish(5, 1, id, "inf/t", []byte{byte('0' + id)})...)
			}
			if _, err := conn.Write(all); err != nil {
				t.Fatal(err)
			}
			want := 3
			if mode.blocking {
				want = 1 // the read loop waits in the first
			}
			testkit.Eventually(t, 5*time.Second, "publishes at the sink", func() bool { return ts.sink.held() == want })
			release()
			b := readUntilClosed(t, conn, 10*time.Second)
			if code, ok := disconnectReason(b); !ok || code != codeStoredUnconfirmed.Code {
				t.Fatalf("got %x, want only DISCONNECT %#x", b, codeStoredUnconfirmed.Code)
			}
			testkit.Eventually(t, 5*time.Second, "disconnected", func() bool { return ts.Stats().Clients == 1 })

			conn, r := connectRaw(t, ts.tcp, rawConnectSession("inflight", false))
			all = all[:0]
			for id := uint16(1); id <= 3; id++ {
				p := rawPublish(5, 1, id, "inf/t", []byte{byte('0' + id)})
				p[0] |= 0x08 // DUP
				all = append(all, p...)
			}
			if _, err := conn.Write(all); err != nil {
				t.Fatal(err)
			}
			// The pipeline answers 2 and 3, pending on the session, when it
			// resumes, and 1 once its re-send is confirmed: any order.
			ids, codes := readAcks(t, conn, r, 3)
			slices.Sort(ids)
			if fmt.Sprint(ids) != "[1 2 3]" || fmt.Sprint(codes) != "[0 0 0]" {
				t.Fatalf("acks %v codes %v", ids, codes)
			}
			var stored []string
			for _, rec := range ts.sink.byTopic("inf/t") {
				stored = append(stored, string(rec.Value))
			}
			if fmt.Sprint(stored) != "[1 2 3]" {
				t.Fatalf("stored %v, want [1 2 3] once each", stored)
			}
			testkit.Eventually(t, 5*time.Second, "three delivered", func() bool { return len(rcv.all()) >= 3 })
			got := map[string]int{}
			for _, m := range rcv.all() {
				got[string(m.Payload)]++
			}
			if len(got) != 3 || got["1"] != 1 || got["2"] != 1 || got["3"] != 1 {
				t.Fatalf("delivered %s", payloads(&rcv))
			}
		})
	}
}
