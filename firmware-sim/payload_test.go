package firmwaresim

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/tributary-io/tributary/internal/testkit"
)

func TestAppendFixedExactSize(t *testing.T) {
	f := newFiller(testkit.Rand(t, 1, 1), 1024)
	ts := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	jsonFrom := 0
	for size := 1; size <= 1024; size++ {
		for _, seq := range []uint64{1, 99999} {
			p := appendFixed(nil, size, "device12", seq, ts, f)
			if len(p) != size {
				t.Fatalf("size %d seq %d: got %d bytes", size, seq, len(p))
			}
			if p[0] == '{' && json.Valid(p) && jsonFrom == 0 && seq == 99999 {
				jsonFrom = size
			}
		}
	}
	if jsonFrom == 0 || jsonFrom > 80 {
		t.Fatalf("payloads become JSON from %d bytes", jsonFrom)
	}
	for size := jsonFrom; size <= 1024; size += 7 {
		if p := appendFixed(nil, size, "device12", 99999, ts, f); !json.Valid(p) {
			t.Fatalf("size %d not JSON: %s", size, p)
		}
	}
	a := appendFixed(nil, 512, "device1", 1, ts, f)
	b := appendFixed(nil, 512, "device1", 2, ts, f)
	if bytes.Equal(a[len(a)-100:], b[len(b)-100:]) {
		t.Error("padding identical for consecutive messages")
	}
}

func TestTelemetryDriftAndAnomalies(t *testing.T) {
	s := newSensor(testkit.Rand(t, 3, 4), 0.01)
	ts := time.Now()
	statuses := map[string]int{}
	var first, last float64
	for i := range 5000 {
		r := s.next()
		statuses[r.status]++
		if r.status == "ok" {
			if r.temp < s.tempBase-5 || r.temp > s.tempBase+5 || r.hum < 0 || r.hum > 100 || r.vib < 0 {
				t.Fatalf("reading %d out of range: %+v (base %.1f)", i, r, s.tempBase)
			}
			if first == 0 {
				first = r.temp
			}
			last = r.temp
		}
		p := appendTelemetry(nil, "device3", "line3", uint64(i+1), ts, r)
		var m map[string]any
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(m) != 8 || m["seq"].(float64) != float64(i+1) {
			t.Fatalf("fields of %s", p)
		}
	}
	if statuses["ok"] < 4000 || statuses["warn"]+statuses["alarm"] == 0 {
		t.Errorf("status mix %v", statuses)
	}
	if first == last {
		t.Error("temperature does not drift")
	}
	quiet := newSensor(testkit.Rand(t, 3, 4), 0)
	for range 5000 {
		if r := quiet.next(); r.status != "ok" {
			t.Fatal("anomaly with probability 0")
		}
	}
}

func TestExpandTopic(t *testing.T) {
	if got := expandTopic("f/line{line}/d{device}/{device}", 13, 1); got != "f/line1/d13/13" {
		t.Errorf("got %q", got)
	}
}

func TestBursts(t *testing.T) {
	b := startBroker(t, "127.0.0.1:0")
	cfg := Config{Broker: b.addr, Devices: 2, Rate: 10, Duration: 500 * time.Millisecond, InFlight: 4}
	plain := run(t, cfg)
	cfg.BurstEvery, cfg.BurstSize, cfg.ClientIDPrefix = 200*time.Millisecond, 20, "burst"
	burst := run(t, cfg)
	// Plain: about 2 × 10/s × 0.5 s = 10. Bursts: each device bursts two
	// or three times, 20 messages each, on top (the first burst comes
	// within 200ms, so even a starved run shows one per device).
	if plain.Acked > 14 || burst.Acked < plain.Acked+40 {
		t.Errorf("plain %d acked, with bursts %d", plain.Acked, burst.Acked)
	}
}
