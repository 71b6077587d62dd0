package listen

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestLoopbackHost(t *testing.T) {
	h := LoopbackHost(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for host, want := range map[string]int{
		"127.0.0.1:8080": 200, "localhost:1": 200, "LOCALHOST": 200, "app.localhost:3": 200, "[::1]:9": 200, "127.9.9.9": 200,
		"rebound.example:8080": 421, "10.0.0.1:80": 421, "localhost.evil.example": 421, "": 421,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Host %q: %d, want %d", host, w.Code, want)
		}
	}
}

func TestCheckOrigin(t *testing.T) {
	for _, c := range []struct {
		allowed      []string
		host, origin string
		want         bool
	}{
		{nil, "127.0.0.1:1884", "", true},
		{nil, "127.0.0.1:1884", "http://127.0.0.1:1884", true},
		{nil, "127.0.0.1:1884", "http://evil.example", false},
		{nil, "127.0.0.1:1884", "http://127.0.0.1:1885", false},
		{[]string{"https://dash.example"}, "broker:443", "https://dash.example", true},
		{[]string{"https://dash.example/"}, "broker:443", "https://DASH.example", true},
		{[]string{"https://dash.example"}, "broker:443", "https://dash.example.evil", false},
		{[]string{"*"}, "broker:443", "https://anything", true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := CheckOrigin(c.allowed)(r); got != c.want {
			t.Errorf("%v, Host %s, Origin %q: %v", c.allowed, c.host, c.origin, got)
		}
	}
}
