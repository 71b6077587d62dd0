package kafka

// Committed group offsets live in a SQL table of the catalog database, so
// that cloud servers keep no state of their own: any server (the one a
// group's coordinator hash picks after a restart or a peer change) resumes
// every group from what was committed.
//
//	tributary_group_offsets(group_id, topic, partition, committed_offset,
//	                        metadata, commit_time)   -- key (group_id, topic, partition)
//
// It is created if missing, in SQLite (modernc.org/sqlite, the same file as
// the catalog, WAL journal and a busy timeout so that it shares the file with
// catalog commits) or PostgreSQL (pgx, the catalog's database). An
// OffsetCommit is one transaction: all of its partitions are stored, or none.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

type offsetStore struct {
	db *sql.DB
	pg bool // PostgreSQL: $n placeholders
}

// q adapts a query written with ? placeholders to the database.
func (s *offsetStore) q(query string) string {
	if !s.pg {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type committedOffset struct {
	topic     string
	partition int32
	offset    int64
	metadata  string
}

func openOffsetStore(uri string) (*offsetStore, error) {
	if strings.HasPrefix(uri, "postgres://") || strings.HasPrefix(uri, "postgresql://") {
		db, err := sql.Open("pgx", uri)
		if err != nil {
			return nil, fmt.Errorf("open offsets database: %w", err)
		}
		if err := createOffsetsTable(db, "BIGINT"); err != nil {
			db.Close()
			return nil, fmt.Errorf("create tributary_group_offsets: %w", err)
		}
		return &offsetStore{db: db, pg: true}, nil
	}
	path := strings.TrimPrefix(uri, "sqlite://")
	if !strings.HasPrefix(uri, "sqlite://") && !strings.HasSuffix(uri, ".db") {
		return nil, fmt.Errorf("%w: offsets database %q: want sqlite:///path or a .db path", ErrInvalidConfig, uri)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open offsets database: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(30000)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open offsets database %s: %w", path, err)
	}
	if err := createOffsetsTable(db, "INTEGER"); err != nil {
		db.Close()
		return nil, fmt.Errorf("create tributary_group_offsets in %s: %w", path, err)
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

// commit stores offsets of a group in one transaction.
func (s *offsetStore) commit(ctx context.Context, group string, offs []committedOffset) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
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
			return err
		}
	}
	return tx.Commit()
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
