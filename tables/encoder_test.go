package tables

import (
	"bytes"
	"testing"
)

// TestEncoderMatchesWriteParquet: a file appended a few records at a time
// (slices of every awkward size: 1, a chunk less one, across a row group)
// has exactly the bytes and stats WriteParquet writes for the same
// records, and an Encoder refuses a record that does not continue it.
func TestEncoderMatchesWriteParquet(t *testing.T) {
	for _, n := range []int{1, pqChunkRows - 1, pqChunkRows, RowGroupRows, RowGroupRows + 1500, 2*RowGroupRows + 7} {
		recs := testRecords(3, 100, n, 1_700_000_000_000_000)
		var want bytes.Buffer
		wst, err := WriteParquet(&want, recs)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []int{1, 7, pqChunkRows - 1, pqChunkRows + 1, 5000, n} {
			e, err := ParquetOptions{}.NewEncoder()
			if err != nil {
				t.Fatal(err)
			}
			for lo := 0; lo < n; lo += step {
				if err := e.Append(recs[lo:min(lo+step, n)]); err != nil {
					t.Fatal(err)
				}
			}
			if e.Records() != int64(n) || e.Next() != recs[n-1].Offset+1 {
				t.Fatalf("n=%d step=%d: records %d next %d", n, step, e.Records(), e.Next())
			}
			got, st, err := e.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("n=%d step=%d: %d bytes, WriteParquet wrote %d different ones", n, step, len(got), want.Len())
			}
			if st != wst {
				t.Fatalf("n=%d step=%d: stats %+v, want %+v", n, step, st, wst)
			}
		}
	}
	e, _ := ParquetOptions{}.NewEncoder()
	recs := testRecords(0, 0, 3, 1)
	if err := e.Append(recs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := e.Append(recs[2:]); err == nil {
		t.Fatal("a gap was accepted")
	}
	if _, _, err := e.Close(); err == nil {
		t.Fatal("closed after an error")
	}
	if _, err := (ParquetOptions{ZstdLevel: 23}).NewEncoder(); err == nil {
		t.Fatal("zstd level 23 accepted")
	}
}
