// Package delta is a Delta Lake transaction log, written from the
// protocol specification (delta-io/delta PROTOCOL.md): the actions
// (protocol, metaData, add, remove, txn, commitInfo; DecodeCommit), log
// replay from JSON commits and Parquet checkpoints with _last_checkpoint
// (Table.Snapshot), commits as a put-if-absent of the next
// 00000000000000000000.json (Table.Commit, on a Store: DirStore links a
// complete file on a local folder, BlobStore uses the cloud stores'
// conditional writes), the idempotent append with a txn per appId and a
// checkpoint every N versions (Table.Append, writer.go's invariants), the
// schema translated from Iceberg (FromIceberg) and a reader of the live
// files' rows (Table.Rows).
//
// What it implements: reader version 1 (and 2, and 3 with harmless
// features, when column mapping is off), writer version 2. Tables that
// need more (deletion vectors, column mapping by name or id, v2
// checkpoints, writer features) are refused with ErrUnsupported; a log
// that does not parse or breaks the protocol's rules is ErrCorrupt.
//
// The reader is proven against tables Spark, Databricks and delta-rs
// wrote (tables/testdata/delta/NOTES.md) before it judges the logs
// Tributary writes (tables/deltalog.go).
package delta
