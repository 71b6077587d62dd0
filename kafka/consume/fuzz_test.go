package consume

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/kafka/kafkatest"
)

// seedCloudRequests are one request of every consume-side API key.
func seedCloudRequests() map[string][]byte {
	out := map[string][]byte{}
	topic := cloudStream
	fr := kmsg.NewPtrFetchRequest()
	fr.Version, fr.MaxWaitMillis, fr.MinBytes, fr.MaxBytes = 11, 10, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.FetchOffset, fp.PartitionMaxBytes = 3, 1<<10
	ft.Partitions = append(ft.Partitions, fp)
	fr.Topics = append(fr.Topics, ft)
	out["fetch_v11"] = kafkatest.EncodeRequest(1, "c", fr)
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.Version = 5
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -2
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	out["listoffsets_v5"] = kafkatest.EncodeRequest(2, "c", lo)
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 12
	out["metadata_v12_all"] = kafkatest.EncodeRequest(3, "c", md)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorKeys = 4, []string{"g"}
	out["findcoordinator_v4"] = kafkatest.EncodeRequest(4, "c", fc)
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Version, jg.Group, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis, jg.ProtocolType = 9, "g", 6000, 1000, "consumer"
	jp := kmsg.NewJoinGroupRequestProtocol()
	jp.Name, jp.Metadata = "range", []byte{0, 1}
	jg.Protocols = append(jg.Protocols, jp)
	out["joingroup_v9"] = kafkatest.EncodeRequest(5, "c", jg)
	jg0 := *jg
	jg0.Version = 0
	out["joingroup_v0"] = kafkatest.EncodeRequest(6, "c", &jg0)
	sg := kmsg.NewPtrSyncGroupRequest()
	sg.Version, sg.Group, sg.MemberID, sg.Generation = 5, "g", "m", 1
	out["syncgroup_v5"] = kafkatest.EncodeRequest(7, "c", sg)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.MemberID = 4, "g", "m"
	out["heartbeat_v4"] = kafkatest.EncodeRequest(8, "c", hb)
	lg := kmsg.NewPtrLeaveGroupRequest()
	lg.Version, lg.Group = 5, "g"
	lg.Members = append(lg.Members, kmsg.LeaveGroupRequestMember{MemberID: "m"})
	out["leavegroup_v5"] = kafkatest.EncodeRequest(9, "c", lg)
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Version, oc.Group, oc.Generation = 8, "g", -1
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = topic
	op := kmsg.NewOffsetCommitRequestTopicPartition()
	op.Offset = 5
	ot.Partitions = append(ot.Partitions, op)
	oc.Topics = append(oc.Topics, ot)
	out["offsetcommit_v8"] = kafkatest.EncodeRequest(10, "c", oc)
	of := kmsg.NewPtrOffsetFetchRequest()
	of.Version, of.Group = 7, "g"
	out["offsetfetch_v7_all"] = kafkatest.EncodeRequest(11, "c", of)
	of1 := kmsg.NewPtrOffsetFetchRequest()
	of1.Version, of1.Group = 1, "g"
	of1.Topics = append(of1.Topics, kmsg.OffsetFetchRequestTopic{Topic: topic, Partitions: []int32{0, 7}})
	out["offsetfetch_v1"] = kafkatest.EncodeRequest(12, "c", of1)
	trunc := map[string][]byte{}
	for k, v := range out {
		trunc[k+"_trunc"] = v[:len(v)*2/3]
	}
	for k, v := range trunc {
		out[k] = v
	}
	return out
}

// decodeFrame reads one frame off data as the server does and decodes it
// against the consume-side APIs: nil and no error if data holds no whole
// frame.
func decodeFrame(data []byte) (*kafka.Request, error) {
	frame, err := kafka.ReadFrame(bytes.NewReader(data), 1<<20)
	if err != nil {
		return nil, nil
	}
	return kafka.DecodeRequest(frame, apis)
}

// FuzzCloudRequestServer is the slow end-to-end target (`make fuzz` runs
// it for FUZZTIME_SLOW; the fast target for the decoder is package kafka's
// FuzzDecodeRequest): it feeds bytes to the frame reader and the
// consume-side request decoder, and hands what decodes to the handlers,
// over a real table (two data files in partition 0) and offsets database.
// A fetch long-polls up to its 20 ms deadline, so it runs at tens of
// executions a second.
func FuzzCloudRequestServer(f *testing.F) {
	for _, s := range seedCloudRequests() {
		f.Add(s)
	}
	e := newCloudEnv(f, "n1")
	e.quiet = true
	e.commit(0, 10, 10)
	e.commit(0, 10, 10)
	cs := e.start(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeFrame(data)
		if err != nil || req == nil {
			return
		}
		if _, ok := apis[req.Key]; !ok {
			t.Fatalf("key %d admitted", req.Key)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if req.Key == kafka.SaslHandshakeKey || req.Key == kafka.SaslAuthenticateKey {
			return // answered by kafka.Server, never by the Handler
		}
		resp, _ := cs.Handle(ctx, req)
		if resp == nil {
			return
		}
		out := kafka.AppendResponse(nil, req, resp)
		if int(binary.BigEndian.Uint32(out)) != len(out)-4 {
			t.Fatal("bad response frame size")
		}
	})
}

func TestCloudFuzzSeedsCommitted(t *testing.T) {
	for name := range seedCloudRequests() {
		if _, err := readSeed("FuzzCloudRequestServer", name); err != nil {
			t.Fatalf("seed %s: %v (regenerate with -write-seeds)", name, err)
		}
	}
}

var writeSeeds = flag.Bool("write-seeds", false, "rewrite testdata/fuzz seed corpora")

// TestWriteFuzzSeeds regenerates the committed seed corpus with
// `go test ./kafka/consume -run TestWriteFuzzSeeds -write-seeds`.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -write-seeds to regenerate testdata/fuzz")
	}
	kafkatest.WriteFuzzSeeds(t, "FuzzCloudRequestServer", seedCloudRequests())
}

func readSeed(fuzz, name string) ([]byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("testdata/fuzz/%s/%s", fuzz, name))
	return b, err
}
