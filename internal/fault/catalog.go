package fault

import (
	"context"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// Catalog is an iceberg-go catalog whose table loads and commits fail,
// stall or (commits) fail after being applied, as Loads and Commits script.
// It is the level every component shares: tables.Wrap puts it under a
// tables.Catalog, which the uplink, the replica and the cloud side use.
//
// A table loaded or created through it commits through it too: iceberg-go
// tables carry the catalog that loaded them, so each is re-made with this
// one (table.New keeps metadata, location and file system).
type Catalog struct {
	catalog.Catalog
	Loads, Commits Faults
}

// LoadTable loads through the wrapped catalog under the Loads script.
func (c *Catalog) LoadTable(ctx context.Context, id table.Identifier) (*table.Table, error) {
	var t *table.Table
	err := c.Loads.Do(ctx, func() error {
		var err error
		t, err = c.Catalog.LoadTable(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.own(t), nil
}

// CreateTable creates through the wrapped catalog (no faults).
func (c *Catalog) CreateTable(ctx context.Context, id table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	t, err := c.Catalog.CreateTable(ctx, id, sc, opts...)
	if err != nil {
		return nil, err
	}
	return c.own(t), nil
}

// CommitTable commits through the wrapped catalog under the Commits
// script; a failure after apply returns the error with the commit made.
func (c *Catalog) CommitTable(ctx context.Context, id table.Identifier, reqs []table.Requirement, ups []table.Update) (table.Metadata, string, error) {
	var (
		meta table.Metadata
		loc  string
	)
	err := c.Commits.Do(ctx, func() error {
		var err error
		meta, loc, err = c.Catalog.CommitTable(ctx, id, reqs, ups)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return meta, loc, nil
}

// own re-makes t so that its commits go through c.
func (c *Catalog) own(t *table.Table) *table.Table {
	return table.New(t.Identifier(), t.Metadata(), t.MetadataLocation(), t.FS, c)
}
