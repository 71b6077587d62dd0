package e2e

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMQTT5ExpiryAndPropertiesMosquitto: with real clients
// (mosquitto_pub, `mosquitto_sub -V mqttv5`) and two `tributary dev`
// nodes in one cluster, a (pipelined acknowledgements, the default) and b
// (--mqtt-blocking-acks): a persistent session subscribed and then
// offline gets none of the messages whose Message Expiry Interval passed
// while it was away [MQTT-3.3.2-5], and the unexpired one with its
// remaining interval [MQTT-3.3.2-6] and its content type and user
// properties, for every pair of publisher's node and subscriber's node:
// each ack path on one node (a→a, b→b) and across the cluster (a→b, b→a).
func TestMQTT5ExpiryAndPropertiesMosquitto(t *testing.T) {
	for _, bin := range []string{"mosquitto_sub", "mosquitto_pub"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found (Debian package mosquitto-clients): %v", bin, err)
		}
	}
	nodes := gossipNodesWith(t, map[string][]string{"b": {"--mqtt-blocking-acks"}}, "a", "b")
	byID := map[string]*proc{"a": nodes[0], "b": nodes[1]}
	hostPort := func(p *proc) (string, string) { h, port, _ := strings.Cut(p.MQTT, ":"); return h, port }
	pairs := [][2]string{{"a", "a"}, {"b", "b"}, {"a", "b"}, {"b", "a"}} // publisher's node, subscriber's node
	sub := func(p *proc, id, filter string, extra ...string) (string, error) {
		h, port := hostPort(p)
		args := append([]string{"-h", h, "-p", port, "-V", "mqttv5", "-c", "-x", "3600", "-i", id, "-q", "1", "-t", filter}, extra...)
		out, err := exec.Command("mosquitto_sub", args...).CombinedOutput()
		return string(out), err
	}
	pub := func(p *proc, topic, msg string, props ...string) {
		t.Helper()
		h, port := hostPort(p)
		args := append([]string{"-h", h, "-p", port, "-V", "mqttv5", "-q", "1", "-t", topic, "-m", msg}, props...)
		if out, err := exec.Command("mosquitto_pub", args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub %s on %s: %v: %s", topic, p.MQTT, err, out)
		}
	}
	// The persistent sessions: subscribe (-E: exit once subscribed), then offline.
	for _, pr := range pairs {
		id := "exp-" + pr[0] + pr[1]
		if out, err := sub(byID[pr[1]], id, "exp/"+pr[0]+pr[1]+"/#", "-E"); err != nil {
			t.Fatalf("mosquitto_sub %s: %v: %s", id, err, out)
		}
	}
	for _, p := range nodes {
		waitFor(t, 20*time.Second, p.MQTT+" to know the other node's subscriptions", func() bool {
			return labelledMetric(t, p, remote) >= 2
		})
	}
	for _, pr := range pairs {
		topic := "exp/" + pr[0] + pr[1] + "/t"
		pub(byID[pr[0]], topic, "gone-0", "-D", "publish", "message-expiry-interval", "1")
		pub(byID[pr[0]], topic, "gone-1", "-D", "publish", "message-expiry-interval", "1")
	}
	expiring := time.Now()
	// The unexpired one in a later second than the others: mochi re-sends
	// a session's messages in the order of their second of creation, so
	// it is the last a resumed session gets.
	waitFor(t, 5*time.Second, "the next second", func() bool { return time.Now().Unix() > expiring.Unix() })
	keptStart := time.Now()
	for _, pr := range pairs {
		topic := "exp/" + pr[0] + pr[1] + "/t"
		pub(byID[pr[0]], topic, "kept", "-D", "publish", "message-expiry-interval", "3600",
			"-D", "publish", "content-type", "text/plain", "-D", "publish", "user-property", "site", "p"+pr[0])
	}
	kept := time.Now()
	// The two expire 1 s after their second of creation; mochi's sweep runs
	// every second: reconnect once two sweeps have passed.
	waitFor(t, 10*time.Second, "the expiry interval and two sweeps", func() bool { return time.Since(expiring) >= 4*time.Second })
	for _, pr := range pairs {
		id := "exp-" + pr[0] + pr[1]
		// -C 1: the first message the resumed session gets must be the kept one.
		resumed := time.Now()
		out, err := sub(byID[pr[1]], id, "exp/"+pr[0]+pr[1]+"/#", "-C", "1", "-W", "20", "-F", "%p|%E|%C|%P")
		if err != nil {
			t.Fatalf("%s→%s: mosquitto_sub: %v: %s", pr[0], pr[1], err, out)
		}
		f := strings.Split(strings.TrimSpace(out), "|")
		if len(f) != 4 || f[0] != "kept" || f[2] != "text/plain" || f[3] != "site:p"+pr[0] {
			t.Fatalf("%s→%s: the resumed session got %q first, want kept|<expiry>|text/plain|site:p%s", pr[0], pr[1], out, pr[0])
		}
		left, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("%s→%s: expiry %q: %v", pr[0], pr[1], f[1], err)
		}
		// Created before kept, delivered after resumed; created after
		// keptStart, delivered now.
		if hi, lo := 3600-int(resumed.Sub(kept).Seconds()), 3600-int(time.Since(keptStart).Seconds())-1; left > hi || left < lo {
			t.Fatalf("%s→%s: remaining expiry %d s, want %d to %d", pr[0], pr[1], left, lo, hi)
		}
		t.Logf("%s→%s: %s", pr[0], pr[1], strings.TrimSpace(out))
	}
}
