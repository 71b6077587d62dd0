// Package rest serves the Apache Iceberg REST catalog protocol
// (open-api/rest-catalog-open-api.yaml, /v1 routes, no prefix) on top of
// any iceberg-go catalog.Catalog — in Tributary the SQL catalog on SQLite
// (or Postgres). Spark, Trino, DuckDB, PyIceberg and iceberg-go's own REST
// client attach to the same tables by URL, and edge nodes commit through
// it (tables.Open with an http:// URI).
//
// Served: GET /v1/config; namespaces (list with parent and paging, create,
// load, HEAD exists, drop, update properties); tables (list, create incl.
// stage-create, load, HEAD exists, drop with purgeRequested, rename,
// commit); POST /v1/transactions/commit for a single table change, or for
// several when the backing catalog implements
// catalog.TransactionalCatalog (advertised in /v1/config only then); with
// an Authority, the OAuth2 token endpoint POST /v1/oauth/tokens
// (client_credentials as iceberg-go, PyIceberg and Spark send it with
// credential=client_id:client_secret, checked against the users file;
// token exchange to refresh). Views, register, metrics reports, storage
// credentials, scan planning and a URL prefix are not served; an unknown
// route is 404. Multi-level namespaces use the unit separator (%1F) in
// path segments and in the parent query parameter.
//
// Authentication and authorization (auth.go): bearer tokens — the static
// Options.Token (every right) and Options.NodeToken (an edge node), and
// with Options.Auth any JWT it verifies, including the token endpoint's
// own. A bad token, or none when the Authority does not admit anonymous
// clients, is 401 with WWW-Authenticate: Bearer. Reads need Consume or Write on the
// namespace or table (namespace.table is the stream name), and listings
// are filtered; table creation and commits need Write, renames and drops
// (purge or not) Admin;
// namespace creation Write on it, its drop and property changes Admin;
// otherwise 403 ForbiddenException. An open catalog (no Token, and no
// Authority or an open one) takes only application/json bodies (415), so
// that a browser page cannot post to it cross-site without a preflight.
//
// Invariants:
//   - A commit is a compare-and-swap. The request's requirements are
//     validated against the table's current metadata, its updates applied,
//     and the result committed with the backing catalog's CommitTable, whose
//     own swap is conditional on the metadata location it started from (the
//     SQL catalog's UPDATE … WHERE metadata_location = old). Within one
//     server process commits to one table are serialised by a mutex; across
//     processes the backing catalog's swap alone decides.
//   - A failed requirement, or losing the swap, is 409 CommitFailedException
//     and changes nothing. Updates that cannot be applied are 400. Any other
//     failure during a commit is 500, which clients treat as "state unknown"
//     (reload and decide again, never blindly replay).
//   - Error bodies follow the spec: {"error": {"message", "type", "code"}}
//     with the HTTP status in "code": 400 BadRequestException, 401
//     NotAuthorizedException, 403 ForbiddenException, 404 NoSuchNamespaceException /
//     NoSuchTableException, 409 AlreadyExistsException /
//     NamespaceNotEmptyException / CommitFailedException, 422
//     UnprocessableEntityException, 500 InternalServerError. The token
//     endpoint answers RFC 6749's {"error", "error_description"} instead.
//
// Nothing is cached: every request reads the backing catalog, so several
// server processes over one database are interchangeable. The only state is
// the per-table commit mutexes, dropped when no commit holds them.
package rest
