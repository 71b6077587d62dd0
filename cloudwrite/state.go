package cloudwrite

// The sequencing state, in the state database the cloud servers share
// (tables.OpenStateDB: SQLite for one server, PostgreSQL for many):
//
//	tributary_cw_partitions(stream, partition, next_offset)
//	    -- the next offset of every cloud-produced partition
//	tributary_cw_ranges(stream, partition, first_offset, end_offset,
//	                    object, pos, len, sequenced)
//	    -- the sequenced segments: offsets [first, end) are the records
//	    -- of the segment at object[pos:pos+len]
//	tributary_cw_objects(object, server, sequenced, drained)
//	    -- every sequenced WAL object (the orphan sweep spares them);
//	    -- drained: when it was first seen with no range left
//	tributary_cw_producers(stream, partition, producer_id, epoch,
//	                       first_seq, last_seq, first_offset)
//	    -- each idempotent producer's last sequenced run per partition
//	tributary_cw_named_producers(stream, partition, name, first_seq,
//	                             last_seq, first_offset)
//	    -- the same for each named producer (Pulsar: sequence ids grow,
//	    -- a resend at or below the last is a duplicate)
//	tributary_cw_producer_batches(stream, partition, producer_id, epoch,
//	                              first_seq, last_seq, first_offset)
//	    -- its last ProducerBatches batches per partition, as Kafka keeps:
//	    -- a producer has that many in flight, all retried when the
//	    -- server that sequenced them died before answering
//	tributary_cw_leases(name, holder, expires)
//	    -- the table jobs' leases (commit.go)
//
// Sequence is ONE transaction per object. The segments are taken in
// (stream, partition) order, submission order within a partition, so
// that two servers lock partitions in the same order and never deadlock;
// each partition's row is locked first (an upsert that changes nothing,
// which on PostgreSQL takes the row lock, on SQLite the transaction holds
// the database), then each segment is checked against its producer's
// state and given the partition's next offsets. Offsets are therefore
// dense per partition whatever number of servers sequence at once: a
// transaction that commits took them all, one that rolls back took none.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cloudwrite/wire"
	"github.com/tributary-io/tributary/tables"
)

// Errors of a segment that sequencing refused; nothing of it is visible.
var (
	// ErrProducerFenced: the producer's epoch is older than the one
	// already sequenced for the partition (Kafka INVALID_PRODUCER_EPOCH).
	ErrProducerFenced = errors.New("cloudwrite: producer epoch fenced")
	// ErrOutOfOrder: the batch's first sequence does not follow the
	// producer's last sequenced one (Kafka OUT_OF_ORDER_SEQUENCE_NUMBER).
	ErrOutOfOrder = errors.New("cloudwrite: out of order sequence")
	// ErrPredecessorFailed: the submission this one follows was not
	// sequenced (tributary.ErrPredecessorFailed).
	ErrPredecessorFailed = tributary.ErrPredecessorFailed
)

// State is the sequencing state in the state database; safe for
// concurrent use.
type State struct {
	db *tables.StateDB
}

// OpenState opens (and creates if missing) the tables of the state
// database uri ("sqlite:///path", a .db path or postgres://).
func OpenState(uri string) (*State, error) {
	db, err := tables.OpenStateDB(uri)
	if err != nil {
		return nil, fmt.Errorf("open cloud write state: %w", err)
	}
	s := &State{db: db}
	if err := s.create(); err != nil {
		db.Close()
		return nil, fmt.Errorf("create cloud write state: %w", err)
	}
	return s, nil
}

func (s *State) create() error {
	bi := s.db.BigInt()
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS tributary_cw_partitions (stream TEXT NOT NULL, partition INTEGER NOT NULL,
			next_offset ` + bi + ` NOT NULL, PRIMARY KEY (stream, partition))`,
		`CREATE TABLE IF NOT EXISTS tributary_cw_ranges (stream TEXT NOT NULL, partition INTEGER NOT NULL,
			first_offset ` + bi + ` NOT NULL, end_offset ` + bi + ` NOT NULL, object TEXT NOT NULL,
			pos ` + bi + ` NOT NULL, len ` + bi + ` NOT NULL, sequenced ` + bi + ` NOT NULL,
			PRIMARY KEY (stream, partition, first_offset))`,
		`CREATE INDEX IF NOT EXISTS tributary_cw_ranges_object ON tributary_cw_ranges (object)`,
		`CREATE TABLE IF NOT EXISTS tributary_cw_objects (object TEXT NOT NULL PRIMARY KEY, server TEXT NOT NULL,
			sequenced ` + bi + ` NOT NULL, drained ` + bi + ` NOT NULL DEFAULT 0)`,
		`CREATE TABLE IF NOT EXISTS tributary_cw_producers (stream TEXT NOT NULL, partition INTEGER NOT NULL,
			producer_id ` + bi + ` NOT NULL, epoch INTEGER NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
			first_offset ` + bi + ` NOT NULL, PRIMARY KEY (stream, partition, producer_id))`,
		`CREATE TABLE IF NOT EXISTS tributary_cw_named_producers (stream TEXT NOT NULL, partition INTEGER NOT NULL,
			name TEXT NOT NULL, first_seq ` + bi + ` NOT NULL, last_seq ` + bi + ` NOT NULL, first_offset ` + bi + ` NOT NULL,
			PRIMARY KEY (stream, partition, name))`,
		`CREATE TABLE IF NOT EXISTS tributary_cw_producer_batches (stream TEXT NOT NULL, partition INTEGER NOT NULL,
			producer_id ` + bi + ` NOT NULL, epoch INTEGER NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
			first_offset ` + bi + ` NOT NULL, PRIMARY KEY (stream, partition, producer_id, first_offset))`,
		`CREATE TABLE IF NOT EXISTS tributary_cw_leases (name TEXT NOT NULL PRIMARY KEY, holder TEXT NOT NULL,
			expires ` + bi + ` NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS tributary_cw_ids (name TEXT NOT NULL PRIMARY KEY, next_id ` + bi + ` NOT NULL)`,
	} {
		if _, err := s.db.Exec(q); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the database.
func (s *State) Close() error { return s.db.Close() }

// Postgres tells whether the state is in PostgreSQL.
func (s *State) Postgres() bool { return s.db.Postgres }

// Outcome is what sequencing decided for one segment.
type Outcome struct {
	First     int64 // offset of the segment's first record
	Duplicate bool  // an idempotent retry of a sequenced batch: First is its original offset, nothing new is visible
	Err       error // ErrProducerFenced, ErrOutOfOrder: refused, nothing visible
}

// Refused, as a segment's after (Sequence), refuses it: the submission it
// follows was not sequenced.
const Refused = -2

// Sequence records object's segments (refs[i] is segs[i]'s place) in one
// transaction and returns each segment's outcome. On an error nothing is
// recorded and no offset is taken. after, when given, names for each
// segment the index of the segment of this object it follows (-1: none;
// Refused: one not sequenced): a segment whose predecessor is refused
// is refused with an error wrapping ErrPredecessorFailed. (A
// predecessor of another partition is decided first only when it sorts
// first; of the front doors, only idempotent Kafka producers follow, and
// within their partition.)
func (s *State) Sequence(ctx context.Context, object, server string, segs []*wire.Segment, refs []wire.SegmentRef, after ...int) ([]Outcome, error) {
	order := make([]int, len(segs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := segs[order[a]], segs[order[b]]
		if x.Stream != y.Stream {
			return x.Stream < y.Stream
		}
		return x.Partition < y.Partition
	})
	out := make([]Outcome, len(segs))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := time.Now().UnixMicro()
	type pk struct {
		stream string
		p      int32
	}
	next := map[pk]int64{}
	decided := make([]bool, len(segs))
	for _, i := range order {
		sg := segs[i]
		decided[i] = true
		if len(after) > i && (after[i] == Refused || after[i] >= 0 && decided[after[i]] && out[after[i]].Err != nil) {
			out[i] = Outcome{Err: fmt.Errorf("%w: %s/%d", ErrPredecessorFailed, sg.Stream, sg.Partition)}
			continue
		}
		k := pk{sg.Stream, sg.Partition}
		if _, ok := next[k]; !ok {
			// Lock the partition's row (creating it at 0).
			var n int64
			err := tx.QueryRowContext(ctx, s.db.Q(`INSERT INTO tributary_cw_partitions (stream, partition, next_offset) VALUES (?, ?, 0)
				ON CONFLICT (stream, partition) DO UPDATE SET next_offset = tributary_cw_partitions.next_offset
				RETURNING next_offset`), sg.Stream, sg.Partition).Scan(&n)
			if err != nil {
				return nil, fmt.Errorf("sequence %s: lock partition %s/%d: %w", object, sg.Stream, sg.Partition, err)
			}
			next[k] = n
		}
		cnt := int64(len(sg.Records))
		if sg.ProducerID >= 0 {
			o, done, err := s.checkProducer(ctx, tx, sg)
			if err != nil {
				return nil, fmt.Errorf("sequence %s: %w", object, err)
			}
			if done {
				out[i] = o
				continue
			}
		}
		if sg.Dedup != nil {
			o, done, err := s.checkNamed(ctx, tx, sg)
			if err != nil {
				return nil, fmt.Errorf("sequence %s: %w", object, err)
			}
			if done {
				out[i] = o
				continue
			}
		}
		first := next[k]
		next[k] = first + cnt
		if cnt > 0 {
			if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_cw_ranges
				(stream, partition, first_offset, end_offset, object, pos, len, sequenced) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
				sg.Stream, sg.Partition, first, first+cnt, object, refs[i].Pos, refs[i].Len, now); err != nil {
				return nil, fmt.Errorf("sequence %s: record range: %w", object, err)
			}
		}
		if sg.ProducerID >= 0 && cnt > 0 {
			if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_cw_producers
				(stream, partition, producer_id, epoch, first_seq, last_seq, first_offset) VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (stream, partition, producer_id) DO UPDATE SET epoch = excluded.epoch,
				first_seq = excluded.first_seq, last_seq = excluded.last_seq, first_offset = excluded.first_offset`),
				sg.Stream, sg.Partition, sg.ProducerID, sg.ProducerEpoch, sg.BaseSequence,
				wire.AddSeq(sg.BaseSequence, int32(cnt-1)), first); err != nil {
				return nil, fmt.Errorf("sequence %s: producer state: %w", object, err)
			}
			if err := s.keepBatch(ctx, tx, sg, first); err != nil {
				return nil, fmt.Errorf("sequence %s: producer batches: %w", object, err)
			}
		}
		if d := sg.Dedup; d != nil && cnt > 0 {
			if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_cw_named_producers
				(stream, partition, name, first_seq, last_seq, first_offset) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (stream, partition, name) DO UPDATE SET first_seq = excluded.first_seq,
				last_seq = excluded.last_seq, first_offset = excluded.first_offset`),
				sg.Stream, sg.Partition, d.Producer, d.First, d.Last, first); err != nil {
				return nil, fmt.Errorf("sequence %s: named producer state: %w", object, err)
			}
		}
		out[i] = Outcome{First: first}
	}
	for k, n := range next {
		if _, err := tx.ExecContext(ctx, s.db.Q(`UPDATE tributary_cw_partitions SET next_offset = ? WHERE stream = ? AND partition = ?`),
			n, k.stream, k.p); err != nil {
			return nil, fmt.Errorf("sequence %s: advance %s/%d: %w", object, k.stream, k.p, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_cw_objects (object, server, sequenced) VALUES (?, ?, ?)`),
		object, server, now); err != nil {
		return nil, fmt.Errorf("sequence %s: record object: %w", object, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sequence %s: commit: %w", object, err)
	}
	return out, nil
}

// checkProducer decides an idempotent producer's segment against its
// last sequenced run of the partition (the partition's row is locked):
// done with an outcome for a retry or a refusal, not done for a batch to
// sequence. A producer the state does not know is accepted at any
// sequence, as Kafka does once a producer's state has expired.
func (s *State) checkProducer(ctx context.Context, tx *sql.Tx, sg *wire.Segment) (Outcome, bool, error) {
	var epoch, firstSeq, lastSeq int32
	var firstOff int64
	err := tx.QueryRowContext(ctx, s.db.Q(`SELECT epoch, first_seq, last_seq, first_offset FROM tributary_cw_producers
		WHERE stream = ? AND partition = ? AND producer_id = ?`), sg.Stream, sg.Partition, sg.ProducerID).
		Scan(&epoch, &firstSeq, &lastSeq, &firstOff)
	if errors.Is(err, sql.ErrNoRows) {
		return Outcome{}, false, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("producer state: %w", err)
	}
	last := wire.AddSeq(sg.BaseSequence, int32(max(len(sg.Records), 1)-1))
	switch e := int32(sg.ProducerEpoch); {
	case e < epoch:
		return Outcome{Err: ErrProducerFenced}, true, nil
	case e > epoch:
		if sg.BaseSequence != 0 {
			return Outcome{Err: ErrOutOfOrder}, true, nil
		}
		return Outcome{}, false, nil
	case sg.BaseSequence == firstSeq && last == lastSeq:
		return Outcome{First: firstOff, Duplicate: true}, true, nil
	case sg.BaseSequence == wire.AddSeq(lastSeq, 1):
		return Outcome{}, false, nil
	}
	// A retry of one of the producer's last batches but the last.
	err = tx.QueryRowContext(ctx, s.db.Q(`SELECT first_offset FROM tributary_cw_producer_batches
		WHERE stream = ? AND partition = ? AND producer_id = ? AND epoch = ? AND first_seq = ? AND last_seq = ?`),
		sg.Stream, sg.Partition, sg.ProducerID, sg.ProducerEpoch, sg.BaseSequence, last).Scan(&firstOff)
	switch {
	case err == nil:
		return Outcome{First: firstOff, Duplicate: true}, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Outcome{}, false, fmt.Errorf("producer batches: %w", err)
	}
	return Outcome{Err: ErrOutOfOrder}, true, nil
}

// checkNamed decides a named producer's segment (tributary.Dedup)
// against its last sequenced write of the partition (the partition's
// row is locked): a duplicate when its last sequence id is at or below
// the stored one — with the original offset when it is a resend of
// that write, else First -1 —, not done for a write to sequence.
func (s *State) checkNamed(ctx context.Context, tx *sql.Tx, sg *wire.Segment) (Outcome, bool, error) {
	var firstSeq, lastSeq, firstOff int64
	err := tx.QueryRowContext(ctx, s.db.Q(`SELECT first_seq, last_seq, first_offset FROM tributary_cw_named_producers
		WHERE stream = ? AND partition = ? AND name = ?`), sg.Stream, sg.Partition, sg.Dedup.Producer).
		Scan(&firstSeq, &lastSeq, &firstOff)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Outcome{}, false, nil
	case err != nil:
		return Outcome{}, false, fmt.Errorf("named producer state: %w", err)
	case sg.Dedup.Last > lastSeq:
		return Outcome{}, false, nil
	case sg.Dedup.First == firstSeq && sg.Dedup.Last == lastSeq:
		return Outcome{First: firstOff, Duplicate: true}, true, nil
	}
	return Outcome{First: -1, Duplicate: true}, true, nil
}

// LastSequence returns the last sequence id sequenced for the named
// producer on a partition, or -1 if none (a Pulsar producer resumes
// after it).
func (s *State) LastSequence(ctx context.Context, stream string, p int32, producer string) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT last_seq FROM tributary_cw_named_producers
		WHERE stream = ? AND partition = ? AND name = ?`), stream, p, producer).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, nil
	}
	return n, err
}

// ProducerBatches is how many of an idempotent producer's last batches
// per partition a retry is recognised among (Kafka's five in flight).
const ProducerBatches = 5

// keepBatch records sg, sequenced at first, among its producer's last
// ProducerBatches batches of the partition, forgetting older ones.
func (s *State) keepBatch(ctx context.Context, tx *sql.Tx, sg *wire.Segment, first int64) error {
	if _, err := tx.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_cw_producer_batches
		(stream, partition, producer_id, epoch, first_seq, last_seq, first_offset) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		sg.Stream, sg.Partition, sg.ProducerID, sg.ProducerEpoch, sg.BaseSequence,
		wire.AddSeq(sg.BaseSequence, int32(len(sg.Records)-1)), first); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_cw_producer_batches
		WHERE stream = ? AND partition = ? AND producer_id = ? AND first_offset <= (
			SELECT first_offset FROM tributary_cw_producer_batches WHERE stream = ? AND partition = ? AND producer_id = ?
			ORDER BY first_offset DESC LIMIT 1 OFFSET ?)`),
		sg.Stream, sg.Partition, sg.ProducerID, sg.Stream, sg.Partition, sg.ProducerID, ProducerBatches)
	return err
}

// Range is one sequenced segment.
type Range struct {
	Stream      string
	Partition   int32
	First, End  int64 // offsets [First, End)
	Object      string
	Ref         wire.SegmentRef
	SequencedAt time.Time
}

// Ranges returns the sequenced ranges of a partition that end after
// from, in offset order, at most limit of them.
func (s *State) Ranges(ctx context.Context, stream string, p int32, from int64, limit int) ([]Range, error) {
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT first_offset, end_offset, object, pos, len, sequenced FROM tributary_cw_ranges
		WHERE stream = ? AND partition = ? AND end_offset > ? ORDER BY first_offset LIMIT ?`), stream, p, from, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Range
	for rows.Next() {
		r := Range{Stream: stream, Partition: p}
		var seq int64
		if err := rows.Scan(&r.First, &r.End, &r.Object, &r.Ref.Pos, &r.Ref.Len, &seq); err != nil {
			return nil, err
		}
		r.SequencedAt = time.UnixMicro(seq)
		out = append(out, r)
	}
	return out, rows.Err()
}

// End returns a partition's next offset (0 if nothing was sequenced)
// and whether the partition has any.
func (s *State) End(ctx context.Context, stream string, p int32) (int64, bool, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT next_offset FROM tributary_cw_partitions WHERE stream = ? AND partition = ?`),
		stream, p).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// PartitionEnd is one cloud-produced partition and its next offset.
type PartitionEnd struct {
	Stream    string
	Partition int32
	End       int64
}

// Partitions lists every partition with sequenced records.
func (s *State) Partitions(ctx context.Context) ([]PartitionEnd, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT stream, partition, next_offset FROM tributary_cw_partitions ORDER BY stream, partition`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PartitionEnd
	for rows.Next() {
		var p PartitionEnd
		if err := rows.Scan(&p.Stream, &p.Partition, &p.End); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Sequenced tells whether object was sequenced (and not yet collected).
func (s *State) Sequenced(ctx context.Context, object string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.db.Q(`SELECT COUNT(*) FROM tributary_cw_objects WHERE object = ?`), object).Scan(&n)
	return n > 0, err
}

// NextID returns a new number of the counter name, never returned
// before by any server sharing the database.
func (s *State) NextID(ctx context.Context, name string, start int64) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, s.db.Q(`INSERT INTO tributary_cw_ids (name, next_id) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET next_id = tributary_cw_ids.next_id + 1 RETURNING next_id`), name, start).Scan(&n)
	return n, err
}

// Forget deletes the ranges of a partition ending at or below mark that
// were sequenced before before.
func (s *State) Forget(ctx context.Context, stream string, p int32, mark int64, before time.Time) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_cw_ranges WHERE stream = ? AND partition = ? AND end_offset <= ? AND sequenced < ?`),
		stream, p, mark, before.UnixMicro())
	return err
}

// Collectable lists objects that have had no range left for grace:
// first it notes the time on every object newly without ranges, then it
// returns those noted before now-grace, so that a reader that listed a
// range just before it was forgotten still finds its object.
func (s *State) Collectable(ctx context.Context, grace time.Duration, limit int) ([]string, error) {
	now := time.Now()
	if _, err := s.db.ExecContext(ctx, s.db.Q(`UPDATE tributary_cw_objects SET drained = ? WHERE drained = 0
		AND NOT EXISTS (SELECT 1 FROM tributary_cw_ranges r WHERE r.object = tributary_cw_objects.object)`), now.UnixMicro()); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.db.Q(`SELECT object FROM tributary_cw_objects WHERE drained > 0 AND drained < ? LIMIT ?`),
		now.Add(-grace).UnixMicro(), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// DropObject forgets a collected object.
func (s *State) DropObject(ctx context.Context, object string) error {
	_, err := s.db.ExecContext(ctx, s.db.Q(`DELETE FROM tributary_cw_objects WHERE object = ?`), object)
	return err
}

// Acquire takes or renews the lease name for holder for d, and reports
// whether holder has it.
func (s *State) Acquire(ctx context.Context, name, holder string, d time.Duration) (bool, error) {
	now := time.Now()
	res, err := s.db.ExecContext(ctx, s.db.Q(`INSERT INTO tributary_cw_leases (name, holder, expires) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
		WHERE tributary_cw_leases.holder = excluded.holder OR tributary_cw_leases.expires < ?`),
		name, holder, now.Add(d).UnixMicro(), now.UnixMicro())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
