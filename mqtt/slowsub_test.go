package mqtt

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

// TestSlowSubscriber: a subscriber that stops reading its socket while a
// publisher sends it far more than the socket buffers hold has at most
// MaxQueuedMessages queued (mochi's default, 8192, let it hold 8192
// payload copies) and is closed once a write has been blocked for the
// write timeout; a subscriber that reads gets every publish meanwhile.
func TestSlowSubscriber(t *testing.T) {
	s := startServer(t, func(c *Config) {
		c.MaxQueuedMessages = 256 // room for every publish: the reading subscriber drops none
		c.Limits.WriteTimeout = 300 * time.Millisecond
	})
	if got := s.broker.Options.Capabilities.MaximumClientWritesPending; got != 256 {
		t.Fatalf("mochi's client write queue %d, want MaxQueuedMessages", got)
	}
	slow := dialRaw(t, s.tcp, 4, "slow")
	slow.Write(packet(0x82, append(append([]byte{0, 1}, mqttString("sensors/#")...), 0)))
	slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	suback := make([]byte, 5)
	if _, err := io.ReadFull(slow, suback); err != nil || suback[0] != 0x90 {
		t.Fatalf("suback %x: %v", suback, err)
	}
	// ... and the slow one reads nothing more.
	rcv := &received{}
	good := dialPaho(t, s.tcp, "good", rcv)
	subscribe(t, good, "sensors/#", 0)
	pub := dialPaho(t, s.tcp, "pub", nil)
	payload := strings.Repeat("p", 64<<10)
	const n = 200 // 12.5 MiB
	for range n {
		mustPublish(t, pub, "sensors/a/b", 1, payload)
	}
	testkit.Eventually(t, 10*time.Second, "the slow subscriber closed by the write timeout", func() bool {
		return s.ListenerStats()["mqtt"].WriteTimeouts == 1
	})
	slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, slow); err != nil {
		t.Fatalf("slow subscriber's socket: %v, want a close", err)
	}
	testkit.Eventually(t, 10*time.Second, "every publish at the reading subscriber", func() bool { return len(rcv.all()) == n })
	for _, p := range rcv.all() {
		if !bytes.Equal(p.Payload, []byte(payload)) {
			t.Fatal("payload differs")
		}
	}
}
