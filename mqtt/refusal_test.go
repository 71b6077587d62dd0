package mqtt

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/wal"
)

// TestRefusalMQTT5: each refusal reason gets its code of README
// "Refusal codes", on the pipelined acknowledgement path (acks.go) and
// the blocking one (hooks.go) alike.
func TestRefusalMQTT5(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		t.Run(map[bool]string{false: "pipelined", true: "blocking"}[blocking], func(t *testing.T) {
			refusalMQTT5(t, func(c *Config) { c.BlockingAcks = blocking })
		})
	}
}

func refusalMQTT5(t *testing.T, mutate func(*Config)) {
	ts := startServer(t, mutate)
	c := dialPaho(t, ts.tcp, "dev-5", nil)

	for _, tc := range []struct {
		name   string
		cause  error
		reason byte
		says   string // in the reason string
	}{
		{"budget", wal.ErrBudgetExceeded, 0x97, ""},
		{"budget wrapped", errors.Join(errors.New("append"), wal.ErrBudgetExceeded), 0x97, ""},
		{"other error", errors.New("disk on fire"), 0x80, ""},
		// Too few replicas is back-pressure like a full disk (0x97, README
		// "Refusal codes") but with its own reason string, and the budget
		// counters and log lines do not move. (Refused after the append
		// — tributary.ErrAfterAppend — a publish is withheld instead, not
		// refused: TestStored*.)
		{"replication", fmt.Errorf("replica: replication_policy refuse: %w", tributary.ErrNotReplicated), 0x97, "too few replicas"},
		// A partition another node owns: 0x83 (replica.ErrFenced wraps
		// tributary.ErrFenced too).
		{"fenced", fmt.Errorf("a.b/3: %w", tributary.ErrFenced), 0x83, "partition moving"},
		// The cloud write path's store failed: retriable, 0x83.
		{"unavailable", fmt.Errorf("put: %w", tributary.ErrUnavailable), 0x83, "storage unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.sink.setFail(tc.cause)
			defer ts.sink.setFail(nil)

			resp, err := publish(t, c, &paho.Publish{Topic: "r/q1", QoS: 1, Payload: []byte("x")})
			if err == nil || resp == nil || resp.ReasonCode != tc.reason || !strings.Contains(reasonString(resp), tc.says) {
				t.Fatalf("qos 1: want PUBACK %#x (%q) and an error, got %+v, %v", tc.reason, tc.says, resp, err)
			}
			// paho returns the PUBREC with its failure code and no error.
			resp, err = publish(t, c, &paho.Publish{Topic: "r/q2", QoS: 2, Payload: []byte("x")})
			if err != nil || resp == nil || resp.ReasonCode != tc.reason || !strings.Contains(reasonString(resp), tc.says) {
				t.Fatalf("qos 2: want PUBREC %#x (%q), got %+v, %v", tc.reason, tc.says, resp, err)
			}
			before := ts.Stats().DroppedQoS0
			if _, err := publish(t, c, &paho.Publish{Topic: "r/q0", QoS: 0, Payload: []byte("x")}); err != nil {
				t.Fatalf("qos 0: %v", err)
			}
			testkit.Eventually(t, 5*time.Second, "qos 0 drop counted", func() bool { return ts.Stats().DroppedQoS0 == before+1 })
		})
	}
	st := ts.Stats()
	if st.Refused != 12 || st.DroppedQoS0 != 6 || st.RefusedBudget != 4 || st.RefusedReplication != 2 || st.RefusedFenced != 2 || st.Accepted != [3]uint64{} {
		t.Fatalf("stats %+v", st)
	}
	if n := ts.sink.len(); n != 0 {
		t.Fatalf("%d records from refused appends", n)
	}

	// The same connection works again once the sink recovers, for every QoS.
	for qos := byte(0); qos <= 2; qos++ {
		mustPublish(t, c, "r/ok", qos, "ok")
	}
	testkit.Eventually(t, 5*time.Second, "records after recovery", func() bool { return len(ts.sink.byTopic("r/ok")) == 3 })

	logs := ts.logs.String()
	// One episode: it ends with the first successful append, not with a
	// different error.
	if n := strings.Count(logs, "wal budget exceeded"); n != 1 {
		t.Errorf("budget start logged %d times:\n%s", n, logs)
	}
	if n := strings.Count(logs, "wal budget available again"); n != 1 {
		t.Errorf("budget end logged %d times:\n%s", n, logs)
	}
	if !strings.Contains(logs, "too few replicas to store it") {
		t.Errorf("replication refusal not logged as such:\n%s", logs)
	}
	if !strings.Contains(logs, "qos 0 publish dropped") || !strings.Contains(logs, "disk on fire") {
		t.Errorf("drop or error not logged:\n%s", logs)
	}
}

func reasonString(r *paho.PublishResponse) string {
	if r == nil || r.Properties == nil {
		return ""
	}
	return r.Properties.ReasonString
}

func mosquittoPub(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("mosquitto_pub")
	if err != nil {
		t.Fatalf("mosquitto_pub not found (install Debian package mosquitto-clients): %v", err)
	}
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all := append([]string{"-h", host, "-p", port, "-V", "mqttv311"}, args...)
	out, err := exec.CommandContext(ctx, bin, all...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mosquitto_pub %v timed out: %s", all, out)
	}
	return string(out), err
}

func TestRefusalMQTT311(t *testing.T) {
	ts := startServer(t, nil)
	other := dialPaho(t, ts.tcp, "bystander", nil)

	ts.sink.setFail(wal.ErrBudgetExceeded)
	out, err := mosquittoPub(t, ts.tcp, "-q", "1", "-i", "m311", "-t", "v3/t", "-m", "refused")
	if n := len(ts.sink.byTopic("v3/t")); err == nil && n != 0 {
		t.Fatalf("mosquitto_pub succeeded and %d records: %s", n, out)
	}
	if err == nil {
		t.Fatalf("mosquitto_pub exited 0 although its publish was refused: %s", out)
	}
	t.Logf("refused mosquitto_pub: %v: %s", err, strings.TrimSpace(out))
	if st := ts.Stats(); st.RefusedBudget != 1 {
		t.Fatalf("stats %+v", st)
	}

	// QoS 2 too.
	if out, err := mosquittoPub(t, ts.tcp, "-q", "2", "-i", "m311", "-t", "v3/t", "-m", "refused"); err == nil {
		t.Fatalf("qos 2 mosquitto_pub exited 0: %s", out)
	}

	// Other clients are unaffected by the refusal: paho's PUBACK carries 0x97.
	if resp, _ := publish(t, other, &paho.Publish{Topic: "v5/t", QoS: 1, Payload: []byte("x")}); resp == nil || resp.ReasonCode != 0x97 {
		t.Fatalf("bystander during refusal: %+v", resp)
	}
	ts.sink.setFail(nil)
	mustPublish(t, other, "v5/t", 1, "x")

	for qos := 0; qos <= 2; qos++ {
		if out, err := mosquittoPub(t, ts.tcp, "-q", strconv.Itoa(qos), "-i", "m311", "-t", "v3/t", "-m", "accepted"); err != nil {
			t.Fatalf("qos %d after recovery: %v: %s", qos, err, out)
		}
	}
	recs := ts.sink.byTopic("v3/t")
	if len(recs) != 3 {
		t.Fatalf("%d records after recovery", len(recs))
	}
	for _, r := range recs {
		if string(r.Value) != "accepted" || r.ClientID != "m311" || r.Headers != nil {
			t.Fatalf("record %+v", r)
		}
	}
}
