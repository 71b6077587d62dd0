// Package cloudwrite is the write path of the stateless cloud servers:
// producers on `tributary cloud` write into the same stream tables as the
// edge nodes, leaderless and diskless (DESIGN.md "The cloud write path",
// after WarpStream and KIP-1150).
//
// # Invariants
//
//  1. Durable and sequenced before answered. A submission (Writer.Submit:
//     one partition's records of one produce request, a wire.Segment) is
//     buffered with those of every other connection of the server for at
//     most FlushInterval or FlushBytes, written as ONE WAL object to the
//     warehouse store (Store.Put, fsynced on file://), then sequenced in
//     ONE transaction of the state database (State.Sequence): every
//     partition's next offsets are taken and the object's ranges
//     recorded. Only then is the submission answered with its offset.
//  2. Dense, never twice. Offsets come only from the state database's
//     per-partition counter, taken under the partition row's lock in the
//     transaction that records the range: two servers sequencing one
//     partition at once interleave their ranges, never leave a gap or
//     assign an offset twice. An object put but never sequenced (the
//     server died between the two, or the database refused) is never
//     read: nothing names it; the Committer's orphan sweep deletes it
//     after OrphanGrace, and a writer never sequences an object older than
//     half of that.
//  3. Idempotent producers land once, on any server. The transaction
//     checks each idempotent producer's segment against its last
//     sequenced batches of the partition (ProducerBatches, Kafka's five
//     in flight), kept in the same database: a retry (to this or another
//     server) of any of them is answered with the original offset and
//     takes none; an older epoch is fenced; a gap in sequences is out of
//     order.
//  4. Into the tables exactly once. The Committer (one server per table
//     at a time, by a lease in the state database) reads the sequenced
//     records beyond a table's marks, writes Parquet files and commits
//     them with the new marks (tables.CommitAppend, the uplink's commit):
//     a commit that finds the mark already past its records is a no-op,
//     so two committers (a lapsed lease) never commit an offset twice.
//     Ranges the table covers are forgotten after Grace, and an object
//     with no range left is deleted after Grace more.
//  5. Readers see records at once. Tail serves the offsets beyond a
//     table's mark from the sequenced WAL objects, dense from the offset
//     asked for; what it no longer holds is in the table.
//  6. Bounded memory. A server holds at most MaxBufferedBytes unanswered;
//     a submission beyond it is refused at once (ErrBackpressure,
//     retriable), every decoder bounds what an object may claim.
//
// Cloud-produced partitions are allocated through the catalog like the
// edges' (tables.AllocatePartition) to the node id CommitConfig.Owner
// ("cloud"), so their numbers never collide with an edge node's; any cloud
// server accepts any of them.
//
// # Outline
//
// Package wire is the WAL object format (self-describing, every segment
// checksummed and readable alone); state.go the state database's tables
// and the sequencing transaction; writer.go the batcher and flush
// pipeline (puts in parallel, sequencing in cut order, so a producer's
// batches stay in order); tail.go the reader of sequenced records;
// commit.go the table job and the collection of WAL objects; store.go the
// Store on the warehouse bucket; appender.go the write contract
// (tributary.Appender) over the Writer, which the cloud server's Kafka,
// HTTP and gRPC produce servers use as the edge's use package ingest.
package cloudwrite
