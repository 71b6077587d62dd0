package kafka

import (
	"crypto/sha1"
	"hash/fnv"
)

// BrokerID maps a node id to its Kafka broker id: FNV-1a 32 of the id with
// the sign bit cleared, so it is stable across restarts and nodes and never
// negative (-1 means "no leader" in Kafka).
func BrokerID(nodeID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return int32(h.Sum32() & 0x7fffffff)
}

// topicIDNamespace is a fixed random namespace for TopicID.
var topicIDNamespace = [16]byte{0x5c, 0x1f, 0x2b, 0x8e, 0x0d, 0x47, 0x4a, 0x1b, 0x9f, 0x3e, 0x61, 0x70, 0xa2, 0x44, 0xd9, 0x13}

// TopicID is a UUID v5 (SHA-1, RFC 9562) of the topic name in a fixed
// namespace: stable, never all zero.
func TopicID(topic string) [16]byte {
	h := sha1.New()
	h.Write(topicIDNamespace[:])
	h.Write([]byte(topic))
	var id [16]byte
	copy(id[:], h.Sum(nil))
	id[6] = id[6]&0x0f | 0x50
	id[8] = id[8]&0x3f | 0x80
	return id
}
