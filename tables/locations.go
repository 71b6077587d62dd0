package tables

import (
	"context"
	"fmt"
	"strings"
)

// MetadataLocations is every stream table's current metadata location,
// by stream, read in one query of the catalog database, so that a caller
// polling for commits (package federation) loads only the tables that
// moved. With a REST catalog it is nil, nil: the caller loads each table.
func (c *Catalog) MetadataLocations(ctx context.Context) (map[string]string, error) {
	if c.db == nil {
		return nil, nil
	}
	q := "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = ? AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')"
	if !strings.HasPrefix(c.cfg.URI, "sqlite://") && !strings.HasSuffix(c.cfg.URI, ".db") {
		q = strings.Replace(q, "?", "$1", 1) // Postgres
	}
	rows, err := c.db.QueryContext(ctx, q, c.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("metadata locations: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var ns, name string
		var loc *string
		if err := rows.Scan(&ns, &name, &loc); err != nil {
			return nil, fmt.Errorf("metadata locations: %w", err)
		}
		if loc != nil {
			out[ns+"."+name] = *loc
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("metadata locations: %w", err)
	}
	return out, nil
}
