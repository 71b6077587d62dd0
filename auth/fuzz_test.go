package auth

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParsePasswd: any file either parses or errors; never panics; every
// parsed entry has a hash of the right size.
func FuzzParsePasswd(f *testing.F) {
	f.Add("alice:$7$101$D1SIqUmCUbLNKFoh$mMBVpR8Mh+8AfgdHSwqd0lYLVpdhlbEBqK5HLmCQAfU4OD5WXfqaC6DQngA0YZFwsAikPdVTVeYYeWGUss9a7Q==\n")
	f.Add("#comment\nbob:$6$c2FsdA==$" + strings.Repeat("A", 86) + "==\n")
	f.Add("#tributary-scram-sha-256:u:4096:c2FsdA==:" + strings.Repeat("A", 43) + "=:" + strings.Repeat("A", 43) + "=\n")
	f.Fuzz(func(t *testing.T, body string) {
		users, err := parsePasswd(strings.NewReader(body))
		if err != nil {
			return
		}
		for u, e := range users {
			if u == "" || len(e.hash) != 64 {
				t.Fatalf("entry %q: %+v", u, e)
			}
			e.verify([]byte("x"))
		}
	})
}

// FuzzSCRAM: any pair of client messages is answered or refused; only the
// right proof authenticates (a random one never does).
func FuzzSCRAM(f *testing.F) {
	a, err := Open(Config{UsersFile: "testdata/mosquitto.passwd"}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("n,,n=alice,r=abc"), []byte("c=biws,r=abc,p=AAAA"))
	f.Add([]byte("y,a=alice,n=alice,r=x"), []byte("c=eSws,r=x,p="))
	f.Add([]byte("n,,n=a=2Cb,r=1,tokenauth=true"), []byte(""))
	f.Fuzz(func(t *testing.T, first, final []byte) {
		s, _ := a.NewSCRAM(cl, "SCRAM-SHA-512")
		if _, _, err := s.Step(first); err != nil {
			return
		}
		if _, done, err := s.Step(final); done || err == nil {
			t.Fatalf("random proof authenticated: %q %q", first, final)
		}
	})
}

// FuzzToken: any string is refused or verified without panicking.
func FuzzToken(f *testing.F) {
	users := filepath.Join(f.TempDir(), "passwd")
	if err := SetPassword(users, "x", []byte("pw")); err != nil {
		f.Fatal(err)
	}
	a, err := Open(Config{UsersFile: users}, nil)
	if err != nil {
		f.Fatal(err)
	}
	tok, _, _ := a.IssueToken(Principal{Name: "x"}, 0, time.Time{})
	f.Add(tok)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := a.Token(cl, s)
		if err == nil && p.Name == "" {
			t.Fatal("empty principal accepted")
		}
		looksLikeJWT([]byte(s))
	})
}
