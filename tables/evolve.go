package tables

import (
	"context"
	"fmt"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Schema evolution of the envelope.
//
// A table gets the envelope columns added after the first release
// (addedColumns: principal) by an Iceberg schema update — AddColumn of an
// optional column, in a transaction — the first time a node that knows
// them ensures the table (EnsureTable, which every write path of an edge
// node goes through before it commits; a new table is created with
// InitialSchema and evolved right away) or commits to it (CommitAppend
// stages the update in the same transaction as the data, so that a data
// file carrying a column is never committed to a table without it).
//
// Invariants:
//
//   - Field IDs are fixed: a column is added only if the table would give
//     it the envelope's ID (its last column ID + 1); otherwise the table's
//     columns were changed outside Tributary, and EnsureTable and
//     CommitAppend refuse with ErrSchema rather than commit files whose IDs
//     mean something else there.
//   - Concurrent evolvers converge: the update asserts the schema it was
//     planned on (and, like every commit, the branch head), so of several
//     nodes evolving one table at once one commit wins; the others fail
//     the compare-and-swap, reload, find the column and have nothing left
//     to add. In CommitAppend the conflict is the ordinary one: the batch
//     is decided again on the reloaded table, so no data is lost or
//     duplicated.
//   - Nothing is rewritten. Old data files keep their IDs and lack the new
//     columns, which every reader fills with null (iceberg-go and other
//     engines by field ID, Reader and RecordsFromArrow by name: "").
//   - The table's name mapping (schema.name-mapping.default, used for
//     files without field IDs) is updated in the same commit.
//
// Mixed versions: a node from before a column keeps committing to an
// evolved table (its files lack the column: null), but a maintainer from
// before it would compact the column's values away, so upgrade whatever
// runs maintenance (the cloud server, nodes with maintenance on) first.

// missingColumns returns the envelope columns md's current schema lacks,
// in order, or ErrSchema if they cannot be added with their IDs.
func missingColumns(md table.Metadata, added []iceberg.NestedField) ([]iceberg.NestedField, error) {
	sch := md.CurrentSchema()
	var missing []iceberg.NestedField
	for _, f := range added {
		if got, ok := sch.FindFieldByName(f.Name); ok {
			if got.ID != f.ID || !got.Type.Equals(f.Type) || got.Required {
				return nil, fmt.Errorf("%w: column %s is %d %s (required %v), the envelope's is %d %s (optional)",
					ErrSchema, f.Name, got.ID, got.Type, got.Required, f.ID, f.Type)
			}
			continue
		}
		if other, ok := sch.FindFieldByID(f.ID); ok {
			return nil, fmt.Errorf("%w: field id %d is column %s, the envelope's %s", ErrSchema, f.ID, other.Name, f.Name)
		}
		missing = append(missing, f)
	}
	for i, f := range missing {
		if want := md.LastColumnID() + 1 + i; f.ID != want {
			return nil, fmt.Errorf("%w: column %s would get field id %d (last column id %d), the envelope's is %d",
				ErrSchema, f.Name, want, md.LastColumnID(), f.ID)
		}
	}
	return missing, nil
}

// evolve stages in tx, a new transaction on t, the addition of the
// envelope columns t lacks (a dead-letter table's: addedColumnsOf). It
// reports whether there were any.
func evolve(tx *table.Transaction, t *table.Table) (bool, error) {
	md := t.Metadata()
	missing, err := missingColumns(md, addedColumnsOf(t.Identifier()))
	if err != nil || len(missing) == 0 {
		return false, err
	}
	var opts []table.UpdateSchemaOption
	if nm := md.NameMapping(); nm != nil {
		opts = append(opts, table.WithNameMapping(nm))
	}
	us := tx.UpdateSchema(true, false, opts...)
	for _, f := range missing {
		us.AddColumn([]string{f.Name}, f.Type, f.Doc, false, nil)
	}
	if err := us.Commit(); err != nil {
		return false, fmt.Errorf("add columns to %s: %w", t.Identifier(), err)
	}
	return true, nil
}

// evolveTable adds the envelope columns t, a stream's table as loaded,
// lacks (nothing if it has them all) and returns the table as committed.
// On a commit conflict or an unknown outcome it reloads and decides
// again: the addition is idempotent.
func (c *Catalog) evolveTable(ctx context.Context, stream string, t *table.Table) (*table.Table, error) {
	var lastErr error
	for attempt := 1; attempt <= MaxCommitAttempts; attempt++ {
		tx := t.NewTransaction()
		changed, err := evolve(tx, t)
		if err != nil {
			return nil, fmt.Errorf("evolve %s: %w", stream, err)
		}
		if !changed {
			return t, nil
		}
		nt, err := tx.Commit(ctx)
		if err == nil {
			c.remember(stream, nt)
			return nt, nil
		}
		lastErr = err
		// Conflict, or an unknown outcome: reload and decide again.
		if err := retryPause(ctx, attempt); err != nil {
			return nil, fmt.Errorf("evolve %s: %w", stream, err)
		}
		if t, err = c.LoadTable(ctx, stream); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("evolve %s: giving up after %d attempts: %w", stream, MaxCommitAttempts, lastErr)
}
