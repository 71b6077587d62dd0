package wire

import (
	"errors"
	"slices"
	"testing"
)

type cursor struct {
	MarkDelete int64
	Acked      [][2]int64
}

func TestAckedRangesEncoding(t *testing.T) {
	for _, c := range []cursor{
		{MarkDelete: -1},
		{MarkDelete: -1, Acked: [][2]int64{{1, 2}, {5, 9}}},
		{MarkDelete: 1 << 40, Acked: [][2]int64{{1<<40 + 2, 1<<40 + 3}, {1 << 50, 1<<50 + 1000}}},
	} {
		b := EncodeAckedRanges(c.MarkDelete, c.Acked)
		got, err := DecodeAckedRanges(c.MarkDelete, b)
		if err != nil || !slices.Equal(got, c.Acked) {
			t.Fatalf("round trip of %+v: %v, %v", c, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {1, 0, 0}, {2, 1, 1, 0, 1}, {1, 1, 1, 0}, {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1}} {
		if _, err := DecodeAckedRanges(0, bad); !errors.Is(err, ErrBadAckedRanges) {
			t.Errorf("decode %x: %v, want ErrBadAckedRanges", bad, err)
		}
	}
}

func FuzzAckedRanges(f *testing.F) {
	f.Add(int64(-1), EncodeAckedRanges(-1, [][2]int64{{1, 2}, {5, 9}}))
	f.Add(int64(7), []byte{0})
	f.Add(int64(0), []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1})
	f.Fuzz(func(t *testing.T, md int64, b []byte) {
		rs, err := DecodeAckedRanges(md, b)
		if err != nil {
			return
		}
		prev := md + 1
		for i, r := range rs {
			if r[0] < prev || r[1] <= r[0] || (i > 0 && r[0] == prev) {
				t.Fatalf("decoded invalid ranges %v above %d", rs, md)
			}
			prev = r[1]
		}
		// (Over-long varints decode too, so compare ranges, not bytes.)
		if again, err := DecodeAckedRanges(md, EncodeAckedRanges(md, rs)); err != nil || !slices.Equal(again, rs) {
			t.Fatalf("re-encoding %v: %v, %v", rs, again, err)
		}
	})
}
