package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// Namespace is the catalog namespace whose properties hold the leases:
// PropPrefix + node id = that node's current lease value. It holds no
// tables. Node ids are unique across the sites sharing a catalog (they
// already map to partitions there), so every site can use it.
const Namespace = "tributary_leases"

// PropPrefix starts every lease property.
const PropPrefix = "tributary.lease."

// CatalogStore keeps the leases as properties of Namespace in an Iceberg
// catalog (SQL or REST): one property per node, written only by that node,
// so renewals need no compare-and-swap.
type CatalogStore struct {
	Catalog catalog.Catalog
}

var ns = table.Identifier{Namespace}

// Leases reads every node's lease; a missing namespace means none yet.
func (s CatalogStore) Leases(ctx context.Context) (map[string]string, error) {
	props, err := s.Catalog.LoadNamespaceProperties(ctx, ns)
	if errors.Is(err, catalog.ErrNoSuchNamespace) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read leases (namespace %s): %w", Namespace, err)
	}
	out := map[string]string{}
	for k, v := range props {
		if node, ok := strings.CutPrefix(k, PropPrefix); ok && node != "" {
			out[node] = v
		}
	}
	return out, nil
}

// Renew sets node's lease, creating the namespace on first use.
func (s CatalogStore) Renew(ctx context.Context, node, value string) error {
	upd := iceberg.Properties{PropPrefix + node: value}
	_, err := s.Catalog.UpdateNamespaceProperties(ctx, ns, nil, upd)
	if errors.Is(err, catalog.ErrNoSuchNamespace) {
		err = s.Catalog.CreateNamespace(ctx, ns, upd)
		if errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			_, err = s.Catalog.UpdateNamespaceProperties(ctx, ns, nil, upd)
		}
	}
	if err != nil {
		return fmt.Errorf("renew lease of %s (namespace %s): %w", node, Namespace, err)
	}
	return nil
}
