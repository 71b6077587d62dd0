package produce

// InitProducerId (key 22): v0–v4.
//
// Behaviour:
//   - Idempotent producers only: a request without a transactional id gets
//     a new producer id from the backend (unique across nodes and restarts)
//     with epoch 0, whatever producer id/epoch it carries (v3+), exactly as
//     Kafka does for non-transactional producers.
//   - Any principal the connection authenticated as (or an anonymous one,
//     when anonymous clients are admitted) may ask; the new producer id is
//     bound to that principal, and a Produce that uses it from another
//     principal is refused (producers.go).
//   - A transactional id is refused with INVALID_REQUEST (42) and a clear
//     message: transactions are not supported at the edge, and we do not
//     advertise FindCoordinator.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

func (s *Server) handleInitProducerID(ctx context.Context, req *kafka.Request, r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		resp.ErrorCode = kafka.CodeInvalidRequest
		s.log.Info("kafka: refusing transactional producer", "transactional_id", *r.TransactionalID)
		return resp
	}
	pid, err := s.b.AllocateProducerID(ctx)
	if err != nil {
		s.log.Warn("kafka: allocate producer id", "err", err)
		resp.ErrorCode = kafka.CodeKafkaStorageError
		return resp
	}
	s.prod.bind(pid, req.Principal.Name)
	resp.ProducerID, resp.ProducerEpoch = pid, 0
	return resp
}
