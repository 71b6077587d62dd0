package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
	"github.com/tributary-io/tributary/internal/tabletest"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/subscription"
	"github.com/tributary-io/tributary/tables"
)

// TestFetchTokenExpiry: a following Fetch, and a Subscribe, authenticated
// with a token end when the token expires, Unauthenticated naming the
// expiry, after the records committed before it.
func TestFetchTokenExpiry(t *testing.T) {
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
	secret := []byte("a grpc read test secret of enough length")
	secretFile := filepath.Join(dir, "jwt.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	off := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &off, JWT: auth.JWTConfig{SecretFile: secretFile},
		ACL: []auth.Rule{{Principal: "reader", Allow: []auth.Action{auth.Consume}}}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	store, err := subscription.OpenCursorStore("sqlite://" + filepath.Join(dir, "cursors.db"))
	if err != nil {
		t.Fatal(err)
	}
	subs := subscription.NewManager(store, quiet())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		subs.Close(ctx)
		if c, ok := store.(interface{ Close() error }); ok {
			c.Close()
		}
	})
	mux := http.NewServeMux()
	NewReader(ReaderConfig{Auth: a, Logger: quiet(), Subscriptions: subs}, tables.NewReader(cat, tables.ReaderConfig{})).Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	cl := pbconnect.NewReadServiceClient(&http.Client{Transport: tr}, srv.URL, connect.WithGRPC())

	cctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	req := connect.NewRequest(&pb.FetchRequest{Stream: "factory.t", Offset: -1, Follow: true})
	req.Header().Set("Authorization", "Bearer "+testkit.HS256Token(t, secret, "reader", 2*time.Second))
	st, err := cl.Fetch(cctx, req)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for st.Receive() {
		n += len(st.Msg().Records)
	}
	err = st.Err()
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "token expired") || errors.Is(cctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("a following Fetch past its token's expiry ended with %v (code %v), want Unauthenticated naming the expiry", err, connect.CodeOf(err))
	}
	if n != 3 {
		t.Fatalf("%d records before the expiry, want 3", n)
	}

	// Subscribe: the same for a bidirectional stream.
	sctx, scancel := context.WithTimeout(ctx, 25*time.Second)
	defer scancel()
	bidi := cl.Subscribe(sctx)
	bidi.RequestHeader().Set("Authorization", "Bearer "+testkit.HS256Token(t, secret, "reader", 2*time.Second))
	if err := bidi.Send(&pb.SubscribeRequest{Stream: "factory.t", Subscription: "s1", InitialPosition: pb.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	n = 0
	for {
		resp, err := bidi.Receive()
		if err != nil {
			if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "token expired") || sctx.Err() != nil {
				t.Fatalf("a Subscribe past its token's expiry ended with %v (code %v), want Unauthenticated naming the expiry", err, connect.CodeOf(err))
			}
			break
		}
		n += len(resp.Records)
	}
	if n != 3 {
		t.Fatalf("Subscribe: %d records before the expiry, want 3", n)
	}
}
