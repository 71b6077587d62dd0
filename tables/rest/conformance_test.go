package rest_test

import (
	"context"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/catalogtest"
	restcat "github.com/apache/iceberg-go/catalog/rest"

	"github.com/tributary-io/tributary/tables/rest"
)

// TestCatalogConformance runs iceberg-go's catalog conformance suite
// (catalogtest.RunCatalogTests: tables, namespaces and their properties)
// through iceberg-go's REST client against the REST catalog Tributary
// serves, over a fresh SQLite catalog per test. e2e's
// TestSeaweedFSConformance runs the same suite against SeaweedFS.
func TestCatalogConformance(t *testing.T) {
	catalogtest.RunCatalogTests(t, catalogtest.Config{
		NewCatalog: func(t *testing.T) catalog.Catalog {
			e := newEnv(t, 1, rest.Options{})
			c, err := restcat.NewCatalog(context.Background(), "conformance", e.servers[0].URL(),
				restcat.WithWarehouseLocation(e.warehouse))
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		SupportsNamespaceProperties: true,
	})
}
