package consume

// JoinGroup (key 11): v0–v9.
//
// Behaviour:
//   - A group the principal may not use is GROUP_AUTHORIZATION_FAILED (30)
//     (as for SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//     DescribeGroups and FindCoordinator).
//   - Only the coordinator accepts joins (else NOT_COORDINATOR).
//   - v4+: a first join (empty member id) gets MEMBER_ID_REQUIRED with a
//     new member id, which the client sends back (KIP-394); v0–v3 members
//     get their id at once.
//   - An unknown non-empty member id is UNKNOWN_MEMBER_ID; a protocol type
//     or protocol set that does not fit the group's is
//     INCONSISTENT_GROUP_PROTOCOL; session timeouts outside 1 s–30 min are
//     INVALID_SESSION_TIMEOUT.
//   - A join starts a rebalance (if none is under way) and waits until
//     every member has rejoined or the rebalance timeout passed; then all
//     get the new generation, the leader with every member's metadata.
//     v0 has no rebalance timeout: the session timeout is used.
//   - Static membership (group instance id) is ignored (dynamic members).
//   - Caps (caps.go): a join that would make this server coordinate more
//     than kafka.max_groups groups is POLICY_VIOLATION; a new member
//     (empty member id) of a group that has kafka.max_group_members
//     members and handed-out member ids is GROUP_MAX_SIZE_REACHED, as
//     Kafka's group.max.size.

import (
	"context"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleJoinGroup(ctx context.Context, req *kafka.Request, r *kmsg.JoinGroupRequest) kmsg.Response {
	fail := func(code int16, memberID string) kmsg.Response {
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode, resp.MemberID, resp.Generation = code, memberID, -1
		resp.Protocol = kmsg.StringPtr("")
		return resp
	}
	if r.Group == "" {
		return fail(kafka.CodeInvalidGroupID, r.MemberID)
	}
	if code := cs.groupCode(req, r.Group); code != 0 {
		return fail(code, r.MemberID)
	}
	switch {
	case r.SessionTimeoutMillis < 1000 || r.SessionTimeoutMillis > 30*60*1000:
		return fail(kafka.CodeInvalidSessionTimeout, r.MemberID)
	case r.ProtocolType == "" || len(r.Protocols) == 0:
		return fail(kafka.CodeInconsistentProtocol, r.MemberID)
	}
	rebalance := time.Duration(r.RebalanceTimeoutMillis) * time.Millisecond
	if r.Version == 0 || rebalance <= 0 {
		rebalance = time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	}
	gs := cs.groups
	gs.mu.Lock()
	if !gs.admit(r.Group) {
		gs.mu.Unlock()
		return fail(kafka.CodePolicyViolation, r.MemberID)
	}
	g := gs.get(r.Group)
	now := time.Now()
	if len(g.members) > 0 {
		if g.protocolType != r.ProtocolType {
			gs.mu.Unlock()
			return fail(kafka.CodeInconsistentProtocol, r.MemberID)
		}
		shared := false
		for _, p := range r.Protocols {
			ok := true
			for _, m := range g.members {
				if m.id != r.MemberID && !m.supports(p.Name) {
					ok = false
					break
				}
			}
			shared = shared || ok
		}
		if !shared {
			gs.mu.Unlock()
			return fail(kafka.CodeInconsistentProtocol, r.MemberID)
		}
	}
	id := r.MemberID
	if id == "" && !gs.admitMember(g) {
		gs.mu.Unlock()
		return fail(kafka.CodeGroupMaxSizeReached, "")
	}
	if id == "" {
		id = newMemberID(req.ClientID)
		if r.Version >= 4 {
			g.pending[id] = now
			gs.mu.Unlock()
			return fail(kafka.CodeMemberIDRequired, id)
		}
	} else if _, ok := g.members[id]; !ok {
		if _, ok := g.pending[id]; !ok {
			gs.mu.Unlock()
			return fail(kafka.CodeUnknownMemberID, id)
		}
	}
	delete(g.pending, id)
	m := g.members[id]
	if m == nil {
		m = &member{id: id}
		g.members[id] = m
	}
	m.clientID, m.instanceID, m.clientHost = req.ClientID, r.InstanceID, clientHost(req.Remote)
	m.protocols = r.Protocols
	m.sessionTimeout = time.Duration(r.SessionTimeoutMillis) * time.Millisecond
	m.rebalanceTimeout = rebalance
	m.lastSeen = now
	g.protocolType = r.ProtocolType
	g.startRebalance(now)
	m.joined = true
	g.deadline = later(g.deadline, now.Add(rebalance))
	g.maybeCompleteJoin(false)
	done := g.joinDone
	gs.mu.Unlock()

	select {
	case <-done:
	case <-ctx.Done():
		return fail(kafka.CodeCoordinatorNotAvail, id)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if m.joinResp == nil || g.members[id] != m {
		return fail(kafka.CodeUnknownMemberID, id)
	}
	resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
	jr := m.joinResp
	resp.Generation, resp.Protocol, resp.ProtocolType = jr.Generation, jr.Protocol, jr.ProtocolType
	resp.LeaderID, resp.MemberID, resp.Members = jr.LeaderID, jr.MemberID, jr.Members
	m.lastSeen = time.Now()
	return resp
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// clientHost is a member's host as Kafka shows it ("/10.0.0.1").
func clientHost(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return "/" + host
	}
	return remote
}
