package tributary

// Header is one Kafka record header or MQTT 5 user property.
type Header struct {
	Key   string
	Value []byte
}

// Record is one accepted message. Records are self-describing: a peer holding
// a replica can upload them without the node that accepted them, and a row
// read back from a table is the same record.
//
// The caller of the WAL's Append fills every field but Offset (and
// Timestamp, when it leaves it zero); Append assigns Offset densely per
// (Stream, Partition). Records read from a table carry every field the
// table stores (Epoch and the producer fields are not stored; Principal is,
// and reads as "" from rows written before the column existed).
type Record struct {
	Stream    string // "namespace.stream"
	Partition int32  // global partition number of the stream's table
	Offset    int64  // dense per-partition offset, assigned by the WAL
	Epoch     int64  // ownership epoch of the partition when accepted
	Timestamp int64  // unix microseconds when the edge node accepted it; 0 = now

	Topic    string   // original MQTT or Kafka topic
	Key      []byte   // nil = null (MQTT has none)
	Value    []byte   // payload, byte-exact
	Headers  []Header // Kafka headers / MQTT 5 user properties, in order
	Source   string   // "mqtt" or "kafka"
	ClientID string
	Node     string

	// Principal is the authenticated identity that sent the record: the
	// user name of a password login, the subject CN of a client
	// certificate or the subject (or configured claim) of a JWT — the
	// Name of the connection's auth.Principal, never its String() ("" =
	// anonymous or not authenticated; "anonymous" is a name no principal
	// has). The table's principal column is then null. The front door
	// that accepted the record sets it; every later copy (WAL, replicas,
	// quarantine, table) keeps it.
	Principal string

	// Producer information (Kafka idempotent producers); zero for MQTT.
	ProducerID    int64
	ProducerEpoch int16
	Sequence      int32
	// ProducerTimestamp is the Kafka record timestamp (unix ms); 0 = none.
	ProducerTimestamp int64
}
