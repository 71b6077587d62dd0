package consume

// Heartbeat (key 12): v0–v4.
//
// Behaviour: keeps a member's session alive. UNKNOWN_MEMBER_ID for a
// member the coordinator does not know (e.g. after a restart, so that the
// client rejoins), ILLEGAL_GENERATION for another generation,
// REBALANCE_IN_PROGRESS while the group waits for members to rejoin.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleHeartbeat(req *kafka.Request, r *kmsg.HeartbeatRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.HeartbeatResponse)
	if resp.ErrorCode = cs.groupCode(req, r.Group); resp.ErrorCode != 0 {
		return resp
	}
	gs := cs.groups
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[r.Group]
	var m *member
	if g != nil {
		m = g.members[r.MemberID]
	}
	switch {
	case m == nil:
		resp.ErrorCode = kafka.CodeUnknownMemberID
		return resp
	case g.state == groupPreparing:
		resp.ErrorCode = kafka.CodeRebalanceInProgress
	case r.Generation != g.generation:
		resp.ErrorCode = kafka.CodeIllegalGeneration
	}
	m.lastSeen = time.Now()
	return resp
}
