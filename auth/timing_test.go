package auth

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestPasswordTimingUnknownUser: a wrong password for a real user and any
// password for an unknown one take the same time over HTTP Basic (one
// derivation each), so timing does not tell which users exist. Medians of
// many interleaved attempts, with a generous bound: a busy machine slows
// both alike.
func TestPasswordTimingUnknownUser(t *testing.T) {
	users := filepath.Join(t.TempDir(), "passwd")
	if err := SetPassword(users, "alice", []byte("pw")); err != nil {
		t.Fatal(err)
	}
	no := false
	a := open(t, Config{AllowAnonymous: &no, UsersFile: users, Throttle: ThrottleConfig{Failures: -1}})
	srv := httptest.NewServer(a.Guard("http", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	t.Cleanup(srv.Close)
	try := func(user string) time.Duration {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.SetBasicAuth(user, "wrong")
		start := time.Now()
		rsp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rsp.Body.Close()
		if rsp.StatusCode != 401 {
			t.Fatalf("%s with a wrong password: %d", user, rsp.StatusCode)
		}
		return time.Since(start)
	}
	try("alice") // a warm connection for both
	var known, unknown []time.Duration
	for range 21 {
		known = append(known, try("alice"))
		unknown = append(unknown, try("nobody"))
	}
	slices.Sort(known)
	slices.Sort(unknown)
	k, u := known[len(known)/2], unknown[len(unknown)/2]
	t.Logf("median: wrong password %s, unknown user %s", k, u)
	if ratio := float64(u) / float64(k); ratio < 0.5 || ratio > 2 {
		t.Fatalf("unknown user %s vs wrong password %s (ratio %.2f): the time tells whether the user exists", u, k, ratio)
	}
}
