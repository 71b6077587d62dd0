package produce

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// from dials from the loopback address ip (127.0.0.0/8 is all local), so
// that one test has clients at several addresses.
func from(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
}

// TestAuthThrottleAcrossProtocols: failed Kafka logins from one address
// for one user throttle both — the address for every user and the user
// from every address — on the HTTP door too, which shares the Authority;
// other users from other addresses go on; the back-off ends.
func TestAuthThrottleAcrossProtocols(t *testing.T) {
	sec := kafkatest.NewSecurity(t, "alice", "bob")
	no := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &no, UsersFile: sec.UsersFile,
		Throttle: auth.ThrottleConfig{Failures: 3, Backoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second, Loopback: true},
		ACL:      []auth.Rule{{Principal: "*", Allow: []auth.Action{auth.Produce}, Streams: []string{"factory.*"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	be := newFakeBackend("edge-1")
	be.addStream("factory.events", "edge-1")
	s := startServer(t, Config{Config: kafka.Config{Auth: a}}, be)
	web := httptest.NewServer(a.Guard("http", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	t.Cleanup(web.Close)

	kafkaAs := func(ip, user, pw string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()), kgo.Dialer(from(ip).DialContext), kgo.RequestRetries(0),
			kgo.SASL(plain.Auth{User: user, Pass: pw}.AsMechanism()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RecordRetries(2), kgo.RetryTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	httpAs := func(ip, user, pw string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", web.URL+"/status", nil)
		req.SetBasicAuth(user, pw)
		cl := &http.Client{Transport: &http.Transport{DialContext: from(ip).DialContext, DisableKeepAlives: true}}
		rsp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rsp.Body.Close()
		return rsp.StatusCode
	}

	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, kafkaAs("127.0.0.2", "alice", "guess"))
		cancel()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("guess %d: %v", i, err)
		}
	}
	if code := httpAs("127.0.0.2", "bob", "bob-pw"); code != 401 {
		t.Fatalf("bob's right password from the guessing address: %d, want 401 (the address is throttled)", code)
	}
	if code := httpAs("127.0.0.3", "alice", "alice-pw"); code != 401 {
		t.Fatalf("alice's right password from another address: %d, want 401 (the user is throttled)", code)
	}
	if err := produceSync(kafkaAs("127.0.0.3", "bob", "bob-pw"), "factory.events", "bob"); err != nil {
		t.Fatalf("bob from another address: %v", err)
	}
	testkit.Eventually(t, 15*time.Second, "alice admitted after the back-off", func() bool {
		return httpAs("127.0.0.4", "alice", "alice-pw") == 200
	})
}
