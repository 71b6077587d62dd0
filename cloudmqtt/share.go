package cloudmqtt

// Shared subscriptions ($share/<group>/<filter>) split a filter's rows
// among the group's members, each row to one member, whichever cloud
// server each member is connected to. The group's state is in the
// catalog database:
//
//	tributary_mqtt_share_heads(grp, filter, stream, part, next_offset)
//	tributary_mqtt_share_chunks(grp, filter, stream, part, last_offset,
//	                            first_offset, owner, lease_until)
//
// A member claims a chunk of shareChunk consecutive offsets of a partition
// at a time: in one transaction it moves the partition's head past the
// chunk (compare-and-swap on next_offset) and records the chunk with
// itself as owner and a lease. It delivers the chunk's matching rows; when
// every one is acknowledged the chunk is deleted and it claims the next.
// A chunk whose lease ran out (its member died, or held it
// unacknowledged for shareLease) is claimed by the next member that looks,
// from its first_offset; a member that disconnects hands its chunks back
// at once, shrunk to its first unacknowledged offset. So no row is lost,
// and a row is delivered twice only when its member lost the chunk before
// acknowledging it (up to a chunk after a kill -9 of a server).
//
// A new group starts at the stream-offset of the first member that
// claims (latest by default).

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/tributary-io/tributary/tables"
)

const (
	shareChunk = 32
	shareLease = 30 * time.Second
)

type shareKey struct {
	group, filter, stream string
	part                  int32
}

func createShareTables(db *tables.StateDB) error {
	for _, q := range []string{`CREATE TABLE IF NOT EXISTS tributary_mqtt_share_heads (
		grp TEXT NOT NULL, filter TEXT NOT NULL, stream TEXT NOT NULL, part ` + db.BigInt() + ` NOT NULL,
		next_offset ` + db.BigInt() + ` NOT NULL,
		PRIMARY KEY (grp, filter, stream, part))`,
		`CREATE TABLE IF NOT EXISTS tributary_mqtt_share_chunks (
		grp TEXT NOT NULL, filter TEXT NOT NULL, stream TEXT NOT NULL, part ` + db.BigInt() + ` NOT NULL,
		last_offset ` + db.BigInt() + ` NOT NULL, first_offset ` + db.BigInt() + ` NOT NULL,
		owner TEXT NOT NULL, lease_until ` + db.BigInt() + ` NOT NULL,
		PRIMARY KEY (grp, filter, stream, part, last_offset))`} {
		if _, err := db.Exec(q); err != nil {
			return err
		}
	}
	return nil
}

// claim gives owner a chunk of k's partition below end: one it holds
// already, else one whose lease expired, else a new one past the head
// (start gives a new group's first offset). ok false: nothing to claim.
func (s *store) claim(ctx context.Context, k shareKey, owner string, end int64, start func() (int64, error)) (first, last int64, ok bool, err error) {
	db := s.db
	now := time.Now()
	lease := now.Add(shareLease).UnixMilli()
	where := `grp = ? AND filter = ? AND stream = ? AND part = ?`
	args := []any{k.group, k.filter, k.stream, k.part}
	// 1. A chunk this member holds (a resumed session, a retry).
	err = db.QueryRowContext(ctx, db.Q(`SELECT first_offset, last_offset FROM tributary_mqtt_share_chunks WHERE `+where+
		` AND owner = ? ORDER BY last_offset LIMIT 1`), append(args, owner)...).Scan(&first, &last)
	if err == nil {
		_, err = db.ExecContext(ctx, db.Q(`UPDATE tributary_mqtt_share_chunks SET lease_until = ? WHERE `+where+` AND last_offset = ?`),
			append(append([]any{lease}, args...), last)...)
		return first, last, err == nil, err
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, err
	}
	for attempt := 0; attempt < 10; attempt++ {
		// 2. A chunk whose member is gone.
		var was int64
		err = db.QueryRowContext(ctx, db.Q(`SELECT first_offset, last_offset, lease_until FROM tributary_mqtt_share_chunks WHERE `+where+
			` AND lease_until < ? ORDER BY last_offset LIMIT 1`), append(args, now.UnixMilli())...).Scan(&first, &last, &was)
		if err == nil {
			res, err := db.ExecContext(ctx, db.Q(`UPDATE tributary_mqtt_share_chunks SET owner = ?, lease_until = ? WHERE `+where+
				` AND last_offset = ? AND lease_until = ?`), append(append([]any{owner, lease}, args...), last, was)...)
			if err != nil {
				return 0, 0, false, err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				return first, last, true, nil
			}
			continue // another member took it first
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, 0, false, err
		}
		// 3. A new chunk past the head.
		var next int64
		err = db.QueryRowContext(ctx, db.Q(`SELECT next_offset FROM tributary_mqtt_share_heads WHERE `+where), args...).Scan(&next)
		if errors.Is(err, sql.ErrNoRows) {
			n, err := start()
			if err != nil {
				return 0, 0, false, err
			}
			if _, err := db.ExecContext(ctx, db.Q(`INSERT INTO tributary_mqtt_share_heads (grp, filter, stream, part, next_offset)
				VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`), append(args, n)...); err != nil {
				return 0, 0, false, err
			}
			continue
		}
		if err != nil {
			return 0, 0, false, err
		}
		if next >= end {
			return 0, 0, false, nil
		}
		last = min(next+shareChunk, end) - 1
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, 0, false, err
		}
		res, err := tx.ExecContext(ctx, db.Q(`UPDATE tributary_mqtt_share_heads SET next_offset = ? WHERE `+where+` AND next_offset = ?`),
			append(append([]any{last + 1}, args...), next)...)
		if err != nil {
			tx.Rollback()
			return 0, 0, false, err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			tx.Rollback()
			continue // another member moved the head
		}
		if _, err := tx.ExecContext(ctx, db.Q(`INSERT INTO tributary_mqtt_share_chunks
			(grp, filter, stream, part, last_offset, first_offset, owner, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
			append(args, last, next, owner, lease)...); err != nil {
			tx.Rollback()
			return 0, 0, false, err
		}
		if err := tx.Commit(); err != nil {
			return 0, 0, false, err
		}
		return next, last, true, nil
	}
	return 0, 0, false, nil
}

// chunkDone deletes owner's chunk ending at last: every row acknowledged.
func (s *store) chunkDone(ctx context.Context, k shareKey, owner string, last int64) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_mqtt_share_chunks
		WHERE grp = ? AND filter = ? AND stream = ? AND part = ? AND last_offset = ? AND owner = ?`),
		k.group, k.filter, k.stream, k.part, last, owner)
	return err
}

// release hands owner's chunk ending at last back to the group, from
// first (its first unacknowledged offset); a chunk with nothing left is
// deleted.
func (s *store) release(ctx context.Context, k shareKey, owner string, first, last int64) error {
	if first > last {
		return s.chunkDone(ctx, k, owner, last)
	}
	_, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE tributary_mqtt_share_chunks SET first_offset = ?, lease_until = 0
		WHERE grp = ? AND filter = ? AND stream = ? AND part = ? AND last_offset = ? AND owner = ?`),
		first, k.group, k.filter, k.stream, k.part, last, owner)
	return err
}

// shareCursor is su's cursor of partition p within a claimed chunk, or
// nil when there is nothing to deliver now (no chunk to claim, or the
// current one waits for acknowledgements).
func (se *session) shareCursor(ctx context.Context, su *sub, p int32, end int64) *cursor {
	k := shareKey{su.t.Share, su.filter, su.t.Stream, p}
	st := se.s.store
	se.mu.Lock()
	c := su.parts[p]
	if c != nil && c.limit > 0 {
		if c.next < c.limit {
			se.mu.Unlock()
			return c
		}
		if len(c.unacked) > 0 {
			se.mu.Unlock()
			return nil
		}
		last := c.limit - 1
		c.limit = 0
		se.mu.Unlock()
		if err := st.chunkDone(ctx, k, se.id, last); err != nil {
			se.s.log.Warn("cloud mqtt: shared chunk done", "client", se.id, "err", err)
		}
	} else {
		se.mu.Unlock()
	}
	first, last, ok, err := st.claim(ctx, k, se.id, end, func() (int64, error) {
		return startOffset(ctx, se.s.r, su.t.Stream, p, su.start)
	})
	if err != nil {
		se.s.log.Warn("cloud mqtt: claim shared chunk", "client", se.id, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	c = &cursor{next: first, limit: last + 1, saved: -1}
	se.mu.Lock()
	su.parts[p] = c
	se.mu.Unlock()
	return c
}

// releaseShares hands the chunks of subs back to their groups.
func (se *session) releaseShares(subs []*sub) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, su := range subs {
		if su.t.Share == "" {
			continue
		}
		se.mu.Lock()
		type held struct {
			p           int32
			first, last int64
		}
		var hs []held
		for p, c := range su.parts {
			if c.limit > 0 {
				hs = append(hs, held{p, c.durable(), c.limit - 1})
			}
		}
		se.mu.Unlock()
		for _, h := range hs {
			if err := se.s.store.release(ctx, shareKey{su.t.Share, su.filter, su.t.Stream, h.p}, se.id, h.first, h.last); err != nil {
				se.s.log.Warn("cloud mqtt: release shared chunk", "client", se.id, "err", err)
			}
		}
	}
}
