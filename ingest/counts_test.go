package ingest

import (
	"fmt"
	"testing"

	"github.com/tributary-io/tributary"
)

func TestRecentRows(t *testing.T) {
	in := &Ingest{}
	c := &in.count
	var batch []*tributary.Record
	for i := range 25 {
		batch = append(batch, &tributary.Record{Stream: "a.b", Offset: int64(i), Value: []byte(fmt.Sprintf("v%d", i)), Source: "mqtt"})
	}
	batch = append(batch, &tributary.Record{Stream: "c.d", Offset: 7, Value: make([]byte, 1000), Key: []byte{}})
	c.add(batch[:5])
	c.add(batch[5:])
	rows := in.Recent("a.b")
	if len(rows) != recentPerStream || rows[0].Offset != 15 || rows[len(rows)-1].Offset != 24 || string(rows[9].Value) != "v24" {
		t.Fatalf("recent a.b: %d rows, first %+v", len(rows), rows[0])
	}
	batch[24].Value[0] = 'X' // the ring holds copies
	if string(in.Recent("a.b")[9].Value) != "v24" {
		t.Fatal("recent rows alias the records' buffers")
	}
	cd := in.Recent("c.d")
	if len(cd) != 1 || len(cd[0].Value) != recentValueMax || cd[0].ValueSize != 1000 || cd[0].Key == nil || rows[0].Key != nil {
		t.Fatalf("recent c.d: %+v", cd)
	}
	if in.Recent("none") != nil {
		t.Fatal("rows for an unknown stream")
	}
	counts := in.Counts()
	if len(counts) != 2 {
		t.Fatalf("ingest counts %+v", counts)
	}
}
