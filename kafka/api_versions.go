package kafka

// ApiVersions (key 18): v0–v4, both sides.
//
// Behaviour:
//   - Lists the APIs the server implements (its APIs table) and nothing
//     else: no telemetry keys 71/72, and each side only its own keys, so a
//     client sees what it can use on the edge (produce) or in the cloud
//     (consume).
//   - The response always uses response header v0 (no header tags), as
//     Kafka does, so that a client can parse it before it knows our
//     versions (AppendResponse).
//   - A version we do not support (including ones newer than any we know)
//     is answered in version 0 with UNSUPPORTED_VERSION (35) and our ranges;
//     the client then retries with a version inside them.

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// API keys used by the produce and consume sides.
const (
	ProduceKey          int16 = 0
	FetchKey            int16 = 1
	ListOffsetsKey      int16 = 2
	MetadataKey         int16 = 3
	OffsetCommitKey     int16 = 8
	OffsetFetchKey      int16 = 9
	FindCoordinatorKey  int16 = 10
	JoinGroupKey        int16 = 11
	HeartbeatKey        int16 = 12
	LeaveGroupKey       int16 = 13
	SyncGroupKey        int16 = 14
	DescribeGroupsKey   int16 = 15
	ListGroupsKey       int16 = 16
	SaslHandshakeKey    int16 = 17
	ApiVersionsKey      int16 = 18
	InitProducerIDKey   int16 = 22
	SaslAuthenticateKey int16 = 36
)

// VersionRange is the versions of one API key a server implements.
type VersionRange struct{ Min, Max int16 }

// APIs is a server's API table: key -> implemented versions.
type APIs map[int16]VersionRange

// ApiVersionsVersions are the ApiVersions versions every server answers.
var ApiVersionsVersions = VersionRange{0, 4}

// HandleApiVersions answers an ApiVersions request with apis.
func HandleApiVersions(req *Request, r *kmsg.ApiVersionsRequest, apis APIs) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
	if req.Unsupported {
		resp.SetVersion(0)
		resp.ErrorCode = CodeUnsupportedVersion
	}
	keys := make([]int16, 0, len(apis))
	for k := range apis {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		rng := apis[key]
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, rng.Min, rng.Max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
