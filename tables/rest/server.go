package rest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/lease"
)

// Options configure a catalog handler.
type Options struct {
	// Warehouse is the warehouse location reported by GET /v1/config (as
	// the "warehouse" default) and used for the location of stage-created
	// tables. It should be the backing catalog's warehouse.
	Warehouse string
	// Token, when set, is a static bearer token with every right but the
	// reserved properties (iceberg-go clients: the "token" property). It is
	// required of clients without another valid token (NodeToken, or a JWT
	// when Auth is set), even when Auth admits anonymous clients.
	Token string
	// NodeToken is the bearer token of edge nodes committing through this
	// catalog: every right, the reserved properties under ReservedPrefix
	// included (see guard.go), and no rate limit. Empty: only principals
	// with Write on a table (with Auth) may write them.
	NodeToken string
	// Auth authenticates bearer tokens (JWTs, and the ones the OAuth2
	// token endpoint POST /v1/oauth/tokens issues, which it enables) and
	// decides every request (see auth.go); nil, or an open Authority =
	// only Token/NodeToken apply.
	Auth *auth.Authority
	// Defaults and Overrides are added to GET /v1/config's answer.
	Defaults, Overrides map[string]string
	// Logger gets one line per failed request (server errors at error
	// level, client errors at debug level). Nil: slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body; 0 means 32 MiB.
	MaxBodyBytes int64
	// RatePerIP and BurstPerIP limit the requests of one remote address
	// (token bucket; beyond it 429 with Retry-After), the address being
	// Auth.ClientAddr's (X-Forwarded-For only from trusted proxies).
	// Requests bearing the NodeToken are not limited. RateLimited extends
	// the limit over the other routes of the catalog's listener. 0 =
	// 200/s with a burst of 400; < 0 = off.
	RatePerIP  float64
	BurstPerIP int
}

// NamespaceSeparator joins the levels of a multi-level namespace in a path
// segment or the parent query parameter (URL-encoded as %1F).
const NamespaceSeparator = "\x1f"

type handler struct {
	cat   catalog.Catalog
	opts  Options
	log   *slog.Logger
	mux   *http.ServeMux
	rates *rateLimits

	locksMu sync.Mutex
	locks   map[string]*tableLock
}

type tableLock struct {
	mu   sync.Mutex
	refs int
}

// NewHandler serves the Iceberg REST catalog protocol backed by cat.
func NewHandler(cat catalog.Catalog, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.RatePerIP == 0 {
		opts.RatePerIP = 200
	}
	if opts.BurstPerIP <= 0 {
		opts.BurstPerIP = 2 * int(max(opts.RatePerIP, 1))
	}
	h := &handler{cat: cat, opts: opts, log: opts.Logger, mux: http.NewServeMux(), locks: map[string]*tableLock{},
		rates: newRateLimits(opts.RatePerIP, opts.BurstPerIP)}
	for _, r := range h.routes() {
		h.mux.HandleFunc(r.pattern, r.fn)
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, "NotFoundException", "no route for "+r.Method+" "+r.URL.Path)
	})
	return h
}

type route struct {
	pattern string
	fn      http.HandlerFunc
	// advertised is the endpoint string of GET /v1/config ("" = not listed).
	advertised string
}

const (
	pNamespaces = "/v1/namespaces"
	pNamespace  = "/v1/namespaces/{namespace}"
	pTables     = "/v1/namespaces/{namespace}/tables"
	pTable      = "/v1/namespaces/{namespace}/tables/{table}"
)

func (h *handler) routes() []route {
	rs := []route{
		{"GET /v1/config", h.getConfig, ""},
		{"GET " + pNamespaces, h.listNamespaces, "GET /v1/{prefix}/namespaces"},
		{"POST " + pNamespaces, h.createNamespace, "POST /v1/{prefix}/namespaces"},
		{"GET " + pNamespace, h.loadNamespace, "GET /v1/{prefix}/namespaces/{namespace}"},
		{"HEAD " + pNamespace, h.namespaceExists, "HEAD /v1/{prefix}/namespaces/{namespace}"},
		{"DELETE " + pNamespace, h.dropNamespace, "DELETE /v1/{prefix}/namespaces/{namespace}"},
		{"POST " + pNamespace + "/properties", h.updateNamespace, "POST /v1/{prefix}/namespaces/{namespace}/properties"},
		{"GET " + pTables, h.listTables, "GET /v1/{prefix}/namespaces/{namespace}/tables"},
		{"POST " + pTables, h.createTable, "POST /v1/{prefix}/namespaces/{namespace}/tables"},
		{"GET " + pTable, h.loadTable, "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}"},
		{"HEAD " + pTable, h.tableExists, "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}"},
		{"POST " + pTable, h.commitTable, "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}"},
		{"DELETE " + pTable, h.dropTable, "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}"},
		{"POST /v1/tables/rename", h.renameTable, "POST /v1/{prefix}/tables/rename"},
		{"POST /v1/transactions/commit", h.commitTransaction, "POST /v1/{prefix}/transactions/commit"},
	}
	return rs
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error("iceberg rest: panic", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeError(w, r, http.StatusInternalServerError, "InternalServerError", fmt.Sprint("internal error: ", v))
		}
	}()
	node := tokenIs(bearer(r), h.opts.NodeToken)
	if r.Context().Value(limitedKey) == nil && !h.limit(w, r, node) {
		return
	}
	if r.URL.Path == TokenPath && h.opts.Auth != nil {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, r, http.StatusMethodNotAllowed, "BadRequestException", "the token endpoint takes POST")
			return
		}
		h.issueToken(w, r)
		return
	}
	c := h.identify(r, node)
	if c == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="iceberg"`)
		writeError(w, r, http.StatusUnauthorized, "NotAuthorizedException", "missing or invalid bearer token")
		return
	}
	// ServeMux would answer an unclean path (//, /./, /../) with a
	// redirect; the protocol has no use for those, so they are bad requests.
	if p := r.URL.Path; p == "" || path.Clean(p) != p {
		writeError(w, r, http.StatusBadRequest, "BadRequestException", "malformed path "+strconv.Quote(p))
		return
	}
	// A catalog anyone may use (no credentials at all) must not take a
	// cross-site form or text/plain POST from a browser page: JSON only,
	// which a page can send elsewhere only after a CORS preflight this
	// server never answers.
	if h.open() && r.Method != http.MethodGet && r.Method != http.MethodHead && !jsonBody(r) {
		writeError(w, r, http.StatusUnsupportedMediaType, "BadRequestException", "request bodies must be Content-Type: application/json")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes)
	r = r.WithContext(context.WithValue(r.Context(), callerKey, c))
	h.mux.ServeHTTP(w, r)
}

// remote is the client's address: the connection's, or the one a
// trusted proxy names (security.trusted_proxies, auth.Authority.ClientAddr).
func (h *handler) remote(r *http.Request) string {
	if h.opts.Auth != nil {
		return h.opts.Auth.ClientAddr(r)
	}
	return r.RemoteAddr
}

// limit takes a token of the request's address (none for the NodeToken);
// false when it answered 429.
func (h *handler) limit(w http.ResponseWriter, r *http.Request, node bool) bool {
	if node || h.rates.allow(h.remote(r)) {
		return true
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, r, http.StatusTooManyRequests, "SlowDownException", "too many requests from this address; retry later")
	return false
}

const limitedKey ctxKey = 2

// RateLimited puts every request of the listener that serves catalog
// (made by NewHandler) beside other routes (metrics, probes, the console)
// under catalog's per-address rate limit (Options.RatePerIP), once each:
// no route of the catalog port is outside it.
func RateLimited(catalog, all http.Handler) http.Handler {
	h, ok := catalog.(*handler)
	if !ok {
		return all
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.limit(w, r, tokenIs(bearer(r), h.opts.NodeToken)) {
			return
		}
		all.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), limitedKey, true)))
	})
}

// open tells whether the catalog lets anyone in: no static token and no
// Authority, or an open one.
func (h *handler) open() bool {
	return h.opts.Token == "" && (h.opts.Auth == nil || h.opts.Auth.Open())
}

// jsonBody tells whether r says its body is JSON (or has none: DELETE).
func jsonBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return r.Method == http.MethodDelete && r.ContentLength <= 0
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// ---- errors and JSON ----

type errorModel struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

type errorResponse struct {
	Error errorModel `json:"error"`
}

// httpError is an error with the status and type it is reported with.
type httpError struct {
	status int
	typ    string
	err    error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, "BadRequestException", fmt.Errorf(format, args...)}
}

func commitFailed(err error) error {
	return &httpError{http.StatusConflict, "CommitFailedException", err}
}

// classify maps an error of the backing catalog to a status and type.
func classify(err error) (int, string) {
	var he *httpError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he.status, he.typ
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "BadRequestException"
	case errors.Is(err, table.ErrCommitFailed):
		return http.StatusConflict, "CommitFailedException"
	case errors.Is(err, catalog.ErrNoSuchTable):
		return http.StatusNotFound, "NoSuchTableException"
	case errors.Is(err, catalog.ErrNoSuchNamespace):
		return http.StatusNotFound, "NoSuchNamespaceException"
	case errors.Is(err, catalog.ErrNoSuchView):
		return http.StatusNotFound, "NoSuchViewException"
	case errors.Is(err, catalog.ErrTableAlreadyExists), errors.Is(err, catalog.ErrNamespaceAlreadyExists),
		errors.Is(err, catalog.ErrViewAlreadyExists):
		return http.StatusConflict, "AlreadyExistsException"
	case errors.Is(err, catalog.ErrNamespaceNotEmpty):
		return http.StatusConflict, "NamespaceNotEmptyException"
	case errors.Is(err, catalog.ErrInvalidIdentifier), errors.Is(err, iceberg.ErrInvalidArgument),
		errors.Is(err, table.ErrInvalidRequirement), errors.Is(err, iceberg.ErrInvalidSchema):
		return http.StatusBadRequest, "BadRequestException"
	case errors.Is(err, iceberg.ErrNotImplemented):
		return http.StatusNotAcceptable, "UnsupportedOperationException"
	}
	return http.StatusInternalServerError, "InternalServerError"
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, typ := classify(err)
	if status >= 500 {
		h.log.Error("iceberg rest: request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	} else {
		h.log.Debug("iceberg rest: request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeError(w, r, status, typ, err.Error())
}

func writeError(w http.ResponseWriter, r *http.Request, status int, typ, msg string) {
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, errorResponse{Error: errorModel{Message: msg, Type: typ, Code: status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorResponse{Error: errorModel{Message: "encode response: " + err.Error(),
			Type: "InternalServerError", Code: status}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decode reads one JSON value from the body into v, refusing trailing data.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("malformed request body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("malformed request body: trailing data after the JSON value")
	}
	return nil
}

// ---- identifiers ----

// parseNamespace splits a decoded namespace path segment or query value.
func parseNamespace(s string) (table.Identifier, error) {
	if s == "" {
		return nil, badRequest("empty namespace")
	}
	ns := strings.Split(s, NamespaceSeparator)
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	return ns, nil
}

func checkNamespace(ns []string) error {
	if len(ns) == 0 {
		return badRequest("empty namespace")
	}
	for _, l := range ns {
		if l == "" {
			return badRequest("namespace %q has an empty level", strings.Join(ns, "."))
		}
		if err := checkName("namespace level", l); err != nil {
			return err
		}
	}
	return nil
}

func pathNamespace(r *http.Request) (table.Identifier, error) {
	return parseNamespace(r.PathValue("namespace"))
}

func pathTable(r *http.Request) (table.Identifier, error) {
	ns, err := pathNamespace(r)
	if err != nil {
		return nil, err
	}
	name := r.PathValue("table")
	if name == "" {
		return nil, badRequest("empty table name")
	}
	return append(slices.Clone(ns), name), nil
}

// wireIdent is the protocol's TableIdentifier.
type wireIdent struct {
	Namespace []string `json:"namespace"`
	Name      string   `json:"name"`
}

func (id *wireIdent) ident() (table.Identifier, error) {
	if id == nil {
		return nil, badRequest("missing table identifier")
	}
	if err := checkNamespace(id.Namespace); err != nil {
		return nil, err
	}
	if id.Name == "" {
		return nil, badRequest("empty table name")
	}
	return append(slices.Clone(id.Namespace), id.Name), nil
}

func toWire(id table.Identifier) wireIdent {
	return wireIdent{Namespace: slices.Clone(id[:len(id)-1]), Name: id[len(id)-1]}
}

func identKey(id table.Identifier) string { return strings.Join(id, NamespaceSeparator) }

// lockTable serialises commits to one table within this process.
func (h *handler) lockTable(id table.Identifier) (unlock func()) {
	key := identKey(id)
	h.locksMu.Lock()
	l := h.locks[key]
	if l == nil {
		l = &tableLock{}
		h.locks[key] = l
	}
	l.refs++
	h.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		h.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(h.locks, key)
		}
		h.locksMu.Unlock()
	}
}

// page applies pageToken / pageSize (the token is the index of the next item).
func page[T any](r *http.Request, items []T) ([]T, string, error) {
	q := r.URL.Query()
	start := 0
	if t := q.Get("pageToken"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(items) {
			return nil, "", badRequest("invalid pageToken %q", t)
		}
		start = n
	}
	end := len(items)
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, "", badRequest("invalid pageSize %q", s)
		}
		if start+n < end {
			end = start + n
		}
	}
	next := ""
	if end < len(items) {
		next = strconv.Itoa(end)
	}
	return items[start:end], next, nil
}

// ---- config ----

func (h *handler) getConfig(w http.ResponseWriter, r *http.Request) {
	defaults := map[string]string{}
	if h.opts.Warehouse != "" {
		defaults["warehouse"] = h.opts.Warehouse
	}
	for k, v := range h.opts.Defaults {
		defaults[k] = v
	}
	overrides := map[string]string{}
	for k, v := range h.opts.Overrides {
		overrides[k] = v
	}
	var endpoints []string
	for _, rt := range h.routes() {
		if rt.advertised == "" {
			continue
		}
		if strings.HasSuffix(rt.advertised, "/transactions/commit") {
			if _, ok := h.cat.(catalog.TransactionalCatalog); !ok {
				continue // only single-table changes: not worth advertising
			}
		}
		endpoints = append(endpoints, rt.advertised)
	}
	writeJSON(w, http.StatusOK, map[string]any{"defaults": defaults, "overrides": overrides, "endpoints": endpoints})
}

// ---- namespaces ----

func (h *handler) listNamespaces(w http.ResponseWriter, r *http.Request) {
	var parent table.Identifier
	if p := r.URL.Query().Get("parent"); p != "" {
		var err error
		if parent, err = parseNamespace(p); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	all, err := h.cat.ListNamespaces(r.Context(), parent)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// Direct children only (the SQL catalog returns descendants too).
	seen := map[string]bool{}
	out := [][]string{}
	for _, ns := range all {
		if len(ns) <= len(parent) || !slices.Equal(ns[:len(parent)], parent) {
			continue
		}
		child := slices.Clone(ns[:len(parent)+1])
		if !h.mayRead(r.Context(), child, nil) {
			continue
		}
		if k := identKey(child); !seen[k] {
			seen[k] = true
			out = append(out, child)
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(identKey(a), identKey(b)) })
	items, next, err := page(r, out)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := map[string]any{"namespaces": items}
	if next != "" {
		resp["next-page-token"] = next
	}
	writeJSON(w, http.StatusOK, resp)
}

type namespaceBody struct {
	Namespace  []string          `json:"namespace"`
	Properties map[string]string `json:"properties"`
}

func (h *handler) createNamespace(w http.ResponseWriter, r *http.Request) {
	var req namespaceBody
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := checkNamespace(req.Namespace); err != nil {
		h.fail(w, r, err)
		return
	}
	// Write on the namespace (an admin has it too): edge nodes create their
	// streams' namespaces.
	if err := h.authorize(r.Context(), auth.Write, req.Namespace, nil); err != nil {
		h.fail(w, r, err)
		return
	}
	if _, ok := req.Properties["location"]; ok {
		h.fail(w, r, forbidden("namespace property \"location\": table locations are fixed by the warehouse layout"))
		return
	}
	if err := h.cat.CreateNamespace(r.Context(), req.Namespace, req.Properties); err != nil {
		h.fail(w, r, err)
		return
	}
	props, err := h.cat.LoadNamespaceProperties(r.Context(), req.Namespace)
	if err != nil {
		props = req.Properties
	}
	writeJSON(w, http.StatusOK, namespaceBody{Namespace: req.Namespace, Properties: nonNil(props)})
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (h *handler) loadNamespace(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err == nil {
		err = h.authorize(r.Context(), auth.Consume, ns, nil)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	props, err := h.cat.LoadNamespaceProperties(r.Context(), ns)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, namespaceBody{Namespace: ns, Properties: nonNil(props)})
}

func (h *handler) namespaceExists(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err == nil {
		err = h.authorize(r.Context(), auth.Consume, ns, nil)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ok, err := h.cat.CheckNamespaceExists(r.Context(), ns)
	switch {
	case err != nil:
		h.fail(w, r, err)
	case !ok:
		w.WriteHeader(http.StatusNotFound)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (h *handler) dropNamespace(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err == nil {
		err = h.authorize(r.Context(), auth.Admin, ns, nil)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.cat.DropNamespace(r.Context(), ns); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) updateNamespace(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req struct {
		Removals []string          `json:"removals"`
		Updates  map[string]string `json:"updates"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	// Edge nodes renew their owner leases (package lease) with Write on
	// the lease namespace; every other change of namespace properties is
	// Admin.
	need := auth.Admin
	if leaseUpdate(ns, req.Removals, req.Updates) {
		need = auth.Write
	}
	if err := h.authorize(r.Context(), need, ns, nil); err != nil {
		h.fail(w, r, err)
		return
	}
	if _, ok := req.Updates["location"]; ok {
		h.fail(w, r, forbidden("namespace property \"location\": table locations are fixed by the warehouse layout"))
		return
	}
	for _, k := range req.Removals {
		if _, ok := req.Updates[k]; ok {
			h.fail(w, r, &httpError{http.StatusUnprocessableEntity, "UnprocessableEntityException",
				fmt.Errorf("property %q is both removed and updated", k)})
			return
		}
	}
	sum, err := h.cat.UpdateNamespaceProperties(r.Context(), ns, req.Removals, req.Updates)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	for _, s := range []*[]string{&sum.Updated, &sum.Removed, &sum.Missing} {
		if *s == nil {
			*s = []string{}
		}
	}
	writeJSON(w, http.StatusOK, sum)
}

// ---- tables ----

func (h *handler) listTables(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err == nil {
		err = h.authorize(r.Context(), auth.Consume, ns, nil)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := []wireIdent{}
	for id, err := range h.cat.ListTables(r.Context(), ns) {
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if len(id) < 2 || !h.mayRead(r.Context(), nil, id) {
			continue
		}
		out = append(out, toWire(id))
	}
	if len(out) == 0 {
		// An empty list and a missing namespace look alike from ListTables.
		if ok, err := h.cat.CheckNamespaceExists(r.Context(), ns); err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("%w: %s", catalog.ErrNoSuchNamespace, strings.Join(ns, "."))
			}
			h.fail(w, r, err)
			return
		}
	}
	slices.SortFunc(out, func(a, b wireIdent) int { return strings.Compare(a.Name, b.Name) })
	items, next, err := page(r, out)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resp := map[string]any{"identifiers": items}
	if next != "" {
		resp["next-page-token"] = next
	}
	writeJSON(w, http.StatusOK, resp)
}

type loadTableResult struct {
	MetadataLocation string            `json:"metadata-location,omitempty"`
	Metadata         table.Metadata    `json:"metadata"`
	Config           map[string]string `json:"config"`
}

func (h *handler) loadTable(w http.ResponseWriter, r *http.Request) {
	id, err := pathTable(r)
	if err == nil {
		err = h.authorize(r.Context(), auth.Consume, nil, id)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	t, err := h.cat.LoadTable(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, loadTableResult{MetadataLocation: t.MetadataLocation(), Metadata: t.Metadata(), Config: map[string]string{}})
}

func (h *handler) tableExists(w http.ResponseWriter, r *http.Request) {
	id, err := pathTable(r)
	if err == nil {
		err = h.authorize(r.Context(), auth.Consume, nil, id)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ok, err := h.cat.CheckTableExists(r.Context(), id)
	switch {
	case err != nil && (errors.Is(err, catalog.ErrNoSuchNamespace) || errors.Is(err, catalog.ErrNoSuchTable)):
		w.WriteHeader(http.StatusNotFound)
	case err != nil:
		h.fail(w, r, err)
	case !ok:
		w.WriteHeader(http.StatusNotFound)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

type createTableRequest struct {
	Name          string                        `json:"name"`
	Schema        *iceberg.Schema               `json:"schema"`
	Location      string                        `json:"location"`
	PartitionSpec *iceberg.UnboundPartitionSpec `json:"partition-spec"`
	WriteOrder    *table.UnboundSortOrder       `json:"write-order"`
	StageCreate   bool                          `json:"stage-create"`
	Properties    map[string]string             `json:"properties"`
}

func (h *handler) createTable(w http.ResponseWriter, r *http.Request) {
	ns, err := pathNamespace(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req createTableRequest
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Name == "" || req.Schema == nil {
		h.fail(w, r, badRequest("create table: name and schema are required"))
		return
	}
	if err := checkName("table name", req.Name); err != nil {
		h.fail(w, r, err)
		return
	}
	id := append(slices.Clone(ns), req.Name)
	if err := h.authorize(r.Context(), auth.Write, nil, id); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.checkLocation(id, req.Location); err != nil {
		h.fail(w, r, err)
		return
	}
	keys := make([]string, 0, len(req.Properties))
	for k := range req.Properties {
		keys = append(keys, k)
	}
	if err := h.checkProperties(r.Context(), id, "table property", keys); err != nil {
		h.fail(w, r, err)
		return
	}
	req.Location = h.tableLocation(id)
	var spec *iceberg.PartitionSpec
	if req.PartitionSpec != nil {
		spec = &req.PartitionSpec.PartitionSpec
	}
	order := table.UnsortedSortOrder
	if req.WriteOrder != nil {
		order = req.WriteOrder.SortOrder
	}
	if req.StageCreate {
		h.stageCreate(w, r, id, req, spec, order)
		return
	}
	// Build the metadata once without writing it, so that a schema, spec
	// or order that cannot make a table is the client's error (400).
	if _, err := newMetadata(req.Schema, spec, order, "file:///validate", req.Properties); err != nil {
		h.fail(w, r, err)
		return
	}
	opts := []catalog.CreateTableOpt{catalog.WithSortOrder(order)}
	if spec != nil {
		opts = append(opts, catalog.WithPartitionSpec(spec))
	}
	if req.Location != "" {
		opts = append(opts, catalog.WithLocation(req.Location))
	}
	if len(req.Properties) > 0 {
		opts = append(opts, catalog.WithProperties(req.Properties))
	}
	t, err := h.createTableSafely(r, id, req.Schema, opts)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, loadTableResult{MetadataLocation: t.MetadataLocation(), Metadata: t.Metadata(), Config: map[string]string{}})
}

// createTableSafely turns a panic of metadata construction on hostile input
// (schemas and specs are decoded without being bound) into a bad request.
func (h *handler) createTableSafely(r *http.Request, id table.Identifier, sc *iceberg.Schema, opts []catalog.CreateTableOpt) (t *table.Table, err error) {
	defer func() {
		if v := recover(); v != nil {
			t, err = nil, badRequest("create table: invalid schema, spec or order: %v", v)
		}
	}()
	return h.cat.CreateTable(r.Context(), id, sc, opts...)
}

// newMetadata is table.NewMetadata with its failures (and panics, on
// hostile input) reported as bad requests.
func newMetadata(sc *iceberg.Schema, spec *iceberg.PartitionSpec, order table.SortOrder, loc string, props map[string]string) (m table.Metadata, err error) {
	defer func() {
		if v := recover(); v != nil {
			m, err = nil, badRequest("invalid schema, partition spec or sort order: %v", v)
		}
	}()
	m, err = table.NewMetadata(sc, spec, order, loc, props)
	if err != nil {
		return nil, badRequest("invalid table: %v", err)
	}
	return m, nil
}

// stageCreate answers a stage-create: the metadata the table would have,
// without creating it. The client then commits it with assert-create.
func (h *handler) stageCreate(w http.ResponseWriter, r *http.Request, id table.Identifier, req createTableRequest, spec *iceberg.PartitionSpec, order table.SortOrder) {
	ctx := r.Context()
	ns := id[:len(id)-1]
	if _, err := h.cat.LoadNamespaceProperties(ctx, ns); err != nil {
		h.fail(w, r, err)
		return
	}
	if ok, err := h.cat.CheckTableExists(ctx, id); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w: %s", catalog.ErrTableAlreadyExists, strings.Join(id, "."))
		}
		h.fail(w, r, err)
		return
	}
	if h.opts.Warehouse == "" {
		h.fail(w, r, badRequest("stage-create: no warehouse configured"))
		return
	}
	loc := req.Location // createTable set the table's one location
	meta, err := newMetadata(req.Schema, spec, order, loc, req.Properties)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, loadTableResult{Metadata: meta, Config: map[string]string{}})
}

func (h *handler) dropTable(w http.ResponseWriter, r *http.Request) {
	id, err := pathTable(r)
	if err == nil {
		err = h.authorize(r.Context(), auth.Admin, nil, id) // dropping (purging) is not a node's job
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	purge, _ := strconv.ParseBool(r.URL.Query().Get("purgeRequested"))
	unlock := h.lockTable(id)
	defer unlock()
	if p, ok := h.cat.(catalog.PurgeableTable); ok && purge {
		err = p.PurgeTable(r.Context(), id)
	} else {
		err = h.cat.DropTable(r.Context(), id)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) renameTable(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Source      *wireIdent `json:"source"`
		Destination *wireIdent `json:"destination"`
	}
	if err := decode(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	from, err := req.Source.ident()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	to, err := req.Destination.ident()
	if err == nil {
		err = checkName("table name", to[len(to)-1])
	}
	if err == nil {
		err = h.authorize(r.Context(), auth.Admin, nil, from)
	}
	if err == nil {
		err = h.authorize(r.Context(), auth.Admin, nil, to)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	unlock := h.lockTable(from)
	defer unlock()
	if _, err := h.cat.RenameTable(r.Context(), from, to); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// leaseUpdate tells whether a namespace property change touches only owner
// leases in the lease namespace.
func leaseUpdate(ns table.Identifier, removals []string, updates map[string]string) bool {
	if len(ns) != 1 || ns[0] != lease.Namespace || len(removals)+len(updates) == 0 {
		return false
	}
	for _, k := range removals {
		if !strings.HasPrefix(k, lease.PropPrefix) {
			return false
		}
	}
	for k := range updates {
		if !strings.HasPrefix(k, lease.PropPrefix) {
			return false
		}
	}
	return true
}
