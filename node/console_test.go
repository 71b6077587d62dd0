package node

import (
	"reflect"
	"testing"

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
