package tables

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// StateDB (drivers registered in catalog.go) is a handle on the catalog database for the small state tables
// the cloud servers share (Kafka group offsets, Pulsar cursors): SQLite
// (the same file as an embedded catalog: WAL journal and a busy timeout so
// that it shares the file with catalog commits) or PostgreSQL.
type StateDB struct {
	*sql.DB
	Postgres bool // $n placeholders, BIGINT
}

// ErrStateDBURI is wrapped by OpenStateDB for a URI it cannot use.
var ErrStateDBURI = fmt.Errorf("unsupported state database uri")

// OpenStateDB opens "sqlite:///path" (or a path ending in .db) or
// "postgres://..." / "postgresql://...".
func OpenStateDB(uri string) (*StateDB, error) {
	if strings.HasPrefix(uri, "postgres://") || strings.HasPrefix(uri, "postgresql://") {
		db, err := sql.Open("pgx", uri)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", Redact(uri), err)
		}
		return &StateDB{DB: db, Postgres: true}, nil
	}
	if !strings.HasPrefix(uri, "sqlite://") && !strings.HasSuffix(uri, ".db") {
		return nil, fmt.Errorf("%w %q: want sqlite:///path, a .db path or postgres://", ErrStateDBURI, Redact(uri))
	}
	path := strings.TrimPrefix(uri, "sqlite://")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", SQLiteDSN(path))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &StateDB{DB: db}, nil
}

// SQLiteDSN is the modernc.org/sqlite DSN every user of the catalog file
// opens it with.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(30000)&_pragma=synchronous(FULL)&_txlock=immediate"
}

// Q adapts a query written with ? placeholders to the database.
func (d *StateDB) Q(query string) string {
	if !d.Postgres {
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

// BigInt is the 64-bit integer column type.
func (d *StateDB) BigInt() string {
	if d.Postgres {
		return "BIGINT"
	}
	return "INTEGER"
}
