//go:build bench

package e2e

// benchMode: built with -tags bench (make bench), tests also hold
// throughput factors, which a shared machine cannot promise in make test.
const benchMode = true
