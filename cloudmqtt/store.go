package cloudmqtt

// Persistent sessions live in two SQL tables of the catalog database, so
// that cloud servers keep no state of their own: a client that reconnects
// to any of them finds its subscriptions and positions there.
//
//	tributary_mqtt_sessions(client_id, principal, subscriptions, expiry,
//	                        seen, update_time)             -- key client_id
//	tributary_mqtt_positions(client_id, filter, stream, part, next_offset,
//	                 update_time)   -- key (client_id, filter, stream, part)
//
// subscriptions is a JSON list of the session's filters (with QoS and
// subscription identifier); expiry is the session expiry interval in
// seconds; seen (unix ms) is when a server last had the client connected
// (set at connect and disconnect, refreshed every sweep while connected).
// A session whose seen + expiry has passed is deleted by the next sweep or
// connect. next_offset is the first offset of the partition the
// subscription has not had acknowledged (QoS 1) or sent (QoS 0): a resumed
// session reads from there, so it receives again only what was not
// acknowledged.
//
// Positions are written by one loop per server in group commits: Set
// records a position and wakes the loop; the loop writes every position
// set since its last write in one transaction. Flush waits until the
// positions set before it are written.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tributary-io/tributary/tables"
)

// storedSub is one subscription of a stored session.
type storedSub struct {
	Filter string `json:"filter"`
	QoS    byte   `json:"qos"`
	SubID  int    `json:"sub_id,omitempty"`
}

// storedSession is a session's row.
type storedSession struct {
	Principal string
	Subs      []storedSub
	Expiry    int64 // seconds
	Seen      int64 // unix ms
}

type posKey struct {
	client, filter, stream string
	part                   int32
}

// store is the session store on the catalog database.
type store struct {
	db  *tables.StateDB
	log *slog.Logger

	mu      sync.Mutex
	dirty   map[posKey]int64
	waiters []chan struct{} // closed when the write holding what was dirty at their Set/Flush succeeds
	kick    chan struct{}
	writes  func() // counts a position write (metrics)

	cancel context.CancelFunc
	done   chan struct{}
}

func openStore(uri string, log *slog.Logger) (*store, error) {
	db, err := tables.OpenStateDB(uri)
	if err != nil {
		return nil, fmt.Errorf("open session store: %w", err)
	}
	for _, q := range []string{`CREATE TABLE IF NOT EXISTS tributary_mqtt_sessions (
		client_id TEXT NOT NULL PRIMARY KEY,
		principal TEXT NOT NULL,
		subscriptions TEXT NOT NULL,
		expiry ` + db.BigInt() + ` NOT NULL,
		seen ` + db.BigInt() + ` NOT NULL,
		update_time ` + db.BigInt() + ` NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS tributary_mqtt_positions (
		client_id TEXT NOT NULL,
		filter TEXT NOT NULL,
		stream TEXT NOT NULL,
		part ` + db.BigInt() + ` NOT NULL,
		next_offset ` + db.BigInt() + ` NOT NULL,
		update_time ` + db.BigInt() + ` NOT NULL,
		PRIMARY KEY (client_id, filter, stream, part))`} {
		if _, err := db.Exec(q); err != nil {
			db.Close()
			return nil, fmt.Errorf("create session tables: %w", err)
		}
	}
	if err := createShareTables(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("create shared subscription tables: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &store{db: db, log: log, dirty: map[posKey]int64{}, kick: make(chan struct{}, 1), cancel: cancel,
		done: make(chan struct{}), writes: func() {}}
	go s.loop(ctx)
	return s, nil
}

// close writes what is dirty (bounded by ctx) and closes the database.
func (s *store) close(ctx context.Context) error {
	ferr := s.Flush(ctx)
	s.cancel()
	<-s.done
	return errors.Join(ferr, s.db.Close())
}

// Set records the position of (client, filter, stream, part); the
// returned channel is closed once it is written.
func (s *store) Set(client, filter, stream string, part int32, next int64) <-chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	s.dirty[posKey{client, filter, stream, part}] = next
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return ch
}

// Flush waits until every position set before it is written.
func (s *store) Flush(ctx context.Context) error {
	ch := make(chan struct{})
	s.mu.Lock()
	if len(s.dirty) == 0 && len(s.waiters) == 0 {
		s.mu.Unlock()
		return nil
	}
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errors.New("session store closed")
	}
}

// loop writes dirty positions, one transaction per round; on an error it
// keeps them (newer values win) and tries again.
func (s *store) loop(ctx context.Context) {
	defer close(s.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		s.mu.Lock()
		d, w := s.dirty, s.waiters
		s.dirty, s.waiters = map[posKey]int64{}, nil
		s.mu.Unlock()
		if len(d) == 0 && len(w) == 0 {
			continue
		}
		err := s.write(ctx, d)
		if err == nil {
			for _, ch := range w {
				close(ch)
			}
			continue
		}
		s.log.Warn("write mqtt session positions", "err", err, "positions", len(d))
		s.mu.Lock()
		for k, v := range d {
			if _, newer := s.dirty[k]; !newer {
				s.dirty[k] = v
			}
		}
		s.waiters = append(w, s.waiters...)
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *store) write(ctx context.Context, d map[posKey]int64) error {
	if len(d) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	q := s.db.Q(`INSERT INTO tributary_mqtt_positions (client_id, filter, stream, part, next_offset, update_time)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (client_id, filter, stream, part) DO UPDATE SET
		next_offset = excluded.next_offset, update_time = excluded.update_time`)
	now := time.Now().UnixMilli()
	for k, v := range d {
		if _, err := tx.ExecContext(ctx, q, k.client, k.filter, k.stream, k.part, v, now); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.writes()
	return nil
}

// positions are a session's stored positions by filter, stream and
// partition.
type positions map[string]map[string]map[int32]int64

// Load returns the stored session of client (nil when there is none or
// it has expired) and its positions.
func (s *store) Load(ctx context.Context, client string) (*storedSession, positions, error) {
	var ss storedSession
	var subs string
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT principal, subscriptions, expiry, seen FROM tributary_mqtt_sessions
		WHERE client_id = ?`), client).Scan(&ss.Principal, &subs, &ss.Expiry, &ss.Seen)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if ss.Expiry >= 0 && time.UnixMilli(ss.Seen).Add(time.Duration(ss.Expiry)*time.Second).Before(time.Now()) {
		return nil, nil, s.Delete(ctx, client)
	}
	if err := json.Unmarshal([]byte(subs), &ss.Subs); err != nil {
		return nil, nil, fmt.Errorf("session %q: subscriptions: %w", client, err)
	}
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT filter, stream, part, next_offset FROM tributary_mqtt_positions WHERE client_id = ?`), client)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	pos := positions{}
	for rows.Next() {
		var f, st string
		var p int32
		var n int64
		if err := rows.Scan(&f, &st, &p, &n); err != nil {
			return nil, nil, err
		}
		if pos[f] == nil {
			pos[f] = map[string]map[int32]int64{}
		}
		if pos[f][st] == nil {
			pos[f][st] = map[int32]int64{}
		}
		pos[f][st][p] = n
	}
	return &ss, pos, rows.Err()
}

// Owner is the principal of client's stored session ("" when there is
// none or it has expired), read without touching anything: the owner is
// compared before a CONNECT ends, deletes or replaces a session.
func (s *store) Owner(ctx context.Context, client string) (string, error) {
	var owner string
	var expiry, seen int64
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT principal, expiry, seen FROM tributary_mqtt_sessions
		WHERE client_id = ?`), client).Scan(&owner, &expiry, &seen)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if expiry >= 0 && time.UnixMilli(seen).Add(time.Duration(expiry)*time.Second).Before(time.Now()) {
		return "", nil
	}
	return owner, nil
}

// Save writes a session's row (not its positions).
func (s *store) Save(ctx context.Context, client string, ss storedSession) error {
	subs, err := json.Marshal(ss.Subs)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_mqtt_sessions
		(client_id, principal, subscriptions, expiry, seen, update_time) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (client_id) DO UPDATE SET principal = excluded.principal, subscriptions = excluded.subscriptions,
		expiry = excluded.expiry, seen = excluded.seen, update_time = excluded.update_time`),
		client, ss.Principal, string(subs), ss.Expiry, ss.Seen, time.Now().UnixMilli())
	return err
}

// Touch sets seen of the named sessions to now.
func (s *store) Touch(ctx context.Context, clients []string) error {
	now := time.Now().UnixMilli()
	for _, c := range clients {
		if _, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE tributary_mqtt_sessions SET seen = ? WHERE client_id = ?`), now, c); err != nil {
			return err
		}
	}
	return nil
}

// SavePositions writes positions at once (a new subscription's start, so
// that a reconnect before anything is acknowledged resumes from there).
func (s *store) SavePositions(ctx context.Context, client, filter, stream string, pos map[int32]int64) error {
	for p, n := range pos {
		s.Set(client, filter, stream, p, n)
	}
	return s.Flush(ctx)
}

// DropFilter deletes the positions of one subscription of client.
func (s *store) DropFilter(ctx context.Context, client, filter string) error {
	s.mu.Lock()
	for k := range s.dirty {
		if k.client == client && k.filter == filter {
			delete(s.dirty, k)
		}
	}
	s.mu.Unlock()
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_mqtt_positions WHERE client_id = ? AND filter = ?`), client, filter)
	return err
}

// DropStream deletes the positions of one stream of one subscription of
// client (a plain filter's stream the principal may no longer read).
func (s *store) DropStream(ctx context.Context, client, filter, stream string) error {
	s.mu.Lock()
	for k := range s.dirty {
		if k.client == client && k.filter == filter && k.stream == stream {
			delete(s.dirty, k)
		}
	}
	s.mu.Unlock()
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_mqtt_positions WHERE client_id = ? AND filter = ? AND stream = ?`),
		client, filter, stream)
	return err
}

// Delete deletes client's session and positions.
func (s *store) Delete(ctx context.Context, client string) error {
	s.mu.Lock()
	for k := range s.dirty {
		if k.client == client {
			delete(s.dirty, k)
		}
	}
	s.mu.Unlock()
	if _, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_mqtt_positions WHERE client_id = ?`), client); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_mqtt_sessions WHERE client_id = ?`), client)
	return err
}

// Sweep deletes expired sessions (seen + expiry + slack in the past:
// slack covers a connected session's refresh interval) and positions of
// sessions that no longer exist; it returns how many sessions remain.
func (s *store) Sweep(ctx context.Context, slack time.Duration) (int, error) {
	now := time.Now().UnixMilli()
	if _, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_mqtt_sessions
		WHERE expiry >= 0 AND seen + expiry * 1000 + ? < ?`), slack.Milliseconds(), now); err != nil {
		return 0, err
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM tributary_mqtt_positions
		WHERE client_id NOT IN (SELECT client_id FROM tributary_mqtt_sessions)`); err != nil {
		return 0, err
	}
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tributary_mqtt_sessions`).Scan(&n)
	return n, err
}
