package consume

// SyncGroup (key 14): v0–v5.
//
// Behaviour: the leader's request carries every member's assignment; it
// moves the group to Stable and releases the followers, who wait for it.
// Unknown members get UNKNOWN_MEMBER_ID, another generation
// ILLEGAL_GENERATION, a group that started another rebalance meanwhile
// REBALANCE_IN_PROGRESS. Members the leader left out get an empty
// assignment. v5 protocol type/name are echoed.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleSyncGroup(ctx context.Context, req *kafka.Request, r *kmsg.SyncGroupRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SyncGroupResponse)
	if resp.ErrorCode = cs.groupCode(req, r.Group); resp.ErrorCode != 0 {
		return resp
	}
	gs := cs.groups
	gs.mu.Lock()
	g := gs.m[r.Group]
	var m *member
	if g != nil {
		m = g.members[r.MemberID]
	}
	switch {
	case m == nil:
		resp.ErrorCode = kafka.CodeUnknownMemberID
	case r.Generation != g.generation:
		resp.ErrorCode = kafka.CodeIllegalGeneration
	case g.state == groupPreparing:
		resp.ErrorCode = kafka.CodeRebalanceInProgress
	}
	if resp.ErrorCode != 0 {
		gs.mu.Unlock()
		return resp
	}
	m.lastSeen = time.Now()
	resp.ProtocolType, resp.Protocol = kmsg.StringPtr(g.protocolType), kmsg.StringPtr(g.protocol)
	if g.state == groupCompleting && r.MemberID == g.leader {
		for _, o := range g.members {
			o.assignment = []byte{}
		}
		for _, a := range r.GroupAssignment {
			if o, ok := g.members[a.MemberID]; ok {
				o.assignment = a.MemberAssignment
			}
		}
		g.state = groupStable
		close(g.syncDone)
		g.syncDone = make(chan struct{})
	}
	if g.state == groupStable {
		resp.MemberAssignment = m.assignment
		gs.mu.Unlock()
		return resp
	}
	done, gen := g.syncDone, g.generation
	gs.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		resp.ErrorCode = kafka.CodeCoordinatorNotAvail
		return resp
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.state != groupStable || g.generation != gen || g.members[r.MemberID] != m {
		resp.ErrorCode = kafka.CodeRebalanceInProgress
		return resp
	}
	resp.MemberAssignment = m.assignment
	m.lastSeen = time.Now()
	return resp
}
