package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rssBytes is the resident memory of process pid, from /proc.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// stalledMemoryBound is the most a node may hold with the stalled sockets
// of TestHostileStalledSockets open (it held about 300 MB before the
// handshake deadline existed).
const stalledMemoryBound = 300 << 20

// TestHostileStalledSockets: 300 sockets that connect and never send a
// CONNECT are closed by the handshake deadline (10s by default); the
// node's memory stays bounded, and a well-behaved client publishing
// alongside is acknowledged throughout and lands in the table.
func TestHostileStalledSockets(t *testing.T) {
	data := t.TempDir()
	p := startDev(t, data)
	pid := p.cmd.Process.Pid
	before := rssBytes(t, pid)

	var stalled []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", p.MQTT)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stalled = append(stalled, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	good, err := mqttClient(ctx, p.MQTT, "well-behaved")
	if err != nil {
		t.Fatalf("a good client cannot connect beside the stalled sockets: %v", err)
	}
	l := newLedger()
	sent := 0
	start := time.Now()
	peak := before
	for time.Since(start) < 13*time.Second {
		n, err := publishN(ctx, good, l, "well-behaved", sent, 20)
		if err != nil {
			t.Fatalf("good client's publish failed: %v", err)
		}
		sent += n
		peak = max(peak, rssBytes(t, pid))
		time.Sleep(200 * time.Millisecond)
	}
	// Every stalled socket has been closed by the server.
	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 1)
		if _, err := c.Read(buf); err == nil {
			t.Fatalf("stalled socket %d got data", i)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("stalled socket %d still open after the handshake deadline", i)
		}
	}
	t.Logf("rss before %d MiB, peak %d MiB with 300 stalled sockets; %d publishes acknowledged meanwhile",
		before>>20, peak>>20, l.acked())
	if peak > stalledMemoryBound {
		t.Fatalf("node held %d MiB (bound %d MiB)", peak>>20, stalledMemoryBound>>20)
	}
	waitFor(t, 30*time.Second, "every acknowledged publish in the table", func() bool {
		return len(readTable(t, data, "factory.telemetry")) >= l.acked()
	})
	checkRows(t, l, readTable(t, data, "factory.telemetry"))
}
