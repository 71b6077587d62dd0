package produce

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// fileSCRAM512 is a SCRAM-SHA-512 client that knows no password, only a
// salted password: what whoever reads the password file has when the $7$
// hash is used as SCRAM-SHA-512's SaltedPassword.
type fileSCRAM512 struct {
	user   string
	salted []byte
}

func (fileSCRAM512) Name() string { return "SCRAM-SHA-512" }

func (m fileSCRAM512) Authenticate(context.Context, string) (sasl.Session, []byte, error) {
	nb := make([]byte, 16)
	rand.Read(nb)
	s := &fileSCRAM512Session{m: m, nonce: base64.RawStdEncoding.EncodeToString(nb)}
	s.firstBare = "n=" + m.user + ",r=" + s.nonce
	return s, []byte("n,," + s.firstBare), nil
}

type fileSCRAM512Session struct {
	m                fileSCRAM512
	nonce, firstBare string
	step             int
}

func (s *fileSCRAM512Session) Challenge(srv []byte) (bool, []byte, error) {
	s.step++
	if s.step > 1 {
		return true, nil, nil // the server-final message: accepted
	}
	var r string
	for _, f := range strings.Split(string(srv), ",") {
		if v, ok := strings.CutPrefix(f, "r="); ok {
			r = v
		}
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha512.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(s.m.salted, "Client Key")
	stored := sha512.Sum512(clientKey)
	final := "c=biws,r=" + r
	sig := mac(stored[:], s.firstBare+","+string(srv)+","+final)
	for i := range clientKey {
		clientKey[i] ^= sig[i]
	}
	return false, []byte(final + ",p=" + base64.StdEncoding.EncodeToString(clientKey)), nil
}

// TestAuthSCRAM512NotFromTheFile: SCRAM-SHA-512 works for a user that
// `tributary passwd` wrote, but the password file's contents alone (the
// $7$ hash as SaltedPassword) do not log in; an entry written without
// a SCRAM-SHA-512 credential (mosquitto_passwd's) cannot use SCRAM-SHA-512
// even with the right password, and still works with PLAIN.
func TestAuthSCRAM512NotFromTheFile(t *testing.T) {
	sec := kafkatest.NewSecurity(t, "alice")
	legacy, err := auth.HashPassword("legacy", []byte("legacy-pw"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(sec.UsersFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, strings.SplitN(legacy, "\n", 2)[0]) // the $7$ line only, as mosquitto_passwd writes it
	f.Close()
	a := sec.Authority(t, auth.Rule{Principal: "*", Allow: []auth.Action{auth.Produce}, Streams: []string{"factory.*"}})
	be := newFakeBackend("edge-1")
	be.addStream("factory.events", "edge-1")
	s := startServer(t, Config{Config: kafka.Config{Auth: a}}, be)
	client := func(m sasl.Mechanism) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()), kgo.SASL(m), kgo.RequestRetries(0),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(2), kgo.RetryTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	refused := func(name string, m sasl.Mechanism) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, client(m)); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s: %v, want SASL_AUTHENTICATION_FAILED", name, err)
		}
	}

	if err := produceSync(client(scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism()), "factory.events", "alice-512"); err != nil {
		t.Fatalf("alice with SCRAM-SHA-512: %v", err)
	}

	file, _ := os.ReadFile(sec.UsersFile)
	for _, line := range strings.Split(string(file), "\n") {
		rest, ok := strings.CutPrefix(line, "alice:$7$")
		if !ok {
			continue
		}
		parts := strings.Split(rest, "$")
		hash, err := base64.StdEncoding.DecodeString(parts[2])
		if err != nil {
			t.Fatal(err)
		}
		refused("the $7$ hash as the salted password", fileSCRAM512{user: "alice", salted: hash})
	}

	refused("legacy user with SCRAM-SHA-512", scram.Auth{User: "legacy", Pass: "legacy-pw"}.AsSha512Mechanism())
	if err := produceSync(client(plain.Auth{User: "legacy", Pass: "legacy-pw"}.AsMechanism()), "factory.events", "legacy-plain"); err != nil {
		t.Fatalf("legacy user with PLAIN: %v", err)
	}
	var got []string
	for _, r := range be.records("factory.events", 0) {
		got = append(got, string(r.Value)+"/"+r.Principal)
	}
	if strings.Join(got, " ") != "alice-512/alice legacy-plain/legacy" {
		t.Fatalf("records %v", got)
	}
}
