package pulsar

import (
	"context"
	"fmt"
)

// Cursor is a subscription's durable position: the mark-delete offset (last
// offset of the acknowledged prefix; -1 = none) and the individually
// acknowledged [from,to) ranges above it.
type Cursor struct {
	MarkDelete int64
	Acked      [][2]int64
}

// CursorStore keeps durable cursors in the catalog database, shared by every
// cloud server.
type CursorStore interface {
	Load(ctx context.Context, topic, sub string) (Cursor, bool, error)
	Save(ctx context.Context, topic, sub string, c Cursor) error
	Delete(ctx context.Context, topic, sub string) error
}

// OpenCursorStore opens the cursor table in "sqlite://..." or "postgres://..."
// databases.
func OpenCursorStore(uri string) (CursorStore, error) {
	return nil, fmt.Errorf("open cursor store %s: not implemented yet", uri)
}
