package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/httpapi/wire"
)

// fakeSink assigns offsets like the WAL, or refuses with err.
type fakeSink struct {
	mu    sync.Mutex
	next  int64
	err   error
	calls int
	recs  []*tributary.Record
}

func (s *fakeSink) Append(ctx context.Context, w *tributary.Write) error {
	recs := w.Records
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return s.err
	}
	for _, r := range recs {
		if !w.Chosen {
			r.Partition = 0
		}
		r.Offset = s.next
		s.next++
	}
	s.recs = append(s.recs, recs...)
	return nil
}

func (s *fakeSink) Submit(ctx context.Context, w *tributary.Write, _ tributary.Wait, done func(error)) (tributary.Ticket, error) {
	err := s.Append(ctx, w)
	go done(err)
	return nil, nil
}

func (s *fakeSink) Confirm(context.Context, *tributary.Record) error { return nil }

func newTestProducer(t *testing.T, sink tributary.Appender, a *auth.Authority) *httptest.Server {
	t.Helper()
	if a == nil {
		var err error
		if a, err = auth.Open(auth.Config{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	NewProducer(ProducerConfig{ClusterID: "tributary", Auth: a, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sink).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func produce(t *testing.T, srv *httptest.Server, body string, streamed bool, user string) (*http.Response, []wire.Report) {
	t.Helper()
	var r io.Reader = strings.NewReader(body)
	if streamed {
		r = io.MultiReader(r)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v3/clusters/tributary/topics/a.b/records", r)
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.SetBasicAuth(user, user+"-pw")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reps []wire.Report
	dec := json.NewDecoder(resp.Body)
	for {
		var rep wire.Report
		if dec.Decode(&rep) != nil {
			break
		}
		reps = append(reps, rep)
	}
	return resp, reps
}

// TestProduceBackPressure: a full WAL is 429 with Retry-After and reason
// budget, missing replicas and a partition being taken over 503; in a
// stream each record's report carries it.
func TestProduceBackPressure(t *testing.T) {
	sink := &fakeSink{}
	srv := newTestProducer(t, sink, nil)
	for _, c := range []struct {
		err    error
		code   int
		reason string
	}{
		{fmt.Errorf("append: %w", tributary.ErrBudget), 429, "budget"},
		{fmt.Errorf("append: %w", tributary.ErrNotReplicated), 503, "replication"},
		{fmt.Errorf("append: %w", tributary.ErrFenced), 503, "fenced"},
		{ErrUnknownStream, 404, ""},
	} {
		sink.err = c.err
		resp, reps := produce(t, srv, `{"value":{"data":1}}`, false, "")
		if resp.StatusCode != c.code || len(reps) != 1 || reps[0].ErrorCode != c.code || reps[0].Reason != c.reason {
			t.Errorf("%v: %d %+v", c.err, resp.StatusCode, reps)
		}
		if ra := resp.Header.Get("Retry-After"); (c.code == 429 || c.code == 503) && ra == "" {
			t.Errorf("%v: no Retry-After", c.err)
		}
		resp, reps = produce(t, srv, `{"value":{"data":1}}{"value":{"data":2}}`, true, "")
		if resp.StatusCode != 200 || len(reps) != 2 || reps[1].ErrorCode != c.code || reps[1].Reason != c.reason ||
			(c.code != 404 && reps[1].RetryAfterMs <= 0) {
			t.Errorf("%v streamed: %d %+v", c.err, resp.StatusCode, reps)
		}
	}
	if len(sink.recs) != 0 {
		t.Fatalf("refused records were kept: %d", len(sink.recs))
	}
	sink.err = nil
	var body strings.Builder
	for i := range 2500 {
		fmt.Fprintf(&body, `{"value":{"type":"STRING","data":"v%d"}}`, i)
	}
	resp, reps := produce(t, srv, body.String(), true, "")
	if resp.StatusCode != 200 || len(reps) != 2500 {
		t.Fatalf("stream of 2500: %d, %d reports", resp.StatusCode, len(reps))
	}
	for i, r := range reps {
		if r.ErrorCode != 200 || *r.Offset != int64(i) || string(sink.recs[i].Value) != fmt.Sprint("v", i) {
			t.Fatalf("report %d: %+v", i, r)
		}
	}
	if sink.calls > 2500/2 {
		t.Errorf("%d appends for 2500 records: not batched", sink.calls)
	}
}

// TestProduceAuth: no credentials 401, a principal without produce on
// the stream 403 (nothing appended), an allowed one 200 with its name on
// the record.
func TestProduceAuth(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	for _, u := range []string{"alice", "bob"} {
		if err := auth.SetPassword(users, u, []byte(u+"-pw")); err != nil {
			t.Fatal(err)
		}
	}
	no := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &no, UsersFile: users, ACL: []auth.Rule{
		{Principal: "alice", Allow: []auth.Action{auth.Produce}, Streams: []string{"a.*"}},
		{Principal: "bob", Allow: []auth.Action{auth.Produce}, Streams: []string{"other.*"}}}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sink := &fakeSink{}
	srv := newTestProducer(t, sink, a)
	if resp, _ := produce(t, srv, `{"value":{"data":1}}`, false, ""); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("anonymous: %d", resp.StatusCode)
	}
	if resp, _ := produce(t, srv, `{"value":{"data":1}}`, false, "bob"); resp.StatusCode != 403 {
		t.Fatalf("bob: %d", resp.StatusCode)
	}
	if resp, reps := produce(t, srv, `{"value":{"data":1}}`, false, "alice"); resp.StatusCode != 200 || len(reps) != 1 {
		t.Fatalf("alice: %d %+v", resp.StatusCode, reps)
	}
	if len(sink.recs) != 1 || sink.recs[0].Principal != "alice" || sink.recs[0].Source != "http" {
		t.Fatalf("appended %+v", sink.recs)
	}
}

// TestProduceEmptyStream: a chunked body without a record (empty, or
// whitespace only) is answered 400, as a body of known length is; a
// stream with records still gets 200 and a report each.
func TestProduceEmptyStream(t *testing.T) {
	sink := &fakeSink{}
	srv := newTestProducer(t, sink, nil)
	for _, body := range []string{"", " \n"} {
		for _, streamed := range []bool{true, false} {
			if resp, _ := produce(t, srv, body, streamed, ""); resp.StatusCode != http.StatusBadRequest {
				t.Errorf("body %q (streamed %v): status %d, want 400", body, streamed, resp.StatusCode)
			}
		}
	}
	if resp, reps := produce(t, srv, `{"value":{"data":1}}`, true, ""); resp.StatusCode != 200 || len(reps) != 1 || reps[0].ErrorCode != 200 {
		t.Fatalf("one streamed record: %d %+v", resp.StatusCode, reps)
	}
}
