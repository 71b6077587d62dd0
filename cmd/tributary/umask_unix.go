//go:build unix

package main

import "syscall"

// privateFiles makes every file and folder the process creates private to
// its user (umask 077): the WAL, catalog.db, the local warehouse, the Kafka
// producer state and the replicas hold the plant's data and, in the
// catalog, its table layout; other local users have no business reading
// them. Libraries that create files with 0644 (SQLite, gocloud's fileblob)
// get 0600 this way.
func privateFiles() { syscall.Umask(0o077) }
