package consume

// ListGroups (key 16): v0–v4 (v5 adds a group type filter for the new
// consumer protocol, which is not offered).
//
// Behaviour: the groups this server coordinates (membership is in the
// coordinator's memory; a client asks every broker, as with Kafka), with
// their protocol type and (v4+) state, filtered by the request's states;
// a group the principal may not use (auth.Consume with the group) is left
// out, as Kafka leaves out groups without DESCRIBE.

import (
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleListGroups(req *kafka.Request, r *kmsg.ListGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListGroupsResponse)
	gs := cs.groups
	gs.mu.Lock()
	for _, g := range gs.m {
		state := g.state.String()
		if len(r.StatesFilter) > 0 && !slices.ContainsFunc(r.StatesFilter, func(s string) bool { return strings.EqualFold(s, state) }) {
			continue
		}
		if !req.Allowed(auth.Consume, "", g.id) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState = g.id, g.protocolType, state
		resp.Groups = append(resp.Groups, lg)
	}
	gs.mu.Unlock()
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return resp
}
