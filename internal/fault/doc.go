// Package fault injects failures into the things Tributary's tests
// depend on: the object store (Store), the Iceberg catalog (Catalog), and
// the local file system (CrashFS).
//
// Store and Catalog share one script, Faults: fail the next N calls, stall
// calls until released (or their context ends), fail a call after it was
// applied (the write or commit happened, the caller gets an error: the
// case exactly-once must survive), or fail a random fraction of calls with
// a seeded generator. Each wrapper has one Faults per kind of call, so a
// test scripts uploads, loads and commits separately.
//
// CrashFS is an errorfs-style vfs.FS over the real disk that records which
// data and which directory entries were fsynced, and whose Crash puts the
// disk in the state a power cut would leave: files whose data was never
// fsynced are empty, names whose directory was not fsynced since they were
// created or renamed are gone (a renamed file is back under its old name).
//
// The package imports nothing of the module but internal/vfs, so the
// internal tests of tables, uplink and replica can all use it.
package fault
