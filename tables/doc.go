// Package tables is streams as Iceberg tables: the envelope schema and its
// evolution (columns added since the first release, such as principal,
// reach existing tables by an Iceberg schema update: evolve.go), typed
// columns from JSON payloads (inferred or declared, added by the same kind
// of update, with an event_time column and spec: typedcols.go; the rules
// are package typed's) and the dead-letter tables (dlq.go), catalog
// access, partition allocation and ownership (owners, epochs, TakeOver and
// fencing: see ownership.go), the data file layout every writer shares
// (which records share a file and what it is called: CutRuns by the
// table's Granularity, DataFileURL, which names the file's Origin: the
// node that committed it and its records' epoch; layout.go), the exactly-once append
// (CommitAppend with the high-water marks), offset-range readers (Reader, reader.go: the
// consume side of the Kafka and Pulsar servers, with its metadata,
// file-index and row-group caches) and table maintenance.
//
// Data files are written with parquet-go (WriteParquet, WriteParquetShaped,
// WriteDeadLetters; ParquetOptions for the zstd level): the Parquet schema
// is derived from the table's Iceberg schema with a field id on every node,
// and leaf columns are filled straight from the records, without Arrow.
// Arrow (arrow-go's pqarrow) is only on the read side, where iceberg-go and
// the Reader decode files. pqwrite.go says how a file is laid out.
//
// A stream that commits every second gains 86,400 snapshots, data files and
// manifests a day. Maintenance keeps a table's metadata and file count
// bounded while it runs for months.
//
// # Maintenance: invariants
//
//  1. No row is lost or duplicated by maintenance. Compaction replaces a set
//     of input files by one output file per partition bucket (CutRuns: one,
//     unless the table's granularity became finer), together holding
//     exactly their rows (read back, counted and checked contiguous before
//     the commit), in ONE replace commit that removes exactly those inputs.
//     The commit asserts the branch head it was planned on; appends that
//     land between planning and commit make it fail, and it is re-planned
//     on the reloaded table, which keeps those appends (they are not
//     inputs). An input that is gone when re-planned aborts the group: the
//     output is then never committed (an orphan).
//  2. High-water marks survive. The marks are table properties
//     (tributary.hwm.<partition>); snapshot expiry, manifest rewrites and
//     replace commits never touch properties, and the lease properties are
//     written next to them without removing any key.
//  3. One maintainer per table (the lease, below), across processes.
//  4. Orphans only past the grace period. Orphan cleanup deletes a file below
//     the table location only if no snapshot of the current metadata
//     references it AND its modification time is older than the grace
//     period (default 24h), so an upload whose commit is still in progress,
//     or a compaction output not yet committed, is never touched.
//  5. Deletes only inside the table's folder. A pass works on tables whose
//     FileIO refuses (counts and reports) any Remove outside
//     TableLocation (confine.go), so what expired snapshots point at
//     (statistics, lists, manifests, data files: iceberg-go deletes them
//     after the commit, wherever their paths lead) and orphans are deleted
//     only there. The table's history.expire.* never shorten the node's
//     policy, and gc.enabled=false does not stop expiry.
//  6. Both logs. A table with a Delta log beside it is compacted in both
//     (Iceberg first, then Delta; a missed Delta rewrite is caught up by a
//     diff), and a file either log still references is never deleted
//     (deltamaint.go).
//
// # Maintenance: the lease
//
// The lease lives in two table properties, tributary.maintain.holder and
// tributary.maintain.until (unix milliseconds). A property-only Iceberg
// commit asserts only that the branch head did not move; two writers racing
// on a property from the same head would both "win". So:
//
//   - Acquiring commits an empty append snapshot together with the lease
//     properties (as AllocatePartition does). An append moves the main
//     branch and asserts its previous head, so of two acquirers planned on
//     the same head exactly one wins; the other reloads and sees the lease
//     taken. A lease whose until has passed may be taken by anyone.
//   - Every maintenance commit (replace, manifest rewrite, snapshot expiry,
//     renewal, release) is planned on a reload in which this holder owns an
//     unexpired lease, and asserts that head. Since any competing
//     acquisition moves the head, such a commit succeeds only if nobody took
//     the lease since it was checked: a maintainer whose lease lapsed is
//     fenced by the catalog's compare-and-swap, not by clocks alone.
//   - Renewal and release are property-only commits; that is safe for the
//     same reason (a competing acquisition would have moved the head).
//   - Orphan deletion is not a commit; it runs only while the lease has at
//     least half its TTL left, and relies on invariant 4 for safety.
//
// Clocks matter only for expiry of an abandoned lease: the TTL (default 10
// minutes) must exceed clock skew between maintainers by a wide margin.
//
// # Maintenance: a pass (Catalog.Maintain)
//
//	acquire lease → merge manifests → compact → merge manifests →
//	expire snapshots → delete orphans → release lease → stats
//
// Manifests are merged before compacting because a replace commit rewrites
// every manifest that holds one of its inputs: with inputs spread over a
// hundred fast-append manifests, the commit would be slow and lose every
// race with the uplink's appends.
//
// Each step reloads, checks the lease, plans, commits; on a commit conflict
// it reloads and re-plans (up to maxMaintainAttempts times).
//
//   - Compaction: the current snapshot's data files are grouped by
//     (partition, partition-spec value i.e. day or hour) and sorted by first
//     offset. A run of files smaller than the target size whose offset
//     ranges are adjacent (last+1 == next first) and whose total stays under
//     the target becomes one output file, so every output still holds one
//     contiguous offset range of one partition and one day, with exact
//     bounds on partition, offset and timestamp (written by WriteParquet,
//     registered by the same data-file builder as appends).
//   - Manifest merging: when the current snapshot has more than
//     MaxManifests data manifests, RewriteManifests merges them (target
//     size from commit.manifest.target-size-bytes). Measured: merging on
//     every append (commit.manifest-merge.enabled) makes each append read
//     and rewrite manifests; merging in the pass keeps appends fast-append.
//   - Snapshot expiry: snapshots older than SnapshotMaxAge beyond the last
//     RetainSnapshots are removed; files reachable only from them
//     (manifests, lists, compacted-away data files, statistics) are
//     deleted after the commit by iceberg-go, through the confined FileIO.
//   - Orphan cleanup: Table.PlanOrphanFiles with the grace period, then
//     deleting the planned files, except the .attrs sidecars (gocloud.dev
//     fileblob) of files that are not orphans.
//
// # Maintenance: bounds (with a pass every P commits)
//
//	snapshots      ≤ RetainSnapshots + commits in SnapshotMaxAge + P + 4·passes-in-age
//	data manifests ≤ MaxManifests + P + small (a rewrite leaves ~1 per 8 MiB of entries)
//	data files     ≤ per (partition, day): ⌈bytes/target⌉ + P (files since the last pass)
//	metadata file  ≈ 700 B × snapshots + properties (previous-versions-max caps the log)
//
// The accelerated soak test (TestMaintenanceSoak) asserts these for P=100
// (P=25 under -race), with snapshots retained by count only: 200 snapshots,
// 102 data manifests, 101 data files and a 155 KB metadata file at most,
// 5,000 commits included. With the default 1h age and one commit a second,
// a table keeps ~3,600 snapshots (a metadata file of ~2.5 MB): lower
// maintenance.snapshot_max_age if that is too much (a table's
// history.expire.max-snapshot-age-ms may only raise it).
package tables
