package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
)

// fakeSink assigns offsets like the WAL, or refuses with err.
type fakeSink struct {
	mu   sync.Mutex
	next int64
	err  error
	recs []*tributary.Record
}

func (s *fakeSink) Append(ctx context.Context, w *tributary.Write) error {
	recs := w.Records
	s.mu.Lock()
	defer s.mu.Unlock()
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

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// server is a ProduceService over sink with a, on HTTP/2 (h2c).
func server(t *testing.T, sink tributary.Appender, a *auth.Authority) string {
	t.Helper()
	mux := http.NewServeMux()
	NewProducer(ProducerConfig{Auth: a, Logger: quiet()}, sink).Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func client(url string, opts ...connect.ClientOption) pbconnect.ProduceServiceClient {
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return pbconnect.NewProduceServiceClient(&http.Client{Transport: tr}, url, append([]connect.ClientOption{connect.WithGRPC()}, opts...)...)
}

// call sends reqs on one Produce call and returns the answers and the
// call's final error.
func call(t *testing.T, c pbconnect.ProduceServiceClient, reqs []*pb.ProduceRequest, md ...string) ([]*pb.ProduceResponse, error) {
	t.Helper()
	st := c.Produce(context.Background())
	for i := 0; i+1 < len(md); i += 2 {
		st.RequestHeader().Set(md[i], md[i+1])
	}
	for _, r := range reqs {
		if st.Send(r) != nil {
			break
		}
	}
	st.CloseRequest()
	var out []*pb.ProduceResponse
	for {
		r, err := st.Receive()
		if err != nil {
			st.CloseResponse()
			if errors.Is(err, io.EOF) { // a clean end
				err = nil
			}
			return out, err
		}
		out = append(out, r)
	}
}

// TestProduceCodes: back-pressure answers each record with its code,
// reason and retry delay and the call goes on; records are answered in
// order with their offsets.
func TestProduceCodes(t *testing.T) {
	sink := &fakeSink{}
	c := client(server(t, sink, openAuthority(t)))
	for _, tc := range []struct {
		err          error
		code, reason string
	}{
		{fmt.Errorf("x: %w", tributary.ErrBudget), "resource_exhausted", "budget"},
		{fmt.Errorf("x: %w", tributary.ErrNotReplicated), "unavailable", "replication"},
		{fmt.Errorf("%w: %w", tributary.ErrAfterAppend, fmt.Errorf("x: %w", tributary.ErrNotReplicated)), "unavailable", "replication"},
		{fmt.Errorf("x: %w", tributary.ErrFenced), "unavailable", "fenced"},
		{ErrUnknownStream, "not_found", ""},
	} {
		sink.err = tc.err
		got, err := call(t, c, []*pb.ProduceRequest{{Stream: "a.b", Records: []*pb.ProduceRecord{{Value: []byte("1")}, {Value: []byte("2")}}, Id: 7}})
		if err != nil || len(got) != 1 || got[0].Id != 7 || len(got[0].Results) != 2 || got[0].Results[1].Error == nil ||
			got[0].Results[1].Error.Code != tc.code || got[0].Results[1].Error.Reason != tc.reason {
			t.Errorf("%v: %v %v", tc.err, got, err)
		}
	}
	sink.err = nil
	var reqs []*pb.ProduceRequest
	for i := range 30 {
		req := &pb.ProduceRequest{Id: uint64(i)}
		if i == 0 {
			req.Stream = "a.b"
		}
		for j := range 100 {
			req.Records = append(req.Records, &pb.ProduceRecord{Value: []byte(fmt.Sprint(i*100 + j))})
		}
		reqs = append(reqs, req)
	}
	reqs = append(reqs, &pb.ProduceRequest{Id: 99}) // no records: refused whole
	got, err := call(t, c, reqs)
	if err != nil || len(got) != 31 {
		t.Fatalf("31 requests: %d answers, %v", len(got), err)
	}
	for i, r := range got[:30] {
		if r.Error != nil || r.Id != uint64(i) || len(r.Results) != 100 {
			t.Fatalf("answer %d: %v", i, r)
		}
		for j, res := range r.Results {
			if n := i*100 + j; res.Error != nil || res.Offset != int64(n) || string(sink.recs[n].Value) != fmt.Sprint(n) {
				t.Fatalf("answer %d result %d: %v", i, j, res)
			}
		}
	}
	if e := got[30].Error; got[30].Id != 99 || e == nil || e.Code != "invalid_argument" || len(got[30].Results) != 0 {
		t.Fatalf("empty request: %v", got[30])
	}
}

func openAuthority(t *testing.T) *auth.Authority {
	a, err := auth.Open(auth.Config{}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestProduceAuth: a call without credentials ends Unauthenticated, a
// principal without produce on the stream gets PERMISSION_DENIED answers
// (nothing appended), an allowed one's records carry its name.
func TestProduceAuth(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users")
	for _, u := range []string{"alice", "bob"} {
		if err := auth.SetPassword(users, u, []byte(u+"-pw")); err != nil {
			t.Fatal(err)
		}
	}
	no := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &no, UsersFile: users, ACL: []auth.Rule{
		{Principal: "alice", Allow: []auth.Action{auth.Produce}, Streams: []string{"a.*"}}}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	sink := &fakeSink{}
	c := client(server(t, sink, a))
	req := []*pb.ProduceRequest{{Stream: "a.b", Records: []*pb.ProduceRecord{{Value: []byte("x")}}}}
	if _, err := call(t, c, req); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("anonymous: %v", err)
	}
	basic := func(u string) string {
		r, _ := http.NewRequest("GET", "/", nil)
		r.SetBasicAuth(u, u+"-pw")
		return r.Header.Get("Authorization")
	}
	got, err := call(t, c, req, "Authorization", basic("bob"))
	if err != nil || len(got) != 1 || len(got[0].Results) != 1 || got[0].Results[0].Error == nil || got[0].Results[0].Error.Code != "permission_denied" {
		t.Fatalf("bob: %v %v", got, err)
	}
	got, err = call(t, c, req, "Authorization", basic("alice"))
	if err != nil || len(got) != 1 || len(got[0].Results) != 1 || got[0].Results[0].Error != nil {
		t.Fatalf("alice: %v %v", got, err)
	}
	if len(sink.recs) != 1 || sink.recs[0].Principal != "alice" || sink.recs[0].Source != "grpc" {
		t.Fatalf("appended %+v", sink.recs)
	}
}
