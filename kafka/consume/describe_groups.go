package consume

// DescribeGroups (key 15): v0–v5.
//
// Behaviour, per group: a group the principal may not use (auth.Consume
// with the group) is GROUP_AUTHORIZATION_FAILED (30); a group this server
// does not coordinate is NOT_COORDINATOR; one it does not know is state
// Dead with no members, as Kafka answers. Otherwise its state, protocol
// type and protocol, and each member's id, client id and host, metadata
// for the chosen protocol and assignment. Authorized operations (v3+) are
// not computed (the "not requested" value).

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleDescribeGroups(req *kafka.Request, r *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range r.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group, dg.AuthorizedOperations = id, kafka.DefaultAuthorizedOps
		if dg.ErrorCode = cs.groupCode(req, id); dg.ErrorCode == 0 {
			cs.describeGroup(&dg)
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

func (cs *Server) describeGroup(dg *kmsg.DescribeGroupsResponseGroup) {
	gs := cs.groups
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[dg.Group]
	if g == nil {
		dg.State = "Dead"
		return
	}
	dg.State, dg.ProtocolType, dg.Protocol = g.state.String(), g.protocolType, g.protocol
	for _, m := range g.members {
		dm := kmsg.NewDescribeGroupsResponseGroupMember()
		dm.MemberID, dm.InstanceID, dm.ClientID, dm.ClientHost = m.id, m.instanceID, m.clientID, m.clientHost
		for _, p := range m.protocols {
			if p.Name == g.protocol {
				dm.ProtocolMetadata = p.Metadata
			}
		}
		dm.MemberAssignment = m.assignment
		dg.Members = append(dg.Members, dm)
	}
}
