package consume

import (
	"testing"
)

func TestGroupsListing(t *testing.T) {
	cs := &Server{}
	cs.groups = newGroups(nil, 0, 0)
	cs.groups.m["g1"] = &group{id: "g1", state: groupStable, members: map[string]*member{
		"m2": {id: "m2", clientID: "b", clientHost: "/10.0.0.2"},
		"m1": {id: "m1", clientID: "a", clientHost: "/10.0.0.1"},
	}}
	cs.groups.m["g0"] = &group{id: "g0", state: groupEmpty, members: map[string]*member{}}
	got := cs.Groups()
	if len(got) != 2 || got[0].ID != "g0" || got[1].ID != "g1" || got[1].State != groupStable.String() ||
		len(got[1].Members) != 2 || got[1].Members[0] != "a@/10.0.0.1" {
		t.Fatalf("groups %+v", got)
	}
}
