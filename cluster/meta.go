package cluster

import (
	"encoding/binary"
	"errors"
	"sort"
)

// Meta is what a member tells its peers about itself: where it listens,
// which partitions it writes and how its WAL and uplink are doing.
type Meta struct {
	MQTT  string `json:"mqtt,omitempty"`
	Kafka string `json:"kafka,omitempty"`
	HTTP  string `json:"http,omitempty"`
	// Peer is the data-plane address (package peer): forwarded MQTT
	// publishes, WAL replication, takeover.
	Peer string `json:"peer,omitempty"`
	// Partitions this member writes, stream -> partition.
	Partitions map[string]int32 `json:"partitions,omitempty"`
	// PartitionCount is the number of partitions the member writes; it
	// exceeds len(Partitions) when the gossiped metadata was truncated to
	// fit memberlist's limit (then GET /cluster on the member itself has
	// the full list).
	PartitionCount int   `json:"partition_count"`
	Truncated      bool  `json:"truncated,omitempty"`
	WALBytes       int64 `json:"wal_bytes"`
	WALBudget      int64 `json:"wal_budget"`
	// UplinkOK is false while commits to the tables are failing.
	UplinkOK bool `json:"uplink_ok"`
}

const (
	metaVersion   = 2 // 1 had no Peer address
	flagUplinkOK  = 1
	flagTruncated = 2
)

// encode writes m in a compact binary form of at most limit bytes:
// version, flags, three length-prefixed addresses, WAL bytes and budget
// as uvarints, the partition count, then as many (stream, partition)
// pairs, in stream order, as fit.
func (m Meta) encode(limit int) []byte {
	b := []byte{metaVersion, 0}
	if m.UplinkOK {
		b[1] |= flagUplinkOK
	}
	for _, s := range []string{m.MQTT, m.Kafka, m.HTTP, m.Peer} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(max(m.WALBytes, 0)))
	b = binary.AppendUvarint(b, uint64(max(m.WALBudget, 0)))
	streams := make([]string, 0, len(m.Partitions))
	for s := range m.Partitions {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	b = binary.AppendUvarint(b, uint64(len(streams)))
	for _, s := range streams {
		next := binary.AppendUvarint(appendString(b, s), uint64(m.Partitions[s]))
		if len(next) > limit {
			b[1] |= flagTruncated
			break
		}
		b = next
	}
	if len(b) > limit { // addresses alone do not fit: send nothing rather than garbage
		return nil
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errBadMeta = errors.New("cluster: malformed member metadata")

func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, nil
	}
	if len(b) < 2 || (b[0] != metaVersion && b[0] != 1) {
		return m, errBadMeta
	}
	m.UplinkOK = b[1]&flagUplinkOK != 0
	m.Truncated = b[1]&flagTruncated != 0
	r := b[2:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return 0, false
		}
		r = r[n:]
		return v, true
	}
	str := func() (string, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(r)) {
			return "", false
		}
		s := string(r[:n])
		r = r[n:]
		return s, true
	}
	ok := [4]bool{3: true}
	m.MQTT, ok[0] = str()
	m.Kafka, ok[1] = str()
	m.HTTP, ok[2] = str()
	if b[0] >= 2 {
		m.Peer, ok[3] = str()
	}
	if !ok[0] || !ok[1] || !ok[2] || !ok[3] {
		return Meta{}, errBadMeta
	}
	wb, ok1 := uv()
	wbud, ok2 := uv()
	cnt, ok3 := uv()
	if !ok1 || !ok2 || !ok3 || cnt > 1<<20 {
		return Meta{}, errBadMeta
	}
	m.WALBytes, m.WALBudget, m.PartitionCount = int64(wb), int64(wbud), int(cnt)
	for len(r) > 0 {
		s, ok := str()
		p, ok2 := uv()
		if !ok || !ok2 {
			return Meta{}, errBadMeta
		}
		if m.Partitions == nil {
			m.Partitions = map[string]int32{}
		}
		m.Partitions[s] = int32(p)
	}
	return m, nil
}
