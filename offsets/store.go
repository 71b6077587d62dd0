// Package offsets stores consumer groups' committed offsets in a SQL table
// of the catalog database: the one place every consume protocol keeps
// them (the Kafka consume server's OffsetCommit/OffsetFetch, the HTTP read
// API's group offsets), so a group's position is the same whichever
// protocol committed it, and cloud servers keep no state of their own: any
// server (the one a group's coordinator hash picks after a restart or a
// peer change) resumes every group from what was committed.
//
//	tributary_group_offsets(group_id, topic, partition, committed_offset,
//	                        metadata, commit_time)   -- key (group_id, topic, partition)
//
// topic is the stream name (namespace.stream, the Kafka topic). The table
// is created if missing, in SQLite (the same file as the catalog) or
// PostgreSQL (the catalog's database), opened by tables.OpenStateDB. A
// Commit is one transaction: all of its partitions are stored, or none.
//
// It was the Kafka consume server's own file until the HTTP API needed the
// same offsets; it moved down here so that neither protocol package
// imports the other.
package offsets

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tributary-io/tributary/tables"
)

// Store is the committed offsets of every group; safe for concurrent use.
type Store struct {
	db *tables.StateDB
}

// q adapts a query written with ? placeholders to the database.
func (s *Store) q(query string) string { return s.db.Q(query) }

// Offset is one committed (stream, partition) offset of a group.
type Offset struct {
	Topic     string // the stream, namespace.stream
	Partition int32
	Offset    int64 // the next offset the group will read
	Metadata  string
}

// Open opens (and creates if missing) the offsets table of the catalog
// database uri. An unusable uri wraps tables.ErrStateDBURI.
func Open(uri string) (*Store, error) {
	db, err := tables.OpenStateDB(uri)
	if err != nil {
		return nil, fmt.Errorf("open offsets database: %w", err)
	}
	if err := createOffsetsTable(db.DB, db.BigInt()); err != nil {
		db.Close()
		return nil, fmt.Errorf("create tributary_group_offsets: %w", err)
	}
	return &Store{db: db}, nil
}

func createOffsetsTable(db *sql.DB, bigint string) error {
	_, err := db.Exec(`CREATE TABLE IF NOT EXISTS tributary_group_offsets (
		group_id TEXT NOT NULL,
		topic TEXT NOT NULL,
		partition INTEGER NOT NULL,
		committed_offset ` + bigint + ` NOT NULL,
		metadata TEXT NOT NULL DEFAULT '',
		commit_time ` + bigint + ` NOT NULL,
		PRIMARY KEY (group_id, topic, partition))`)
	return err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// ErrTooMany: a commit would make its group hold more offsets than its
// limit; nothing was stored.
var ErrTooMany = errors.New("too many committed offsets in the group")

// Commit stores offsets of a group in one transaction. With limit >= 0
// the group's offsets are counted in the transaction and the commit is
// rolled back with ErrTooMany when they would be more than limit; the
// count (with the refused ones) is returned, else 0.
func (s *Store) Commit(ctx context.Context, group string, offs []Offset, limit int) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	now := time.Now().UnixMilli()
	for _, o := range offs {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO tributary_group_offsets
			(group_id, topic, partition, committed_offset, metadata, commit_time) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (group_id, topic, partition) DO UPDATE SET
			committed_offset = excluded.committed_offset, metadata = excluded.metadata, commit_time = excluded.commit_time`),
			group, o.Topic, o.Partition, o.Offset, o.Metadata, now)
		if err != nil {
			return 0, err
		}
	}
	n := 0
	if limit >= 0 {
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tributary_group_offsets WHERE group_id = ?`), group).Scan(&n); err != nil {
			return 0, err
		}
		if n > limit {
			return n, ErrTooMany
		}
	}
	return n, tx.Commit()
}

// Group is a group's share of the offsets table.
type Group struct {
	Offsets    int       // committed (topic, partition) offsets
	LastCommit time.Time // the latest commit
}

// Groups returns every group with committed offsets.
func (s *Store) Groups(ctx context.Context) (map[string]Group, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT group_id, COUNT(*), MAX(commit_time) FROM tributary_group_offsets GROUP BY group_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]Group{}
	for rows.Next() {
		var g string
		var n int
		var last int64
		if err := rows.Scan(&g, &n, &last); err != nil {
			return nil, err
		}
		out[g] = Group{Offsets: n, LastCommit: time.UnixMilli(last)}
	}
	return out, rows.Err()
}

// Expire deletes a group's offsets if it still has no commit since
// before, and reports whether it did.
func (s *Store) Expire(ctx context.Context, group string, before time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM tributary_group_offsets WHERE group_id = ?
		AND (SELECT MAX(commit_time) FROM tributary_group_offsets WHERE group_id = ?) < ?`), group, group, before.UnixMilli())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Fetch returns the group's committed offsets, by topic and partition.
func (s *Store) Fetch(ctx context.Context, group string) ([]Offset, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT topic, partition, committed_offset, metadata
		FROM tributary_group_offsets WHERE group_id = ? ORDER BY topic, partition`), group)
	if err != nil {
		return nil, err
	}
	return scan(rows, nil)
}

// GroupOffset is one row of the table: a group's committed offset.
type GroupOffset struct {
	Group string
	Offset
}

// All returns every group's committed offsets (for lag reports).
func (s *Store) All(ctx context.Context) ([]GroupOffset, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT group_id, topic, partition, committed_offset, metadata FROM tributary_group_offsets`)
	if err != nil {
		return nil, err
	}
	var out []GroupOffset
	_, err = scan(rows, func(g string, o Offset) { out = append(out, GroupOffset{g, o}) })
	return out, err
}

// scan reads rows of (topic, partition, offset, metadata), or with each
// given, rows of (group, topic, partition, offset, metadata).
func scan(rows *sql.Rows, each func(string, Offset)) ([]Offset, error) {
	defer rows.Close()
	var out []Offset
	for rows.Next() {
		var o Offset
		var g string
		var err error
		if each != nil {
			err = rows.Scan(&g, &o.Topic, &o.Partition, &o.Offset, &o.Metadata)
		} else {
			err = rows.Scan(&o.Topic, &o.Partition, &o.Offset, &o.Metadata)
		}
		if err != nil {
			return nil, err
		}
		if each != nil {
			each(g, o)
		} else {
			out = append(out, o)
		}
	}
	return out, rows.Err()
}
