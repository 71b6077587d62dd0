package e2e

// Kafka SASL and ACLs with real clients against one `tributary dev
// --security FILE` process (TLS on every listener, users in a password
// file, an HS256 JWT secret, ACL rules): kcat (librdkafka) with
// SASL_SSL SCRAM-SHA-512 and PLAIN and sarama with PLAIN produce at the
// edge; kgo with SCRAM-SHA-512 in a consumer group and with OAUTHBEARER
// consume from the cloud side; no credentials, wrong credentials, an
// expired JWT and a principal without rights each get Kafka's error, and
// nothing of theirs reaches the table; every row carries its producer's
// principal.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
)

const kafkaAuthSecret = "e2e-kafka-auth-jwt-secret-32-bytes-or-more"

// kafkaAuthACL: producer may produce to factory.*, analytics consume it in
// groups dash-*, the JWT subject reader consume it in any group; intruder
// has rights on other.* only.
const kafkaAuthACL = `allow_anonymous: false
users_file: %s
jwt:
  secret_file: %s
acl:
  - principal: producer
    allow: [produce]
    streams: ["factory.*"]
  - principal: analytics
    allow: [consume]
    streams: ["factory.*"]
    groups: ["dash-*"]
  - principal: reader
    allow: [consume]
    streams: ["factory.*"]
  - principal: intruder
    allow: [produce, consume]
    streams: ["other.*"]
`

func pw(user string) string { return user + "-secret" }

func TestKafkaAuth(t *testing.T) {
	dir := t.TempDir()
	secDir := t.TempDir()
	users, secret := filepath.Join(secDir, "passwd"), filepath.Join(secDir, "jwt.secret")
	for _, u := range []string{"producer", "analytics", "intruder"} {
		if err := auth.SetPassword(users, u, []byte(pw(u))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(secret, []byte(kafkaAuthSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testkit.NewCA(t)
	secFile := filepath.Join(secDir, "security.yaml")
	if err := os.WriteFile(secFile, []byte(securityYAML(ca.Server(t))+fmt.Sprintf(kafkaAuthACL, users, secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startDev(t, dir, "--security", secFile)
	roots := &tls.Config{RootCAs: ca.Pool}
	const stream = "factory.telemetry"

	kcatProduce := func(mech, user, pass, topic string, values ...string) (string, error) {
		cmd := exec.Command(kcatPath(t), "-b", p.Kafka, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location="+ca.Files(),
			"-X", "sasl.mechanisms="+mech, "-X", "sasl.username="+user, "-X", "sasl.password="+pass,
			"-X", "message.timeout.ms=5000", "-P", "-t", topic)
		cmd.Stdin = strings.NewReader(strings.Join(values, "\n") + "\n")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	kgoClient := func(t *testing.T, m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
		t.Helper()
		opts = append([]kgo.Opt{kgo.SeedBrokers(p.CloudKafka), kgo.DialTLSConfig(roots.Clone()), kgo.RequestRetries(0)}, opts...)
		if m != nil {
			opts = append(opts, kgo.SASL(m))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	token := func(sub string, exp time.Time) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString([]byte(kafkaAuthSecret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	consumeN := func(t *testing.T, cl *kgo.Client, n int) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got := 0
		for got < n && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
				t.Fatalf("consume: %v", errs)
			}
			got += fs.NumRecords()
		}
		return got
	}

	t.Run("produce", func(t *testing.T) {
		if out, err := kcatProduce("SCRAM-SHA-512", "producer", pw("producer"), stream, "kcat-scram-1", "kcat-scram-2", "kcat-scram-3"); err != nil {
			t.Fatalf("kcat SCRAM-SHA-512: %v\n%s", err, out)
		}
		if out, err := kcatProduce("PLAIN", "producer", pw("producer"), stream, "kcat-plain-1", "kcat-plain-2"); err != nil {
			t.Fatalf("kcat PLAIN: %v\n%s", err, out)
		}
		cfg := sarama.NewConfig()
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, roots.Clone()
		cfg.Net.SASL.Enable, cfg.Net.SASL.Mechanism = true, sarama.SASLTypePlaintext
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "producer", pw("producer")
		sp, err := sarama.NewSyncProducer([]string{p.Kafka}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: stream, Value: sarama.StringEncoder(fmt.Sprintf("sarama-%d", i))}); err != nil {
				t.Fatalf("sarama PLAIN: %v", err)
			}
		}
		sp.Close()
		waitRows(t, dir, stream, 7)
		for _, r := range readTable(t, dir, stream) {
			if r.Principal != "producer" || r.Source != "kafka" {
				t.Fatalf("row %q: principal %q, source %q", r.Value, r.Principal, r.Source)
			}
		}
	})

	t.Run("consume", func(t *testing.T) {
		group := kgoClient(t, scram.Auth{User: "analytics", Pass: pw("analytics")}.AsSha512Mechanism(),
			kgo.ConsumeTopics(stream), kgo.ConsumerGroup("dash-e2e"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RequestRetries(5))
		if n := consumeN(t, group, 7); n != 7 {
			t.Fatalf("kgo SCRAM group: %d records", n)
		}
		bearer := kgoClient(t, oauth.Auth{Token: token("reader", time.Now().Add(time.Hour))}.AsMechanism(),
			kgo.ConsumeTopics(stream), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RequestRetries(5))
		if n := consumeN(t, bearer, 7); n != 7 {
			t.Fatalf("kgo OAUTHBEARER: %d records", n)
		}
	})

	t.Run("refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// No credentials: the connection is closed at the first request.
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, kgoClient(t, nil)); err == nil {
			t.Fatal("metadata without credentials answered")
		}
		if out, err := exec.Command(kcatPath(t), "-b", p.Kafka, "-X", "security.protocol=SSL", "-X", "ssl.ca.location="+ca.Files(),
			"-m", "3", "-L").CombinedOutput(); err == nil {
			t.Fatalf("kcat without SASL listed metadata:\n%s", out)
		}
		// Wrong credentials, and an expired token: SASL_AUTHENTICATION_FAILED.
		out, err := kcatProduce("PLAIN", "producer", "wrong", stream, "wrong-password")
		if err == nil || !strings.Contains(out, "Authentication failed") {
			t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
		}
		out, err = kcatProduce("SCRAM-SHA-512", "nobody", "x", stream, "unknown-user")
		if err == nil || !strings.Contains(out, "Authentication failed") {
			t.Fatalf("kcat with an unknown user: %v\n%s", err, out)
		}
		expired := kgoClient(t, oauth.Auth{Token: token("reader", time.Now().Add(-time.Minute))}.AsMechanism())
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, expired); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("expired token: %v", err)
		}
		// A principal without rights: TOPIC_AUTHORIZATION_FAILED at the
		// edge and in the cloud, GROUP_AUTHORIZATION_FAILED for a group.
		out, err = kcatProduce("SCRAM-SHA-512", "intruder", pw("intruder"), stream, "intruder-1")
		if err == nil || !strings.Contains(out, "authorization failed") {
			t.Fatalf("kcat as intruder: %v\n%s", err, out)
		}
		intruder := kgoClient(t, plain.Auth{User: "intruder", Pass: pw("intruder")}.AsMechanism(), kgo.ConsumeTopics(stream))
		var fetchErr error
		for fetchErr == nil && ctx.Err() == nil {
			intruder.PollFetches(ctx).EachError(func(_ string, _ int32, err error) { fetchErr = err })
		}
		if !errors.Is(fetchErr, kerr.TopicAuthorizationFailed) {
			t.Fatalf("kgo consume as intruder: %v", fetchErr)
		}
		outsider := kgoClient(t, plain.Auth{User: "analytics", Pass: pw("analytics")}.AsMechanism())
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKey = "not-a-dashboard"
		if r, err := fc.RequestWith(ctx, outsider); err != nil || r.ErrorCode != kerr.GroupAuthorizationFailed.Code {
			t.Fatalf("find coordinator of a forbidden group: %+v %v", r, err)
		}

		// Nothing of theirs was written: a marker produced after them is
		// committed, and the table holds it and the 7 rows only.
		if out, err := kcatProduce("PLAIN", "producer", pw("producer"), stream, "marker"); err != nil {
			t.Fatalf("kcat marker: %v\n%s", err, out)
		}
		waitRows(t, dir, stream, 8)
		rows := readTable(t, dir, stream)
		for _, r := range rows {
			if v := string(r.Value); strings.HasPrefix(v, "intruder") || strings.HasPrefix(v, "wrong") || strings.HasPrefix(v, "unknown") {
				t.Fatalf("a refused client's record %q reached the table", v)
			}
		}
		if len(rows) != 8 {
			t.Fatalf("%d rows, want 8", len(rows))
		}
	})
}
