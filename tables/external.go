package tables

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/apache/iceberg-go/catalog"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
)

// External tells whether uri names an Iceberg REST catalog (ours or
// another's) rather than a catalog database Tributary opens itself.
func External(uri string) bool {
	return strings.HasPrefix(uri, "http://") || strings.HasPrefix(uri, "https://")
}

// CheckKeys are the config keys CheckREST names in its errors: which key
// an operator fixes for each failure.
type CheckKeys struct {
	URI, Token, Credential, SigV4, Warehouse string
	// Leases: the caller keeps package lease's leases in the catalog (a
	// replicated site), so namespace properties are checked too.
	Leases bool
}

// checkNamespace is the namespace CheckREST reads the properties of: the
// package lease keeps the nodes' leases there (lease.Namespace; not
// imported, lease imports tables' neighbours).
var checkNamespace = table.Identifier{"tributary_leases"}

// CheckREST opens the REST catalog of cfg and asks it for what Tributary
// needs before anything is accepted on its behalf: its /v1/config (the
// prefix and overrides, through the credential, token or SigV4
// signature), an authenticated namespace listing in the warehouse, and
// with keys.Leases namespace properties (the package lease keeps its
// leases in namespace tributary_leases). Each failure names the key to fix. It returns the
// open catalog; the caller closes it.
func CheckREST(ctx context.Context, cfg Config, keys CheckKeys) (*Catalog, error) {
	authKey := keys.URI
	switch {
	case cfg.SigV4 != nil:
		authKey = keys.SigV4
	case cfg.Properties["token"] != "":
		authKey = keys.Token
	case cfg.Properties["credential"] != "":
		authKey = keys.Credential
	}
	c, err := Open(ctx, cfg)
	if err != nil {
		return nil, explainREST(err, cfg, keys, authKey)
	}
	if _, err := c.cat.ListNamespaces(ctx, nil); err != nil {
		c.Close()
		return nil, explainREST(err, cfg, keys, authKey)
	}
	if _, err := c.cat.LoadNamespaceProperties(ctx, checkNamespace); keys.Leases && err != nil && !errors.Is(err, catalog.ErrNoSuchNamespace) {
		c.Close()
		return nil, fmt.Errorf("%s: the catalog at %s cannot read namespace properties (%v): Tributary keeps the site's ownership leases in the properties of namespace %s",
			keys.URI, Redact(cfg.URI), err, checkNamespace[0])
	}
	return c, nil
}

// explainREST turns an error of a REST catalog into one naming the key
// whose value the operator fixes.
func explainREST(err error, cfg Config, keys CheckKeys, authKey string) error {
	var nerr net.Error
	var oerr *net.OpError
	switch {
	case errors.As(err, &oerr) || (errors.As(err, &nerr) && nerr.Timeout()) || unreachable(err):
		return fmt.Errorf("%s: cannot reach the catalog at %s: %w", keys.URI, Redact(cfg.URI), err)
	case errors.Is(err, restcat.ErrOAuthError):
		return fmt.Errorf("%s: the catalog's token endpoint refused the client credentials: %w", keys.Credential, err)
	case errors.Is(err, restcat.ErrAuthorizationExpired):
		return fmt.Errorf("%s: the catalog says the authorization has expired: %w", authKey, err)
	case errors.Is(err, restcat.ErrUnauthorized):
		return fmt.Errorf("%s: the catalog at %s refused the request as unauthenticated (a wrong or expired token, credential or signature): %w", authKey, Redact(cfg.URI), err)
	case errors.Is(err, restcat.ErrForbidden):
		return fmt.Errorf("%s: the catalog at %s forbids this principal to list the warehouse's namespaces: %w", authKey, Redact(cfg.URI), err)
	case errors.Is(err, catalog.ErrNoSuchNamespace), errors.Is(err, restcat.ErrBadRequest), isNotFound(err):
		return fmt.Errorf("%s: the catalog at %s has no warehouse %q (or refused it): %w", keys.Warehouse, Redact(cfg.URI), cfg.Warehouse, err)
	}
	return fmt.Errorf("%s: the catalog at %s: %w", keys.URI, Redact(cfg.URI), err)
}

// unreachable reports a network failure that reached us only as text:
// iceberg-go formats the token endpoint's transport error with %s inside
// ErrOAuthError, so a catalog that is down would otherwise read as a
// refused credential.
func unreachable(err error) bool {
	s := err.Error()
	for _, sign := range []string{"connection refused", "no such host", "i/o timeout", "network is unreachable", "connection reset by peer", "no route to host"} {
		if strings.Contains(s, sign) {
			return true
		}
	}
	return false
}

func isNotFound(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "not found") || strings.Contains(s, "nosuch") || strings.Contains(s, "no such") || strings.Contains(s, "does not exist")
}
