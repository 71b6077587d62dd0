package cloudmqtt

import (
	"context"
	"errors"

	"github.com/tributary-io/tributary/cloudmqtt/wire"
	"github.com/tributary-io/tributary/tables"
)

// resolve is the streams a plain topic filter reads: every stream one of
// whose MQTT routes (tables.RoutesOf: the filters the edge nodes recorded,
// "#" for a node's default stream) can match a topic the filter matches.
// Resolved at SUBSCRIBE (and kept with a persistent session): a stream a
// route is added to later is not added to the subscription.
func (s *Server) resolve(ctx context.Context, filter string) ([]string, error) {
	all, err := s.r.ListStreams(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range all {
		routes, err := s.r.Routes(ctx, st)
		if errors.Is(err, tables.ErrNoSuchStream) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, r := range routes {
			if wire.Overlap(r, filter) {
				out = append(out, st)
				break
			}
		}
	}
	return out, nil
}
