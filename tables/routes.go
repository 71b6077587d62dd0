package tables

// MQTT routes in the catalog: each edge node records, in a property of
// every stream table it routes MQTT topics into, the topic filters it
// routes there (tributary.mqtt.routes.<node id> = a JSON list; "#" for the
// node's catch-all default stream). The cloud MQTT listener resolves a
// plain topic filter subscription to the streams one of whose filters can
// match a topic the subscription matches — the same streams an edge node
// would have written those topics to.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/apache/iceberg-go"
)

// PropMQTTRoutes + "<node id>" is the JSON list of the MQTT topic filters
// that node routes into the stream.
const PropMQTTRoutes = "tributary.mqtt.routes."

// PublishRoutes records that node routes filters into stream. It changes
// nothing when the table already says so, and does nothing (false) when
// the stream has no table yet: a table appears with its first rows, and
// the caller publishes again later.
func (c *Catalog) PublishRoutes(ctx context.Context, stream, node string, filters []string) (bool, error) {
	want, err := json.Marshal(filters)
	if err != nil {
		return false, err
	}
	for attempt := 0; ; attempt++ {
		t, err := c.LoadTable(ctx, stream)
		if errors.Is(err, ErrNoSuchStream) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if t.Properties()[PropMQTTRoutes+node] == string(want) {
			return true, nil
		}
		err = c.commitProps(ctx, t, iceberg.Properties{PropMQTTRoutes + node: string(want)},
			iceberg.Properties{"tributary.operation": "mqtt-routes", "tributary.node": node})
		if err == nil {
			return true, nil
		}
		if attempt < 20 && isConflict(err) {
			continue
		}
		return false, fmt.Errorf("publish mqtt routes of %s: %w", stream, err)
	}
}

// RoutesOf is the union of the MQTT route filters every node recorded in
// a table's properties, sorted.
func RoutesOf(props map[string]string) []string {
	var out []string
	for k, v := range props {
		if !strings.HasPrefix(k, PropMQTTRoutes) {
			continue
		}
		var fs []string
		if json.Unmarshal([]byte(v), &fs) != nil {
			continue
		}
		for _, f := range fs {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Routes is RoutesOf the stream's table as the reader has it (at most
// MetadataMaxAge old).
func (tc *Reader) Routes(ctx context.Context, stream string) ([]string, error) {
	t, err := tc.table(ctx, stream)
	if err != nil {
		return nil, err
	}
	return RoutesOf(t.Properties()), nil
}
