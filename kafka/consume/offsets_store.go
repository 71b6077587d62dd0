package consume

// Committed group offsets live in a SQL table of the catalog database, so
// that cloud servers keep no state of their own: any server (the one a
// group's coordinator hash picks after a restart or a peer change) resumes
// every group from what was committed.
//
//	tributary_group_offsets(group_id, topic, partition, committed_offset,
//	                        metadata, commit_time)   -- key (group_id, topic, partition)
//
// It is created if missing, in SQLite (the same file as the catalog) or
// PostgreSQL (the catalog's database), opened by tables.OpenStateDB. An
// OffsetCommit is one transaction: all of its partitions are stored, or none.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/tables"
)

type offsetStore struct {
	db *tables.StateDB
}

// q adapts a query written with ? placeholders to the database.
func (s *offsetStore) q(query string) string { return s.db.Q(query) }

type committedOffset struct {
	topic     string
	partition int32
	offset    int64
	metadata  string
}

func openOffsetStore(uri string) (*offsetStore, error) {
	db, err := tables.OpenStateDB(uri)
	if errors.Is(err, tables.ErrStateDBURI) {
		return nil, fmt.Errorf("%w: offsets database: %v", kafka.ErrInvalidConfig, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open offsets database: %w", err)
	}
	if err := createOffsetsTable(db.DB, db.BigInt()); err != nil {
		db.Close()
		return nil, fmt.Errorf("create tributary_group_offsets: %w", err)
	}
	return &offsetStore{db: db}, nil
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

func (s *offsetStore) Close() error { return s.db.Close() }

// errTooManyOffsets: a commit would make its group hold more offsets
// than its limit; nothing was stored.
var errTooManyOffsets = errors.New("too many committed offsets in the group")

// commit stores offsets of a group in one transaction. With limit >= 0
// the group's offsets are counted in the transaction and the commit is
// rolled back with errTooManyOffsets when they would be more than limit;
// the count (with the refused ones) is returned, else 0.
func (s *offsetStore) commit(ctx context.Context, group string, offs []committedOffset, limit int) (int, error) {
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
			group, o.topic, o.partition, o.offset, o.metadata, now)
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
			return n, errTooManyOffsets
		}
	}
	return n, tx.Commit()
}

// storedGroup is a group's share of the offsets table.
type storedGroup struct {
	offsets    int       // committed (topic, partition) offsets
	lastCommit time.Time // the latest commit
}

// groups returns every group with committed offsets.
func (s *offsetStore) groups(ctx context.Context) (map[string]storedGroup, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT group_id, COUNT(*), MAX(commit_time) FROM tributary_group_offsets GROUP BY group_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]storedGroup{}
	for rows.Next() {
		var g string
		var n int
		var last int64
		if err := rows.Scan(&g, &n, &last); err != nil {
			return nil, err
		}
		out[g] = storedGroup{offsets: n, lastCommit: time.UnixMilli(last)}
	}
	return out, rows.Err()
}

// expire deletes a group's offsets if it still has no commit since
// before, and reports whether it did.
func (s *offsetStore) expire(ctx context.Context, group string, before time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM tributary_group_offsets WHERE group_id = ?
		AND (SELECT MAX(commit_time) FROM tributary_group_offsets WHERE group_id = ?) < ?`), group, group, before.UnixMilli())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// fetch returns the group's committed offsets.
func (s *offsetStore) fetch(ctx context.Context, group string) ([]committedOffset, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT topic, partition, committed_offset, metadata
		FROM tributary_group_offsets WHERE group_id = ? ORDER BY topic, partition`), group)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []committedOffset
	for rows.Next() {
		var o committedOffset
		if err := rows.Scan(&o.topic, &o.partition, &o.offset, &o.metadata); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}
