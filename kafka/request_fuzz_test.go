package kafka

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// allAPIs admits every key kmsg knows at every version it knows: a superset
// of what the produce-side and consume-side servers admit, for fuzzing the
// shared request decoder in this package's small test binary.
var allAPIs = func() APIs {
	a := APIs{}
	for k := int16(0); k <= kmsg.MaxKey; k++ {
		if r := kmsg.RequestForKey(k); r != nil {
			a[k] = VersionRange{Min: 0, Max: r.MaxVersion()}
		}
	}
	return a
}()

// FuzzDecodeRequest is the fast target for DecodeRequest (`make fuzz`
// runs it for FUZZTIME, a million executions by default), and the fast
// counterpart of kafka/consume's FuzzCloudRequestServer: the consume
// package's test binary carries the whole table stack (Iceberg, Arrow,
// SQLite, S3), and even a decode-only target there ran about 200
// executions a second, against thousands here. kafka/produce's
// FuzzRequestDecode checks the produce-side version ranges. Whatever
// fails is one of the decoder's errors; whatever decodes is an admitted key
// at an admitted version (or ApiVersions marked unsupported), and its body
// encodes back to bytes that decode and encode again to the same bytes.
// Its corpus starts as a copy of kafka/consume's.
func FuzzDecodeRequest(f *testing.F) {
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version, av.ClientSoftwareName, av.ClientSoftwareVersion = 3, "c", "1"
	f.Add(kafkatest.EncodeRequest(1, "c", av))
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	f.Add(kafkatest.EncodeRequest(2, "c", md))
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, err := ReadFrame(bytes.NewReader(data), 1<<20)
		if err != nil {
			return
		}
		req, err := DecodeRequest(frame, allAPIs)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedAPI) && !errors.Is(err, ErrUnsupportedVers) {
				t.Fatalf("unexpected decode error: %v", err)
			}
			return
		}
		rng, ok := allAPIs[req.Key]
		if !ok {
			t.Fatalf("key %d admitted", req.Key)
		}
		if out := req.Version < rng.Min || req.Version > rng.Max; out != req.Unsupported || (out && req.Key != ApiVersionsKey) {
			t.Fatalf("key %d version %d (range %d-%d) admitted, unsupported=%v", req.Key, req.Version, rng.Min, rng.Max, req.Unsupported)
		}
		if req.Unsupported {
			return
		}
		body := req.Body.AppendTo(nil)
		again := kmsg.RequestForKey(req.Key)
		again.SetVersion(req.Version)
		if err := again.ReadFrom(body); err != nil {
			t.Fatalf("key %d v%d: re-encoded body does not decode: %v", req.Key, req.Version, err)
		}
		if b2 := again.AppendTo(nil); !bytes.Equal(b2, body) {
			t.Fatalf("key %d v%d: encoding not stable\n%x\n%x", req.Key, req.Version, body, b2)
		}
	})
}
