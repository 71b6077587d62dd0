package tributary

// Entry is one entry of a partition as the WAL stores it: a record, or a
// Kafka record batch read in place (wal.ReadEntriesInto). Readers that can
// walk a batch's bytes (the uplink's Parquet writer) use entries to avoid
// one Record object per Kafka record.
type Entry struct {
	Record *Record    // a record entry (one offset), or nil
	Batch  *BatchView // else a batch entry
}

// First is the offset of the entry's first record.
func (e Entry) First() int64 {
	if e.Record != nil {
		return e.Record.Offset
	}
	return e.Batch.Offset
}

// Len is the number of records (offsets) of the entry.
func (e Entry) Len() int {
	if e.Record != nil {
		return 1
	}
	return e.Batch.Count
}

// Epoch is the ownership epoch the entry was accepted at.
func (e Entry) Epoch() int64 {
	if e.Record != nil {
		return e.Record.Epoch
	}
	return e.Batch.Epoch
}

// Timestamp is the accept timestamp of the entry's records (unix micros).
func (e Entry) Timestamp() int64 {
	if e.Record != nil {
		return e.Record.Timestamp
	}
	return e.Batch.Timestamp
}

// BatchView is a run of consecutive records stored as one uncompressed
// Kafka record batch (message format v2), with the envelope its records
// share. Its records are Records' Skip-th to Skip+Count-1-th; the first
// of them is at Offset. Records aliases what the reader was given and
// must not be changed; the records' bytes are checked only as far as the
// WAL's checksum goes, so a reader parsing them (internal/kbatch) still
// returns errors, never panics.
type BatchView struct {
	Stream, Topic, Source, ClientID, Node, Principal string
	Partition                                        int32
	Epoch                                            int64
	Timestamp                                        int64 // accept time, unix micros, of every record
	Offset                                           int64 // of record Skip
	Skip, Count                                      int
	Records                                          []byte // the whole stored batch (base offset Offset-Skip)
}

// Trim returns v without its records from offset to on (to > v.Offset).
func (v *BatchView) Trim(to int64) *BatchView {
	if to >= v.Offset+int64(v.Count) {
		return v
	}
	c := *v
	c.Count = int(to - v.Offset)
	return &c
}
