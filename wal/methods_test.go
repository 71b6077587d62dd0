package wal

import (
	"reflect"
	"slices"
	"testing"
)

// TestMethodSet pins WAL's exported methods to the set the package doc
// lists (# Methods): a new one is a decision to document there, not an
// accident.
func TestMethodSet(t *testing.T) {
	want := []string{
		"Apply", "Submit", // every write, as an Op
		"Notify", "Partition", "Partitions", "Read", "ReadChunks", "ReadEntriesInto", "Stats", // reads
		"Close", "Collectors", "SetTap", // the host's
	}
	var got []string
	typ := reflect.TypeOf((*WAL)(nil))
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("exported methods of *WAL:\n got %v\nwant %v (update the package doc's # Methods too)", got, want)
	}
}
