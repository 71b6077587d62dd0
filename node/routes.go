package node

import (
	"context"
	"sort"
	"time"
)

// routeFilters maps each stream the node routes MQTT topics into to the
// topic filters routed there; the default stream gets "#" (every topic no
// route matches lands there).
func routeFilters(cfg Config) map[string][]string {
	out := map[string][]string{}
	for _, r := range cfg.MQTT.Routes {
		out[r.Stream] = append(out[r.Stream], r.Filter)
	}
	out[cfg.MQTT.DefaultStream] = append(out[cfg.MQTT.DefaultStream], "#")
	for s := range out {
		sort.Strings(out[s])
	}
	return out
}

// publishRoutes records the node's MQTT routes in the catalog
// (tables.PublishRoutes), so that the cloud MQTT listener resolves plain
// topic filters as this node routes them: every 2 s for streams whose
// table does not exist yet (it appears with the first rows), every minute
// for the others (in case the table was replaced).
func (n *Node) publishRoutes(ctx context.Context) {
	want := routeFilters(n.cfg)
	done := map[string]time.Time{}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		for stream, filters := range want {
			if at, ok := done[stream]; ok && time.Since(at) < time.Minute {
				continue
			}
			ok, err := n.cat.PublishRoutes(ctx, stream, n.cfg.NodeID, filters)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				n.log.Debug("publish mqtt routes", "stream", stream, "err", err)
				continue
			}
			if ok {
				done[stream] = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
