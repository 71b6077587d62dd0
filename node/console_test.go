package node

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/cluster"
)

func TestReplicaTargets(t *testing.T) {
	m := func(id string, st cluster.State) cluster.Member {
		return cluster.Member{ID: id, State: st, Meta: cluster.Meta{Peer: id + ":1"}}
	}
	members := []cluster.Member{m("c", cluster.Alive), m("a", cluster.Alive), m("b", cluster.Dead), m("d", cluster.Suspect)}
	for _, c := range []struct {
		self string
		k    int
		want []string
	}{
		{"a", 1, []string{"c"}}, // b is dead
		{"c", 2, []string{"d", "a"}},
		{"d", 1, []string{"a"}}, // wraps around
		{"a", 0, nil},
		{"a", 5, []string{"c", "d"}},
	} {
		if got := replicaTargets(c.self, members, c.k); !reflect.DeepEqual(got, c.want) {
			t.Errorf("replicaTargets(%s, %d) = %v, want %v", c.self, c.k, got, c.want)
		}
	}
}

func TestRecentRows(t *testing.T) {
	var c streamCounters
	var batch []*tributary.Record
	for i := range 25 {
		batch = append(batch, &tributary.Record{Stream: "a.b", Offset: int64(i), Value: []byte(fmt.Sprintf("v%d", i)), Source: "mqtt"})
	}
	batch = append(batch, &tributary.Record{Stream: "c.d", Offset: 7, Value: make([]byte, 1000), Key: []byte{}})
	c.add(batch[:5])
	c.add(batch[5:])
	rows := c.recent("a.b")
	if len(rows) != recentPerStream || rows[0].Offset != 15 || rows[len(rows)-1].Offset != 24 || string(rows[9].Value) != "v24" {
		t.Fatalf("recent a.b: %d rows, first %+v", len(rows), rows[0])
	}
	batch[24].Value[0] = 'X' // the ring holds copies
	if string(c.recent("a.b")[9].Value) != "v24" {
		t.Fatal("recent rows alias the records' buffers")
	}
	cd := c.recent("c.d")
	if len(cd) != 1 || len(cd[0].Value) != recentValueMax || cd[0].ValueSize != 1000 || cd[0].Key == nil || rows[0].Key != nil {
		t.Fatalf("recent c.d: %+v", cd)
	}
	if c.recent("none") != nil {
		t.Fatal("rows for an unknown stream")
	}
	counts := c.ingestCounts()
	if len(counts) != 2 {
		t.Fatalf("ingest counts %+v", counts)
	}
}
