package consume

// FindCoordinator (key 10), consume side: v0–v4.
//
// The coordinator of a group is the peer chosen by a rendezvous hash of the
// group id over the configured cloud servers (Config.Peers and this
// one), so every server gives the same answer without talking to the
// others; with one server it is always itself. A group the principal may
// not use (auth.Consume with the group) is GROUP_AUTHORIZATION_FAILED (30). Transaction coordinators
// (key type 1) are not offered: COORDINATOR_NOT_AVAILABLE. v4 answers
// each of the batched keys.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (cs *Server) handleFindCoordinator(req *kafka.Request, r *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
	find := func(key string) (int32, string, int32, int16) {
		if r.CoordinatorType != 0 {
			return -1, "", -1, kafka.CodeCoordinatorNotAvail
		}
		if key == "" {
			return -1, "", -1, kafka.CodeInvalidGroupID
		}
		if !mayUseGroup(req, key) {
			return -1, "", -1, kafka.CodeGroupAuthorizationFailed
		}
		id, host, port := peerBroker(cs.coordinator(key))
		return id, host, port, 0
	}
	if r.Version >= 4 {
		for _, k := range r.CoordinatorKeys {
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key = k
			c.NodeID, c.Host, c.Port, c.ErrorCode = find(k)
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	resp.NodeID, resp.Host, resp.Port, resp.ErrorCode = find(r.CoordinatorKey)
	return resp
}
