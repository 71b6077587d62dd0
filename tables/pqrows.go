package tables

import (
	"encoding/binary"
	"fmt"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/kbatch"
)

// Rows of a data file, as the column filler sees them.
//
// The filler (pqFiller.fill) turns each chunk of up to pqChunkRows rows
// into pqRows first, then fills the leaf columns from them column by
// column. A row comes either from a tributary.Record or, for a Kafka
// batch entry read from the WAL (tributary.BatchView), straight from the
// batch's bytes: key, value and header values alias them, header keys
// too (unsafe strings), and the rows and headers live in buffers the
// filler reuses from chunk to chunk — no allocation per record. Both
// sources give the same pqRow for the same record, so the file's bytes
// are the same whichever the records came in (TestParquetEntriesMatchRecords).

// pqRow is one row's envelope values.
type pqRow struct {
	partition                                int32
	offset, timestamp, prodTS                int64 // prodTS: the Kafka record timestamp (ms), 0 = none
	topic, source, clientID, node, principal string
	key, value                               []byte // key nil = null
	headers                                  []tributary.Header
}

// rowOf is the row of a record.
func rowOf(r *tributary.Record) pqRow {
	return pqRow{partition: r.Partition, offset: r.Offset, timestamp: r.Timestamp, prodTS: r.ProducerTimestamp,
		topic: r.Topic, source: r.Source, clientID: r.ClientID, node: r.Node, principal: r.Principal,
		key: r.Key, value: r.Value, headers: r.Headers}
}

// entryCursor is where the filler is in pqRows.ents: entry ent, its
// record i (an index into the batch), whose bytes start body, and the
// row number pos.
type entryCursor struct {
	ent, i int
	body   []byte
	pos    int
	open   bool // body and i are set for ents[ent]
}

// readEntries appends to f.rows the rows [lo, hi) of ents, which follow
// the rows read before.
func (f *pqFiller) readEntries(ents []tributary.Entry, lo, hi int) error {
	c := &f.cur
	if lo != c.pos {
		return fmt.Errorf("rows %d-%d read out of order (at row %d)", lo, hi, c.pos)
	}
	for c.pos < hi {
		if c.ent >= len(ents) {
			return fmt.Errorf("row %d past the entries' end", c.pos)
		}
		e := ents[c.ent]
		if e.Record != nil {
			f.rows = append(f.rows, rowOf(e.Record))
			c.pos++
			c.ent++
			continue
		}
		v := e.Batch
		if !c.open {
			c.body, c.i, c.open = v.Records[kbatch.HeaderLen:], 0, true
			for ; c.i < v.Skip; c.i++ { // records before the view: checked, skipped
				n, err := kbatch.ParseRecord(c.body, nil, int32(c.i), int(^uint32(0)>>1))
				if err != nil {
					return fmt.Errorf("batch at offset %d, record %d: %w", v.Offset-int64(v.Skip), c.i, err)
				}
				c.body = c.body[n:]
			}
		}
		firstTS := int64(binary.BigEndian.Uint64(v.Records[27:]))
		end := v.Skip + v.Count
		for ; c.i < end && c.pos < hi; c.i, c.pos = c.i+1, c.pos+1 {
			var kr kbatch.Record
			n, hs, err := kbatch.ParseRecordInPlace(c.body, &kr, int32(c.i), f.hdrs)
			if err != nil {
				return fmt.Errorf("batch at offset %d, record %d: %w", v.Offset-int64(v.Skip), c.i, err)
			}
			f.hdrs = hs
			c.body = c.body[n:]
			f.rows = append(f.rows, pqRow{partition: v.Partition, offset: v.Offset + int64(c.i-v.Skip), timestamp: v.Timestamp,
				prodTS: firstTS + kr.TimestampDelta, topic: v.Topic, source: v.Source, clientID: v.ClientID, node: v.Node,
				principal: v.Principal, key: kr.Key, value: kr.Value, headers: kr.Headers})
		}
		if c.i == end {
			c.ent, c.open = c.ent+1, false
		}
	}
	return nil
}

// CutEntryRuns is CutRuns for entries: a batch entry's records share one
// accept timestamp, so runs are cut between entries.
func CutEntryRuns(g Granularity, ents []tributary.Entry) [][]tributary.Entry {
	return cutRuns(ents, func(e tributary.Entry) int64 { return int64(g.Bucket(e.Timestamp())) })
}
