package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/tabletest"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables"
)

// readServer serves the read routes over a catalog whose stream
// factory.t has three committed rows, to principals whose tokens are
// signed with the returned secret.
func readServer(t *testing.T) (url string, secret []byte) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	cat, err := tables.Open(ctx, tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	if _, err := cat.EnsureTable(ctx, "factory.t"); err != nil {
		t.Fatal(err)
	}
	var recs []*tributary.Record
	for i := range 3 {
		recs = append(recs, &tributary.Record{Stream: "factory.t", Offset: int64(i), Timestamp: time.Now().UnixMicro(),
			Topic: "t", Value: []byte(fmt.Sprint("v", i)), Source: "mqtt", ClientID: "c", Node: "edge-1"})
	}
	tabletest.Commit(t, cat, "factory.t", recs)
	secret = []byte("an http read test secret of enough length")
	secretFile := filepath.Join(dir, "jwt.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	off := false
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := auth.Open(auth.Config{AllowAnonymous: &off, JWT: auth.JWTConfig{SecretFile: secretFile},
		ACL: []auth.Rule{{Principal: "reader", Allow: []auth.Action{auth.Consume}}}}, log)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	NewReader(ReaderConfig{Auth: a, Logger: log}, tables.NewReader(cat, tables.ReaderConfig{}), nil).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, secret
}

// TestReadTokenExpiry: a long poll and an event stream authenticated with
// a token end when it expires — the long poll with 401 before its
// timeout, the event stream with an error event — both naming the expiry.
func TestReadTokenExpiry(t *testing.T) {
	url, secret := readServer(t)
	records := url + "/v1/streams/factory.t/partitions/0/records"
	get := func(query string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", records+query, nil)
		req.Header.Set("Authorization", "Bearer "+testkit.HS256Token(t, secret, "reader", 2*time.Second))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rsp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rsp.Body.Close() })
		return rsp
	}

	t.Run("long poll", func(t *testing.T) {
		start := time.Now()
		rsp := get("?offset=3&timeout=25s")
		body, _ := io.ReadAll(rsp.Body)
		if rsp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "token expired") {
			t.Fatalf("a long poll past its token's expiry: %d %s after %s, want 401 naming the expiry", rsp.StatusCode, body, time.Since(start))
		}
	})
	t.Run("events", func(t *testing.T) {
		rsp := get("?offset=0", "Accept", "text/event-stream")
		if rsp.StatusCode != 200 {
			t.Fatalf("events: %d", rsp.StatusCode)
		}
		sc := bufio.NewScanner(rsp.Body)
		var got []string
		for sc.Scan() {
			got = append(got, sc.Text())
			if strings.HasPrefix(sc.Text(), "data: ") && strings.Contains(sc.Text(), "token expired") {
				if n := strings.Count(strings.Join(got, "\n"), "event: record"); n != 3 {
					t.Fatalf("%d records before the expiry, want 3:\n%s", n, strings.Join(got, "\n"))
				}
				return
			}
		}
		t.Fatalf("the event stream ended (%v) without an error naming the expiry:\n%s", sc.Err(), strings.Join(got, "\n"))
	})
}
