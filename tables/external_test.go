package tables

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var testKeys = CheckKeys{URI: "catalog.uri", Token: "catalog.token", Credential: "catalog.credential",
	SigV4: "catalog.sigv4", Warehouse: "catalog.warehouse"}

// TestCheckRESTNamesTheKey: each way a REST catalog can fail the check
// comes back naming the config key to fix (e2e's TestSeaweedFSBadInput
// does the same against a real catalog).
func TestCheckRESTNamesTheKey(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	// A catalog that refuses every credential and token, whose config
	// route answers without auth (as SeaweedFS's does).
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/oauth/tokens":
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"invalid_client","error_description":"bad secret"}`))
		case "/v1/config":
			w.Write([]byte(`{"defaults":{},"overrides":{}}`))
		case "/v1/namespaces":
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"message":"Bearer token is invalid or expired","type":"NotAuthorizedException","code":401}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":{"message":"no such bucket","type":"NoSuchNamespaceException","code":404}}`))
		}
	}))
	defer refusing.Close()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"unreachable", Config{URI: closed, Warehouse: "s3://b"}, "catalog.uri: cannot reach"},
		// The token endpoint of a catalog that is down fails inside
		// iceberg-go's oauth error: still the URI, not the credential.
		{"unreachable with a credential", Config{URI: closed, Warehouse: "s3://b", Properties: map[string]string{"credential": "id:secret"}}, "catalog.uri: cannot reach"},
		{"credential", Config{URI: refusing.URL, Warehouse: "s3://b", Properties: map[string]string{"credential": "id:wrong"}}, "catalog.credential:"},
		{"token", Config{URI: refusing.URL, Warehouse: "s3://b", Properties: map[string]string{"token": "expired"}}, "catalog.token:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := CheckREST(ctx, tc.cfg, testKeys)
			if err == nil {
				c.Close()
				t.Fatal("the check passed")
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to start with %q", err, tc.want)
			}
		})
	}
}
