package rest_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/golang-jwt/jwt/v5"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/internal/testkit"
	"github.com/tributary-io/tributary/tables/rest"
)

// authEnv is a catalog with an Authority: users reader (Consume on f.*),
// edge (Write on f.*) and ops (Admin), all with password "pw-"+name.
func authEnv(t *testing.T) *env {
	t.Helper()
	users := filepath.Join(t.TempDir(), "passwd")
	for _, u := range []string{"reader", "edge", "ops", "nobody"} {
		if err := auth.SetPassword(users, u, []byte("pw-"+u)); err != nil {
			t.Fatal(err)
		}
	}
	no := false
	a, err := auth.Open(auth.Config{AllowAnonymous: &no, UsersFile: users, ACL: []auth.Rule{
		{Principal: "reader", Allow: []auth.Action{auth.Consume}, Streams: []string{"f.*"}},
		{Principal: "edge", Allow: []auth.Action{auth.Write}, Streams: []string{"f.*"}},
		{Principal: "ops", Allow: []auth.Action{auth.Admin}},
	}}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, 1, rest.Options{Auth: a})
}

func TestRESTAuthTokenEndpoint(t *testing.T) {
	e := authEnv(t)
	u := e.servers[0].URL() + rest.TokenPath
	form := func(v url.Values) string { return v.Encode() }
	ct := "Content-Type"
	fe := "application/x-www-form-urlencoded"
	oauthErr := func(what string, r rawResp, status int, code string) {
		t.Helper()
		var b struct{ Error, ErrorDescription string }
		json.Unmarshal(r.body, &b)
		if r.status != status || b.Error != code {
			t.Fatalf("%s: %d %s, want %d %s", what, r.status, r.body, status, code)
		}
	}
	oauthErr("no grant type", do(t, "POST", u, form(url.Values{"client_id": {"reader"}}), ct, fe), 400, "invalid_request")
	oauthErr("other grant", do(t, "POST", u, form(url.Values{"grant_type": {"password"}}), ct, fe), 400, "unsupported_grant_type")
	oauthErr("no secret", do(t, "POST", u, form(url.Values{"grant_type": {"client_credentials"}, "client_id": {"reader"}}), ct, fe), 401, "invalid_client")
	oauthErr("wrong secret", do(t, "POST", u, form(url.Values{"grant_type": {"client_credentials"}, "client_id": {"reader"},
		"client_secret": {"nope"}}), ct, fe), 401, "invalid_client")
	r := do(t, "POST", u, form(url.Values{"grant_type": {"client_credentials"}, "client_id": {"reader"},
		"client_secret": {"pw-reader"}, "scope": {"catalog"}}), ct, fe)
	var tok struct {
		AccessToken     string `json:"access_token"`
		TokenType       string `json:"token_type"`
		ExpiresIn       int64  `json:"expires_in"`
		IssuedTokenType string `json:"issued_token_type"`
	}
	if err := json.Unmarshal(r.body, &tok); r.status != 200 || err != nil || tok.AccessToken == "" || tok.TokenType != "bearer" ||
		tok.ExpiresIn < 3500 || tok.IssuedTokenType != "urn:ietf:params:oauth:token-type:access_token" {
		t.Fatalf("token: %d %s", r.status, r.body)
	}
	// HTTP Basic client authentication works too.
	r = do(t, "POST", u, form(url.Values{"grant_type": {"client_credentials"}}), ct, fe,
		"Authorization", "Basic cmVhZGVyOnB3LXJlYWRlcg==") // reader:pw-reader
	if r.status != 200 {
		t.Fatalf("basic: %d %s", r.status, r.body)
	}
	// A token exchange gives a fresh token of the same principal; a bad
	// subject token is invalid_grant.
	ex := do(t, "POST", u, form(url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token": {tok.AccessToken}, "subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"}}), ct, fe)
	if ex.status != 200 || !strings.Contains(string(ex.body), "access_token") {
		t.Fatalf("token exchange: %d %s", ex.status, ex.body)
	}
	oauthErr("exchange of a bad token", do(t, "POST", u, form(url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token": {"nope"}}), ct, fe), 400, "invalid_grant")
	// The token reads; no token and a bad one are 401 with the challenge.
	v1 := e.servers[0].URL() + "/v1"
	do(t, "POST", v1+"/namespaces", `{"namespace":["f"]}`, "Authorization", "Bearer "+issue(t, e, "ops"))
	if r := do(t, "GET", v1+"/namespaces", "", "Authorization", "Bearer "+tok.AccessToken); r.status != 200 || !strings.Contains(string(r.body), `"f"`) {
		t.Fatalf("list with the reader's token: %d %s", r.status, r.body)
	}
	checkError(t, "no token", do(t, "GET", v1+"/namespaces", ""), 401, "NotAuthorizedException")
	checkError(t, "bad token", do(t, "GET", v1+"/namespaces", "", "Authorization", "Bearer "+tok.AccessToken+"x"), 401, "NotAuthorizedException")
	checkError(t, "reader creates a namespace", do(t, "POST", v1+"/namespaces", `{"namespace":["f2"]}`,
		"Authorization", "Bearer "+tok.AccessToken), 403, "ForbiddenException")
	checkError(t, "reader drops a namespace", do(t, "DELETE", v1+"/namespaces/f", "",
		"Authorization", "Bearer "+tok.AccessToken), 403, "ForbiddenException")
}

// issue gets a token for user from the token endpoint.
func issue(t *testing.T, e *env, user string) string {
	t.Helper()
	r := do(t, "POST", e.servers[0].URL()+rest.TokenPath, url.Values{"grant_type": {"client_credentials"},
		"client_id": {user}, "client_secret": {"pw-" + user}}.Encode(), "Content-Type", "application/x-www-form-urlencoded")
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(r.body, &tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("token for %s: %d %s", user, r.status, r.body)
	}
	return tok.AccessToken
}

// TestRESTAuthRights: iceberg-go's REST client with OAuth2 client
// credentials; an edge node with Write commits its marks, a reader reads
// but cannot commit or write the nodes' properties, a principal without
// rights sees nothing.
func TestRESTAuthRights(t *testing.T) {
	ctx := context.Background()
	e := authEnv(t)
	edge := e.client(t, 0, map[string]string{"token": "", "credential": "edge:pw-edge"})
	const stream = "f.s"
	seedStream(t, edge, stream) // allocating writes the nodes' reserved properties
	open := func(cred string) catalog.Catalog {
		c, err := restcat.NewCatalog(ctx, "tributary", e.servers[0].URL(), restcat.WithCredential(cred),
			restcat.WithWarehouseLocation(e.warehouse))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	reader := open("reader:pw-reader")
	id := table.Identifier{"f", "s"}
	tb, err := reader.LoadTable(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tid, err := range reader.ListTables(ctx, table.Identifier{"f"}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.Join(tid, "."))
	}
	if len(names) != 1 || names[0] != stream {
		t.Fatalf("reader lists %v", names)
	}
	tx := tb.NewTransaction()
	if err := tx.SetProperties(map[string]string{"owner": "reader"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx); err == nil || !strings.Contains(err.Error(), "may not write") {
		t.Fatalf("reader's commit: %v, want 403", err)
	}
	nobody := open("nobody:pw-nobody")
	if _, err := nobody.LoadTable(ctx, id); err == nil {
		t.Fatal("a principal without rights loaded the table")
	}
	nss, err := nobody.ListNamespaces(ctx, nil)
	if err != nil || len(nss) != 0 {
		t.Fatalf("namespaces seen without rights: %v %v", nss, err)
	}
	if _, err := restcat.NewCatalog(ctx, "tributary", e.servers[0].URL(), restcat.WithCredential("reader:wrong")); err == nil {
		t.Fatal("wrong secret: catalog opened")
	}
}

// TestRESTAuthOpen: with an open Authority (nothing to authenticate with)
// bearer tokens are not looked at, as before the Authority, and only the
// node token writes the reserved properties.
func TestRESTAuthOpen(t *testing.T) {
	a, err := auth.Open(auth.Config{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1, rest.Options{Auth: a})
	if r := do(t, "GET", e.servers[0].URL()+"/v1/namespaces", "", "Authorization", "Bearer whatever"); r.status != 200 {
		t.Fatalf("any bearer token: %d %s", r.status, r.body)
	}
	c := e.client(t, 0, map[string]string{"token": "whatever"})
	if _, err := c.AllocatePartition(context.Background(), "a.b", "n1"); err == nil || !strings.Contains(err.Error(), "edge nodes only") {
		t.Fatalf("reserved properties without the node token: %v", err)
	}
}

// TestRESTAuthTokenRevocation: the token endpoint issues tokens only to
// users of the password file, exchanges only its own tokens, never for a
// lifetime beyond the subject token's, returns no scope it does not
// enforce; deleting the user revokes its tokens, for requests and for
// exchanges.
func TestRESTAuthTokenRevocation(t *testing.T) {
	dir := t.TempDir()
	users, secretFile := filepath.Join(dir, "passwd"), filepath.Join(dir, "jwt.secret")
	secret := []byte(strings.Repeat("r", 40))
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"reader", "other"} {
		if err := auth.SetPassword(users, u, []byte("pw-"+u)); err != nil {
			t.Fatal(err)
		}
	}
	no := false
	open := func(ttl time.Duration) *env {
		a, err := auth.Open(auth.Config{AllowAnonymous: &no, UsersFile: users, TokenTTL: ttl, JWT: auth.JWTConfig{SecretFile: secretFile},
			ACL: []auth.Rule{{Principal: "*", Allow: []auth.Action{auth.Consume}, Streams: []string{"f.*"}}}}, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		return newEnv(t, 1, rest.Options{Auth: a})
	}
	e, short := open(time.Hour), open(2*time.Minute) // two replicas sharing the secret
	type tokenResp struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	post := func(e *env, v url.Values, hdr ...string) (rawResp, tokenResp) {
		t.Helper()
		r := do(t, "POST", e.servers[0].URL()+rest.TokenPath, append([]string{v.Encode(), "Content-Type", "application/x-www-form-urlencoded"}, hdr...)...)
		var tr tokenResp
		json.Unmarshal(r.body, &tr)
		return r, tr
	}
	exchange := func(e *env, tok string) (rawResp, tokenResp) {
		return post(e, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "subject_token": {tok},
			"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"}})
	}
	list := func(tok string) int {
		return do(t, "GET", e.servers[0].URL()+"/v1/namespaces", "", "Authorization", "Bearer "+tok).status
	}

	r, tok := post(e, url.Values{"grant_type": {"client_credentials"}, "client_id": {"reader"}, "client_secret": {"pw-reader"},
		"scope": {"catalog PRINCIPAL_ROLE:ALL"}})
	if r.status != 200 || tok.AccessToken == "" || strings.Contains(string(r.body), "scope") {
		t.Fatalf("client credentials: %d %s (want a token and no scope echoed)", r.status, r.body)
	}
	if s := list(tok.AccessToken); s != 200 {
		t.Fatalf("the reader's token: %d", s)
	}

	// An exchange never outlives its subject token.
	_, sub := post(short, url.Values{"grant_type": {"client_credentials"}, "client_id": {"reader"}, "client_secret": {"pw-reader"}})
	if r, ex := exchange(e, sub.AccessToken); r.status != 200 || ex.ExpiresIn > 120 {
		t.Fatalf("exchange of a 2-minute token: %d %s (want expires_in <= 120)", r.status, r.body)
	}

	// A JWT the Authority accepts but did not issue is not exchanged, nor
	// taken as a client secret.
	foreign := testkit.HS256Token(t, secret, "reader", time.Hour)
	if s := list(foreign); s != 200 {
		t.Fatalf("the foreign token as a bearer: %d", s)
	}
	if r, _ := exchange(e, foreign); r.status != 400 || !strings.Contains(string(r.body), "invalid_grant") {
		t.Fatalf("exchange of a foreign token: %d %s", r.status, r.body)
	}
	if r, _ := post(e, url.Values{"grant_type": {"client_credentials"}, "client_id": {"reader"}, "client_secret": {foreign}}); r.status != 401 {
		t.Fatalf("a JWT as the client secret: %d %s", r.status, r.body)
	}

	// Deleting the user revokes its tokens (the file is re-read within
	// seconds); the other user's stay valid.
	_, other := post(e, url.Values{"grant_type": {"client_credentials"}, "client_id": {"other"}, "client_secret": {"pw-other"}})
	if err := auth.DeletePassword(users, "reader"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the deleted user's token refused", func() bool { return list(tok.AccessToken) == 401 })
	if r, _ := exchange(e, tok.AccessToken); r.status != 400 {
		t.Fatalf("exchange of a deleted user's token: %d %s", r.status, r.body)
	}
	if s := list(other.AccessToken); s != 200 {
		t.Fatalf("another user's token after the deletion: %d", s)
	}
}

// TestRESTAuthTokenWithoutExp: a JWT without exp is refused unless
// security.jwt.allow_without_exp says otherwise.
func TestRESTAuthTokenWithoutExp(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "jwt.secret")
	secret := []byte(strings.Repeat("x", 40))
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	forever, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "svc", "iat": time.Now().Unix()}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	expiring := testkit.HS256Token(t, secret, "svc", time.Hour)
	for _, allow := range []bool{false, true} {
		no := false
		a, err := auth.Open(auth.Config{AllowAnonymous: &no, JWT: auth.JWTConfig{SecretFile: secretFile, AllowWithoutExp: allow},
			ACL: []auth.Rule{{Principal: "svc", Allow: []auth.Action{auth.Consume}}}}, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, 1, rest.Options{Auth: a})
		get := func(tok string) int {
			return do(t, "GET", e.servers[0].URL()+"/v1/namespaces", "", "Authorization", "Bearer "+tok).status
		}
		if s := get(expiring); s != 200 {
			t.Fatalf("allow_without_exp %v: a token with exp: %d", allow, s)
		}
		if s, want := get(forever), map[bool]int{false: 401, true: 200}[allow]; s != want {
			t.Fatalf("allow_without_exp %v: a token without exp: %d, want %d", allow, s, want)
		}
	}
}

// TestWriteIsNotDelete (issue 35, finding 11): the right an edge node
// needs to commit (Write on its streams) neither drops, purges nor renames
// a table, nor sets the maintenance policy; an admin does, and a rename
// destination must pass the naming rule.
func TestWriteIsNotDelete(t *testing.T) {
	e := authEnv(t)
	edgeCat := e.client(t, 0, map[string]string{"token": "", "credential": "edge:pw-edge"})
	seedStream(t, edgeCat, "f.s") // a node's commit writes its marks, owners and epochs
	v1 := e.servers[0].URL() + "/v1"
	edge, ops := "Bearer "+issue(t, e, "edge"), "Bearer "+issue(t, e, "ops")
	rename := func(to, bearer string) rawResp {
		return do(t, "POST", v1+"/tables/rename", `{"source":{"namespace":["f"],"name":"s"},"destination":{"namespace":["f"],"name":"`+to+`"}}`,
			"Authorization", bearer, "Content-Type", "application/json")
	}
	checkError(t, "edge node drops", do(t, "DELETE", v1+"/namespaces/f/tables/s", "", "Authorization", edge), 403, "ForbiddenException")
	checkError(t, "edge node purges", do(t, "DELETE", v1+"/namespaces/f/tables/s?purgeRequested=true", "", "Authorization", edge), 403, "ForbiddenException")
	checkError(t, "edge node renames", rename("t", edge), 403, "ForbiddenException")
	checkError(t, "edge node sets the orphan grace", do(t, "POST", v1+"/namespaces/f/tables/s",
		`{"requirements":[],"updates":[{"action":"set-properties","updates":{"tributary.maintain.orphan-grace-ms":"99999999"}}]}`,
		"Authorization", edge, "Content-Type", "application/json"), 403, "ForbiddenException")
	checkError(t, "rename to a dotted name", rename("a.b", ops), 400, "BadRequestException")
	if r := do(t, "POST", v1+"/namespaces/f/tables/s",
		`{"requirements":[],"updates":[{"action":"set-properties","updates":{"tributary.maintain.orphan-grace-ms":"99999999"}}]}`,
		"Authorization", ops, "Content-Type", "application/json"); r.status != 200 {
		t.Fatalf("admin sets the orphan grace: %d %s", r.status, r.body)
	}
	if r := rename("t", ops); r.status != 204 {
		t.Fatalf("admin renames: %d %s", r.status, r.body)
	}
	if r := do(t, "DELETE", v1+"/namespaces/f/tables/t", "", "Authorization", ops); r.status != 204 {
		t.Fatalf("admin drops: %d %s", r.status, r.body)
	}
}
