package rest

// Who a request is, and what it may do.
//
// Every request but the OAuth2 token endpoint is identified before it is
// routed (ServeHTTP):
//
//   - Bearer Options.NodeToken: an edge node — every right, and the only
//     static identity that may write properties under ReservedPrefix.
//   - Bearer Options.Token: the operator's static token — every right but
//     the reserved properties.
//   - Without an Authority, or with an open one (nothing to
//     authenticate with), nothing else: Token, when set, is required.
//   - With one, any other bearer token must be a JWT the Authority verifies
//     (its own tokens from POST /v1/oauth/tokens included, valid only
//     while their user exists with the same password); a request
//     without one is anonymous when the Authority allows it and no static
//     Token is configured. Otherwise 401 NotAuthorizedException with
//     WWW-Authenticate: Bearer.
//
// Then each route asks the Authority (auth.Request, protocol "rest"), with
// Stream = the table's namespace levels and name joined by "." (a stream's
// namespace.stream) and Namespace = the namespace's levels joined by ".":
//
//   - reads (load a namespace or table, HEAD, list) need Consume or Write
//     on it; listings leave out what the principal may not read; GET
//     /v1/config needs only an identity;
//   - creating and committing to a table need Write on the table (an edge
//     node's rule lists its own streams); dropping it (purge or not) and
//     renaming it need Admin (on both names for a rename, whose
//     destination must pass the naming rule);
//   - creating a namespace needs Write on it (edge nodes create their
//     streams' namespaces) or Admin; dropping it or changing its
//     properties needs Admin;
//   - a denial is 403 ForbiddenException (audited by the Authority).
//
// Properties under ReservedPrefix (guard.go) may be written by NodeToken
// requests and, when the Authority is not open, by authenticated
// principals with Admin on that table, or with Write on it for the nodes'
// own (marks, owners, epochs, partition allocation, the maintenance
// lease: nodeProperty) — never by principals that may only read it, nor
// by anonymous clients.

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/auth"
)

// TokenPath is the OAuth2 client-credentials token endpoint (the Iceberg
// REST spec's /v1/oauth/tokens, which iceberg-go, PyIceberg and Spark call
// with credential=client_id:client_secret).
const TokenPath = "/v1/oauth/tokens"

// caller is the identity of a request.
type caller struct {
	node bool // bears Options.NodeToken
	full bool // every right (Token, NodeToken, or no Authority)
	p    auth.Principal
	c    auth.Client
}

const callerKey ctxKey = 1

func callerOf(ctx context.Context) *caller {
	if c, ok := ctx.Value(callerKey).(*caller); ok {
		return c
	}
	return &caller{full: true}
}

// identify tells who r is; nil when it must be refused with 401.
func (h *handler) identify(r *http.Request, node bool) *caller {
	tok := bearer(r)
	cl := auth.Client{Protocol: "rest", Remote: h.remote(r)}
	a := h.opts.Auth
	switch {
	case node:
		return &caller{node: true, full: true, c: cl}
	case tokenIs(tok, h.opts.Token):
		return &caller{full: true, c: cl}
	case a == nil || a.Open():
		// Nothing to authenticate with (an open Authority allows
		// everything): bearer tokens are not looked at, as before.
		if h.opts.Token != "" {
			return nil
		}
		return &caller{full: true, c: cl}
	case tok != "":
		p, err := a.Token(cl, tok)
		if err != nil {
			return nil
		}
		return &caller{p: p, c: cl}
	case h.opts.Token != "":
		return nil // a configured static token is required of clients without one
	}
	p, err := a.Anonymous(cl)
	if err != nil {
		return nil
	}
	return &caller{p: p, c: cl}
}

func streamOf(id table.Identifier) string { return strings.Join(id, ".") }

// authorize decides action on a namespace or a table (stream) for the
// request's caller: nil, or a 403.
func (h *handler) authorize(ctx context.Context, action auth.Action, ns table.Identifier, id table.Identifier) error {
	c := callerOf(ctx)
	if c.full {
		return nil
	}
	req := auth.Request{Client: c.c, Principal: c.p, Action: action}
	what := ""
	if id != nil {
		req.Stream, what = streamOf(id), "table "+streamOf(id)
	} else {
		req.Namespace, what = strings.Join(ns, "."), "namespace "+strings.Join(ns, ".")
	}
	a := h.opts.Auth
	if action == auth.Consume {
		w := req
		w.Action = auth.Write
		if a.Allowed(req) || a.Allowed(w) {
			return nil
		}
	}
	if err := a.Authorize(req); err != nil {
		return forbidden("%s may not %s %s", c.p.String(), action, what)
	}
	return nil
}

// mayRead tells, without an audit line, whether the caller may read the
// namespace ns (id nil) or the table id, for listings.
func (h *handler) mayRead(ctx context.Context, ns, id table.Identifier) bool {
	c := callerOf(ctx)
	if c.full {
		return true
	}
	req := auth.Request{Client: c.c, Principal: c.p, Action: auth.Consume}
	if id != nil {
		req.Stream = streamOf(id)
	} else {
		req.Namespace = strings.Join(ns, ".")
	}
	w := req
	w.Action = auth.Write
	return h.opts.Auth.Allowed(req) || h.opts.Auth.Allowed(w)
}

// What reserved properties of a table a caller may write.
const (
	reservedNone = iota // none
	reservedNode        // the edge nodes' own (nodeProperty)
	reservedAll         // every one
)

// mayWriteReserved tells which properties under ReservedPrefix of table
// id the caller may write (see the comment at the top).
func (h *handler) mayWriteReserved(ctx context.Context, id table.Identifier) int {
	c := callerOf(ctx)
	a := h.opts.Auth
	switch {
	case c.node:
		return reservedAll
	case c.full, a == nil, a.Open(), c.p.Anonymous():
		return reservedNone
	}
	req := auth.Request{Client: c.c, Principal: c.p, Action: auth.Admin, Stream: streamOf(id)}
	if a.Allowed(req) {
		return reservedAll
	}
	if req.Action = auth.Write; a.Allowed(req) {
		return reservedNode
	}
	return reservedNone
}

// ---- the OAuth2 token endpoint ----

// oauthError is RFC 6749's error response (section 5.2).
func oauthError(w http.ResponseWriter, status int, code, desc string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="iceberg"`)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, map[string]string{"error": code, "error_description": desc})
}

// Grant types the token endpoint takes.
const (
	grantClientCredentials = "client_credentials"
	grantTokenExchange     = "urn:ietf:params:oauth:grant-type:token-exchange"
	accessTokenType        = "urn:ietf:params:oauth:token-type:access_token"
)

// issueToken serves POST /v1/oauth/tokens: grant_type client_credentials
// with client_id and client_secret as form fields or HTTP Basic (a user
// and password of the users file: a JWT as the secret is refused), or a
// token exchange (the Java client's refresh) of a token this endpoint
// issued, while its user exists with the same password, for a fresh one
// of the same principal that expires no later than it (Authority.
// ExchangeToken). It answers {access_token, token_type: bearer,
// expires_in, issued_token_type}, and no scope: a token carries its
// principal's ACL rights whatever scope was asked for, so none is
// granted by name (RFC 6749 5.1). Errors per RFC 6749: 400
// invalid_request / unsupported_grant_type / invalid_grant, 401
// invalid_client.
func (h *handler) issueToken(w http.ResponseWriter, r *http.Request) {
	a := h.opts.Auth
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		oauthError(w, http.StatusBadRequest, "invalid_request", "malformed form body: "+err.Error())
		return
	}
	cl := auth.Client{Protocol: "rest", Remote: h.remote(r)}
	var p auth.Principal
	var notAfter time.Time
	switch grant := r.PostForm.Get("grant_type"); grant {
	case "":
		oauthError(w, http.StatusBadRequest, "invalid_request", "grant_type is required")
		return
	case grantClientCredentials:
		id, secret, basic := r.BasicAuth()
		if basic {
			// RFC 6749 2.3.1: form-encoded before Basic encoding.
			if u, err := url.QueryUnescape(id); err == nil {
				id = u
			}
			if s, err := url.QueryUnescape(secret); err == nil {
				secret = s
			}
		} else {
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		if id == "" || secret == "" {
			a.Failed(cl, id, "no_client_credentials")
			oauthError(w, http.StatusUnauthorized, "invalid_client", "client_id and client_secret are required")
			return
		}
		var err error
		if p, err = a.Password(cl, id, []byte(secret)); err != nil || p.Method != auth.MethodPassword {
			// A JWT as the secret would be an exchange without its checks.
			oauthError(w, http.StatusUnauthorized, "invalid_client", "client authentication failed")
			return
		}
	case grantTokenExchange:
		var err error
		if p, notAfter, err = a.ExchangeToken(cl, r.PostForm.Get("subject_token")); err != nil {
			oauthError(w, http.StatusBadRequest, "invalid_grant", "subject_token is not a valid token issued here")
			return
		}
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "grant_type "+strconv.Quote(grant)+" is not supported (client_credentials)")
		return
	}
	tok, exp, err := a.IssueToken(p, 0, notAfter)
	if err != nil {
		h.log.Error("iceberg rest: issue token", "err", err)
		oauthError(w, http.StatusInternalServerError, "server_error", "could not issue a token")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	resp := map[string]any{"access_token": tok, "token_type": "bearer", "issued_token_type": accessTokenType,
		"expires_in": max(int64(time.Until(exp).Seconds()), 1)}
	writeJSON(w, http.StatusOK, resp)
}
