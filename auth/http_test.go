package auth

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGuard: Basic and Bearer credentials, the 401 challenges, 403 for a
// principal without the action, state-changing methods for admins only,
// and an open Authority letting everything through.
func TestGuard(t *testing.T) {
	users := filepath.Join(t.TempDir(), "passwd")
	for _, u := range []string{"ops", "viewer"} {
		if err := SetPassword(users, u, []byte("pw")); err != nil {
			t.Fatal(err)
		}
	}
	no := false
	a := open(t, Config{AllowAnonymous: &no, UsersFile: users, JWT: JWTConfig{SecretFile: writeFile(t, "secret", []byte(strings.Repeat("k", 32)))},
		ACL: []Rule{{Principal: "ops", Allow: []Action{Admin}}, {Principal: "viewer", Allow: []Action{Consume}}}})
	tok, _, err := a.IssueToken(Principal{Name: "ops"}, time.Minute, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	try := func(h http.Handler, method, user, bearer string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/x", nil)
		if user != "" {
			r.SetBasicAuth(user, "pw")
		}
		if bearer != "" {
			r.Header.Set("Authorization", "Bearer "+bearer)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	read, admin := a.Guard("http", "", ok), a.Guard("http", Admin, ok)
	for _, c := range []struct {
		h              http.Handler
		method, user   string
		bearer         string
		status         int
		challengeBasic bool
	}{
		{read, "GET", "", "", 401, true},
		{read, "GET", "viewer", "", 200, false},
		{read, "GET", "", tok, 200, false},
		{read, "GET", "", tok + "x", 401, true},
		{read, "POST", "viewer", "", 403, false},
		{read, "POST", "ops", "", 200, false},
		{admin, "GET", "viewer", "", 403, false},
		{admin, "GET", "", tok, 200, false},
	} {
		w := try(c.h, c.method, c.user, c.bearer)
		if w.Code != c.status {
			t.Errorf("%s as %q/%v: %d, want %d", c.method, c.user, c.bearer != "", w.Code, c.status)
		}
		if got := strings.Join(w.Header().Values("WWW-Authenticate"), ", "); c.challengeBasic && (!strings.Contains(got, "Basic") || !strings.Contains(got, "Bearer")) {
			t.Errorf("challenge %q", got)
		}
	}
	if w := try(open(t, Config{}).Guard("http", Admin, ok), "GET", "", ""); w.Code != 200 {
		t.Errorf("open authority: %d", w.Code)
	}
}
