package subscription

// Durable cursors live in a SQL table of the catalog database, so that
// cloud servers keep no state of their own: whichever server serves a topic
// after a restart or an ownership change resumes each subscription from it.
//
//	tributary_pulsar_cursors(topic, subscription, mark_delete, acked,
//	                         update_time)   -- key (topic, subscription)
//
// acked holds the individually acknowledged ranges above mark_delete
// (wire.EncodeAckedRanges), at most Caps.MaxAckedRanges of them. The table is created
// if missing, in SQLite or PostgreSQL (tables.OpenStateDB, shared with the
// Kafka group offsets).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tributary-io/tributary/subscription/wire"

	"github.com/tributary-io/tributary/tables"
)

// CursorStore keeps durable cursors (mark-delete offset + individually
// acknowledged ranges above it) in the catalog database, shared by every
// cloud server.
type CursorStore interface {
	Load(ctx context.Context, topic, sub string) (Cursor, bool, error)
	Save(ctx context.Context, topic, sub string, c Cursor) error
	Delete(ctx context.Context, topic, sub string) error
}

// sqlCursors is the CursorStore on the catalog database. Close closes it.
type sqlCursors struct {
	db    *tables.StateDB
	once  sync.Once
	close error
}

// OpenCursorStore opens (creating if missing) the cursor table in
// "sqlite:///path" (or a .db path) or "postgres://..." databases. The
// returned store is an io.Closer.
func OpenCursorStore(uri string) (CursorStore, error) {
	db, err := tables.OpenStateDB(uri)
	if err != nil {
		return nil, fmt.Errorf("open cursor store: %w", err)
	}
	blob := "BLOB"
	if db.Postgres {
		blob = "BYTEA"
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS tributary_pulsar_cursors (
		topic TEXT NOT NULL,
		subscription TEXT NOT NULL,
		mark_delete ` + db.BigInt() + ` NOT NULL,
		acked ` + blob + ` NOT NULL,
		update_time ` + db.BigInt() + ` NOT NULL,
		PRIMARY KEY (topic, subscription))`); err != nil {
		db.Close()
		return nil, fmt.Errorf("create tributary_pulsar_cursors: %w", err)
	}
	return &sqlCursors{db: db}, nil
}

// Close closes the database; later calls return the first call's result.
func (s *sqlCursors) Close() error {
	s.once.Do(func() { s.close = s.db.Close() })
	return s.close
}

func (s *sqlCursors) Load(ctx context.Context, topic, sub string) (Cursor, bool, error) {
	var c Cursor
	var acked []byte
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT mark_delete, acked FROM tributary_pulsar_cursors
		WHERE topic = ? AND subscription = ?`), topic, sub).Scan(&c.MarkDelete, &acked)
	if errors.Is(err, sql.ErrNoRows) {
		return Cursor{}, false, nil
	}
	if err != nil {
		return Cursor{}, false, err
	}
	if c.Acked, err = wire.DecodeAckedRanges(c.MarkDelete, acked); err != nil {
		return Cursor{}, false, fmt.Errorf("cursor %s %s: %w", topic, sub, err)
	}
	return c, true, nil
}

func (s *sqlCursors) Save(ctx context.Context, topic, sub string, c Cursor) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_pulsar_cursors
		(topic, subscription, mark_delete, acked, update_time) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (topic, subscription) DO UPDATE SET
		mark_delete = excluded.mark_delete, acked = excluded.acked, update_time = excluded.update_time`),
		topic, sub, c.MarkDelete, wire.EncodeAckedRanges(c.MarkDelete, c.Acked), time.Now().UnixMilli())
	return err
}

func (s *sqlCursors) Delete(ctx context.Context, topic, sub string) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_pulsar_cursors WHERE topic = ? AND subscription = ?`), topic, sub)
	return err
}
