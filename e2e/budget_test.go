package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// startBlockedDev starts dev with a 1 MiB WAL budget and its uplink blocked:
// the table's data folder is a plain file, so every upload fails until the
// file (returned) is removed.
func startBlockedDev(t *testing.T, dir string) (*proc, string) {
	t.Helper()
	blocker := filepath.Join(dir, "warehouse", "factory", "telemetry", "data")
	if err := os.MkdirAll(filepath.Dir(blocker), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocker, []byte("not a folder: blocks uploads"), 0o644); err != nil {
		t.Fatal(err)
	}
	return startDev(t, dir, "--wal-budget", "1MiB"), blocker
}

// TestDiskBudget: with a 1 MiB WAL budget and the uplink blocked (the
// table's data folder is a plain file, so every upload fails), QoS 1
// publishes are refused with reason 0x97 once the budget is full; nothing
// accepted is lost; ingestion resumes when the uplink drains.
func TestDiskBudget(t *testing.T) {
	dir := t.TempDir()
	p, blocker := startBlockedDev(t, dir)
	ctx := context.Background()
	l := newLedger()
	cl, err := mqttClient(ctx, p.MQTT, "budget")
	if err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, 1024)
	refusedAt := -1
	for i := 0; i < 5000; i++ {
		id := fmt.Sprintf("budget-%06d", i)
		payload := append([]byte(fmt.Sprintf(`{"id":"%s"}`, id)), pad...)
		l.add(&sent{ID: id, Topic: "factory/budget", Payload: payload})
		pr, err := cl.Publish(ctx, &paho.Publish{Topic: "factory/budget", QoS: 1, Payload: payload})
		if err != nil && pr == nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if pr.ReasonCode == 0x97 { // paho also returns an error for it
			refusedAt = i
			break
		}
		if pr.ReasonCode != 0 {
			t.Fatalf("publish %d: reason 0x%02x, want 0 or 0x97", i, pr.ReasonCode)
		}
		l.ack(id)
	}
	if refusedAt < 0 {
		t.Fatal("no publish was refused with 0x97 although the budget is 1 MiB and uploads are blocked")
	}
	if s := status(t, p); s.WAL.BudgetRejections == 0 || s.Uplink.State == "ok" {
		t.Fatalf("status does not show the refusal/offline state: %+v", s)
	}
	if !containsLog(p, "budget") {
		t.Fatalf("no log line says the budget is exhausted:\n%s", p.logs())
	}
	t.Logf("refused with 0x97 after %d accepted publishes", refusedAt)
	// Unblock the uplink: the WAL drains and publishes are accepted again.
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "WAL drained after unblocking", func() bool { return walDrained(t, p) })
	for i := refusedAt + 1; i < refusedAt+101; i++ {
		id := fmt.Sprintf("budget-%06d", i)
		payload := []byte(fmt.Sprintf(`{"id":"%s"}`, id))
		l.add(&sent{ID: id, Topic: "factory/budget", Payload: payload})
		pr, err := cl.Publish(ctx, &paho.Publish{Topic: "factory/budget", QoS: 1, Payload: payload})
		if err != nil || pr.ReasonCode != 0 {
			t.Fatalf("publish after drain %d: %v %v", i, err, pr)
		}
		l.ack(id)
	}
	cl.Disconnect(&paho.Disconnect{})
	p.stop()
	rows := readTable(t, dir, "factory.telemetry")
	checkDense(t, rows)
	checkRows(t, l, rows)
	if len(rows) != l.acked() {
		t.Fatalf("%d rows, %d acked", len(rows), l.acked())
	}
}

func containsLog(p *proc, s string) bool {
	for _, line := range splitLines(p.logs()) {
		if contains(line, s) {
			return true
		}
	}
	return false
}
