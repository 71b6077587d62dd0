package consume

// LeaveGroup (key 13): v0–v5.
//
// Behaviour: removes the member (v0–v2) or members (v3+, per-member error
// codes) and rebalances the rest; the last member leaving empties the
// group. Unknown members get UNKNOWN_MEMBER_ID. Members are matched by
// member id only (no static membership).

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleLeaveGroup(req *kafka.Request, r *kmsg.LeaveGroupRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.LeaveGroupResponse)
	if resp.ErrorCode = cs.groupCode(req, r.Group); resp.ErrorCode != 0 {
		return resp
	}
	gs := cs.groups
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[r.Group]
	leave := func(id string) int16 {
		if g == nil || g.members[id] == nil {
			return kafka.CodeUnknownMemberID
		}
		g.remove(time.Now(), id)
		return 0
	}
	if r.Version < 3 {
		resp.ErrorCode = leave(r.MemberID)
		return resp
	}
	for _, rm := range r.Members {
		lm := kmsg.NewLeaveGroupResponseMember()
		lm.MemberID, lm.InstanceID = rm.MemberID, rm.InstanceID
		lm.ErrorCode = leave(rm.MemberID)
		resp.Members = append(resp.Members, lm)
	}
	return resp
}
