package kafka

// ApiVersions (key 18): v0–v4.
//
// Behaviour:
//   - Lists the APIs this server implements, with the version ranges
//     below, and nothing else (no telemetry keys 71/72, no group or
//     transaction APIs: this is the produce side of an edge node) — with
//     one exception, Fetch, below.
//   - The response always uses response header v0 (no header tags), as
//     Kafka does, so that a client can parse it before it knows our
//     versions.
//   - A version we do not support (including ones newer than any we know)
//     is answered in version 0 with UNSUPPORTED_VERSION (35) and our ranges;
//     the client then retries with a version inside them.
//   - Fetch is listed although edge nodes do not serve reads (it is answered
//     with a per-partition error), because
//     librdkafka enables message format v2 and zstd only when the broker
//     lists Fetch v4 and v10 (see fetch.go).

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	produceKey        int16 = 0
	fetchKey          int16 = 1
	metadataKey       int16 = 3
	apiVersionsKey    int16 = 18
	initProducerIDKey int16 = 22
)

type versionRange struct{ min, max int16 }

// supportedAPIs are the API keys and versions we implement.
//   - Produce v3–v12: v3 is the first with record batches (message format
//     v2, required); v13 addresses topics by id.
//   - Metadata v0–v12: v10+ carry topic ids, which we derive stably from the
//     topic name (topicID); v13 adds a top-level error code we do not need.
//   - InitProducerId v0–v4: idempotent producers only.
//   - Fetch v4–v12: advertised for librdkafka's feature detection only and
//     refused per partition (see fetch.go).
var supportedAPIs = map[int16]versionRange{
	produceKey:        {3, 12},
	fetchKey:          {4, 12},
	metadataKey:       {0, 12},
	apiVersionsKey:    {0, 4},
	initProducerIDKey: {0, 4},
}

func (s *Server) handleApiVersions(req *request, r *kmsg.ApiVersionsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	if req.unsupported {
		resp.SetVersion(0)
		resp.ErrorCode = errUnsupportedVersion
	}
	return apiVersionsResponse(resp, s.apis)
}

// apiVersionsResponse lists apis, by key, in resp.
func apiVersionsResponse(resp *kmsg.ApiVersionsResponse, apis map[int16]versionRange) kmsg.Response {
	keys := make([]int16, 0, len(apis))
	for k := range apis {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		rng := apis[key]
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, rng.min, rng.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
