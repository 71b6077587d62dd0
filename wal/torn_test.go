package wal

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/tributary-io/tributary"
)

// bbolt's meta pages: pages 0 and 1, each a 16-byte page header then the
// meta (magic, version, page size, flags, root bucket, freelist, high
// page id, txid, checksum). A commit writes its data pages, fsyncs, then
// writes the meta page of the other slot and fsyncs again; Open takes
// the valid meta with the higher txid.
const (
	metaTxidAt  = 16 + 4 + 4 + 4 + 4 + 16 + 8 + 8 // txid's offset in a meta page
	metaPgidAt  = metaTxidAt - 8                  // the high page id's
	metaPageMin = metaTxidAt + 16
)

// TestTornCommit: power fails while bbolt's last commit's meta page is
// being written (a torn write: its checksum no longer matches). bbolt
// then opens at the commit before it; the groups of the torn commit were
// acknowledged once their journal record was synced, so the journal
// replays them: every record is there, offsets stay dense and appending
// continues at the next offset. Also when the torn group held a Kafka
// batch entry (a version 2 chunk).
func TestTornCommit(t *testing.T) {
	for _, batch := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "wal.db")
		w, err := Open(Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		appendRecs(t, w, "s", 0, 10)
		appendRecs(t, w, "s", 1, 3)
		if batch {
			b, _ := testBatch("s", 0, 5, -1, 0, 0, 1)
			if err := appendBatch(t, w, b); err != nil {
				t.Fatal(err)
			}
		} else {
			appendRecs(t, w, "s", 0, 5) // the group whose commit is torn
		}
		if ps, _ := w.Partition("s", 0); ps.Next != 15 {
			t.Fatalf("next %d before the crash", ps.Next)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		tearLatestMeta(t, path)

		w, err = Open(Options{Path: path})
		if err != nil {
			t.Fatalf("open after a torn meta page: %v", err)
		}
		ps, _ := w.Partition("s", 0)
		if ps.Next != 15 {
			t.Fatalf("batch %v: next %d after the torn commit, want 15 (the journal holds the torn commit's groups)", batch, ps.Next)
		}
		recs := readPartition(t, w, "s", 0)
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("record %d at offset %d", i, r.Offset)
			}
		}
		if len(recs) != 15 || len(readPartition(t, w, "s", 1)) != 3 {
			t.Fatalf("%d and %d records after the torn commit, want 15 and 3", len(recs), len(readPartition(t, w, "s", 1)))
		}
		r := &tributary.Record{Stream: "s", Partition: 0, Value: []byte("after")}
		if err := w.Append(context.Background(), r); err != nil || r.Offset != 15 {
			t.Fatalf("append after the torn commit: offset %d, %v", r.Offset, err)
		}
		w.Close()
	}
}

// tearLatestMeta corrupts the meta page with the higher txid, as a write
// torn by a power failure leaves it.
func tearLatestMeta(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := os.Getpagesize()
	var txid [2]uint64
	buf := make([]byte, metaPageMin)
	for i := range 2 {
		if _, err := f.ReadAt(buf, int64(i*page)); err != nil {
			t.Fatal(err)
		}
		txid[i] = binary.LittleEndian.Uint64(buf[metaTxidAt:])
	}
	latest := 0
	if txid[1] > txid[0] {
		latest = 1
	}
	// The second half of the page never made it: the high page id and
	// the checksum are zeros.
	zero := make([]byte, metaPageMin-metaPgidAt)
	if _, err := f.WriteAt(zero, int64(latest*page+metaPgidAt)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
