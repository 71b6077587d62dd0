package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawBatch encodes an uncompressed v2 record batch of an idempotent
// producer with a correct CRC32C.
func rawBatch(pid int64, epoch int16, seq int32, keys ...string) []byte {
	var body []byte
	for i, k := range keys {
		var rb []byte
		rb = append(rb, 0)
		rb = binary.AppendVarint(rb, 0)
		rb = binary.AppendVarint(rb, int64(i))
		rb = binary.AppendVarint(rb, int64(len(k)))
		rb = append(rb, k...)
		v := "value of " + k
		rb = binary.AppendVarint(rb, int64(len(v)))
		rb = append(rb, v...)
		rb = binary.AppendVarint(rb, 0)
		body = binary.AppendVarint(body, int64(len(rb)))
		body = append(body, rb...)
	}
	now := time.Now().UnixMilli()
	b := binary.BigEndian.AppendUint64(nil, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(49+len(body)))
	b = binary.BigEndian.AppendUint32(b, 0)
	b = append(b, 2)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)-1))
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	b = binary.BigEndian.AppendUint64(b, uint64(pid))
	b = binary.BigEndian.AppendUint16(b, uint16(epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	b = append(b, body...)
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func produceRaw(t *testing.T, addr string, batch []byte) (int64, int16) {
	t.Helper()
	return produceRawTo(t, addr, "factory.telemetry", 0, batch)
}

// produceRawTo sends batch to topic's partition p in one Produce request
// (v9, acks all) and returns the partition's base offset and error code.
func produceRawTo(t *testing.T, addr, topic string, p int32, batch []byte) (int64, int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = p
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	pr := resp.Topics[0].Partitions[0]
	return pr.BaseOffset, pr.ErrorCode
}

func initProducer(t *testing.T, addr string) (int64, int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrInitProducerIDRequest()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("init producer id: %v code %d", err, resp.ErrorCode)
	}
	return resp.ProducerID, resp.ProducerEpoch
}

// TestKafkaDedupAcrossRestart replays an idempotent producer's batch after
// kill -9, exactly as a producer whose response was lost would: once while
// the batch is still in the WAL (state rebuilt from WAL records) and once
// after the uplink committed and released it (state from the node's
// producer snapshot). Both replays get the original offset; nothing is
// appended twice. Producer ids are never reused across restarts.
func TestKafkaDedupAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		released bool
	}{{"in-wal", false}, {"released", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			addr := freeLoopbackPort(t)
			args := []string{"--kafka-addr", addr}
			if !tc.released {
				args = append(args, "--commit-interval", "1h")
			}
			p := startDev(t, dir, args...)
			pid, epoch := initProducer(t, addr)
			first := rawBatch(pid, epoch, 0, "a0", "a1", "a2")
			off0, code := produceRaw(t, addr, first)
			if code != 0 {
				t.Fatalf("first produce: error %d", code)
			}
			second := rawBatch(pid, epoch, 3, "b0", "b1")
			if off, code := produceRaw(t, addr, second); code != 0 || off != off0+3 {
				t.Fatalf("second produce: offset %d error %d", off, code)
			}
			if tc.released {
				waitFor(t, 30*time.Second, "WAL drained", func() bool { return walDrained(t, p) })
			}
			p.kill()
			p = startDev(t, dir, args...)
			for i, b := range [][]byte{first, second} {
				off, code := produceRaw(t, addr, b)
				if code != 0 || off != off0+int64(3*i) {
					t.Fatalf("replay %d after restart: offset %d error %d, want offset %d and no error", i, off, code, off0+int64(3*i))
				}
			}
			// The next sequence continues; a gap is refused.
			if off, code := produceRaw(t, addr, rawBatch(pid, epoch, 5, "c0")); code != 0 || off != off0+5 {
				t.Fatalf("next batch: offset %d error %d", off, code)
			}
			if _, code := produceRaw(t, addr, rawBatch(pid, epoch, 9, "gap")); code != 45 {
				t.Fatalf("out-of-order sequence: error %d, want 45 OUT_OF_ORDER_SEQUENCE_NUMBER", code)
			}
			if pid2, _ := initProducer(t, addr); pid2 == pid {
				t.Fatalf("producer id %d handed out again after restart", pid)
			}
			p.stop()
			rows := readTable(t, dir, "factory.telemetry")
			checkDense(t, rows)
			keys := map[string]int{}
			for _, r := range rows {
				keys[string(r.Key)]++
			}
			for _, k := range []string{"a0", "a1", "a2", "b0", "b1", "c0"} {
				if keys[k] != 1 {
					t.Fatalf("key %s appears %d times; rows %v", k, keys[k], fmt.Sprint(keys))
				}
			}
			if len(rows) != 6 {
				t.Fatalf("%d rows, want 6", len(rows))
			}
		})
	}
}
