package console

import "time"

// Snapshot is what a host (an edge node, the cloud server, `dev`) tells the
// console at one instant. Every section is optional: a nil pointer or an
// empty list means "this host has none" and the page leaves the view out.
// Counters are cumulative since the host started; the console turns them
// into rates.
type Snapshot struct {
	Node      string            // node id, or the cloud server's name
	Role      string            // "edge", "cloud" or "dev"
	Started   time.Time         // when the host started
	Listeners map[string]string // listener name ("mqtt", "kafka", …) -> address

	WAL    *WAL
	Uplink *Uplink

	// Ingest counts messages made durable, by protocol and stream.
	Ingest []IngestCount
	// Refusals counts messages or requests refused, by a human reason
	// ("WAL budget full", "QoS 0 dropped", …).
	Refusals map[string]int64
	// Latency holds the host's latency histograms (see Histograms).
	Latency []Hist
	// Clients counts connected clients by protocol.
	Clients map[string]int64

	Streams   []Stream
	Cluster   *Cluster
	Consumers *Consumers
	// Certificates the host serves with; empty until TLS exists.
	Certificates []Certificate
	// Federation is the state of the mirrors in external catalogs (cloud
	// server with federation:; package federation).
	Federation []Mirrors
}

// Mirrors is one external catalog the streams are published into.
type Mirrors struct {
	Catalog string // its name
	URI     string
	Current int // mirrors up to date
	Behind  int // mirrors not (yet) up to date
	// Lag is the age of the oldest commit a mirror lacks.
	Lag       time.Duration
	LastError string
}

// WAL is the write-ahead log's fill.
type WAL struct {
	Records int64
	Bytes   int64
	Budget  int64 // 0 = unlimited
	// OldestAge is the age of the oldest record not yet committed to the
	// tables (0 when the WAL is empty).
	OldestAge time.Duration
	// BudgetRefusals counts appends refused because the budget was full.
	BudgetRefusals int64
}

// Uplink is the WAL → tables upload.
type Uplink struct {
	Commits          int64
	RecordsCommitted int64
	BytesUploaded    int64
	FilesUploaded    int64
	CommitFailures   int64
	UploadFailures   int64
	// LastCommitAge is the time since the last successful table commit
	// (since the host started when there was none).
	LastCommitAge time.Duration
	LastError     string
	// Failing lists the streams whose commits are failing now.
	Failing []string
	// Fenced counts partitions this node was fenced out of; Readmitted
	// the records of theirs that only this node held, re-admitted into
	// its own partition with new offsets.
	Fenced, Readmitted int64
}

// IngestCount is a cumulative count of durable messages.
type IngestCount struct {
	Protocol string // "mqtt", "kafka"
	Stream   string
	Messages int64
	Bytes    int64
}

// Stream is one table.
type Stream struct {
	Name       string
	Partitions []Partition
	// Table figures as of the last maintenance pass (zero when unknown).
	Snapshots     int
	DataFiles     int64
	Rows          int64
	DataBytes     int64 // size of the current snapshot's data files
	MetadataBytes int64
	Schema        []Column
	Maintenance   *Maintenance
	Recent        []Row // newest last
	// DeadLetters (a dead-letter table's stream) are the latest dead
	// letters this host committed to it, newest first, with their reasons.
	DeadLetters []DeadLetter
}

// DeadLetter is one record whose payload was not typed, and why.
type DeadLetter struct {
	Partition int32
	Offset    int64 // in the stream table (and the dead-letter table)
	At        time.Time
	Error     string
}

// Partition is one partition of a stream, as this host sees it.
type Partition struct {
	ID    int32
	Owner string // node id ("" when unknown)
	Epoch int64
	// NextOffset is the next offset this node will assign (its high-water
	// mark in the WAL); Committed the table's high-water mark when known
	// (-1 when unknown).
	NextOffset  int64
	Committed   int64
	Uncommitted int64 // records in the WAL not yet committed
	WALBytes    int64
	Fenced      bool
}

// Column is one column of a table's schema.
type Column struct {
	Name     string
	Type     string
	Required bool
}

// Maintenance is a table's maintenance status.
type Maintenance struct {
	LastPass     time.Time
	LastDuration time.Duration
	Passes       int64
	Failures     int64
	LastError    string
	LeaseHolder  string
}

// Row is one recent message of a stream.
type Row struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Topic     string
	Key       []byte
	Value     []byte // possibly truncated: ValueSize is the full length
	ValueSize int
	Source    string
	ClientID  string
}

// Cluster is the membership as this host sees it.
type Cluster struct {
	Gossip  bool
	Members []Member
	// ReplicationFactor is the configured factor (1 = no replication).
	ReplicationFactor int
	// Degraded is true while records are acknowledged with fewer replicas
	// than the factor asks for; LagRecords are not yet on every replica.
	Degraded   bool
	LagRecords int64
	// Lease is this node's owner lease and majority (nil without
	// replication: nothing can take its partitions over).
	Lease *Lease
	// Forwarding lists the forwarding of MQTT publishes to subscribers on
	// peers.
	Forwarding []Queue
}

// Lease is this node's owner lease in the catalog and its view of the
// site's majority (package lease).
type Lease struct {
	Valid     bool
	RenewedAt time.Time
	Error     string // the last renewal's error
	SiteSize  int
	Alive     int
	MayWrite  bool
}

// Member is one cluster member.
type Member struct {
	ID         string
	State      string // "alive", "suspect", "dead", "left"
	Since      time.Time
	Self       bool
	Partitions int
	WALBytes   int64
	WALBudget  int64
	UplinkOK   bool
	// ReplicatesTo lists the members holding this member's WAL replicas.
	ReplicatesTo []string
}

// Queue is the forwarding of messages to a peer (or to all peers).
type Queue struct {
	Peer      string
	Forwarded int64 // messages a peer acknowledged
	Dropped   int64 // messages not forwarded: queue full or peer gone
}

// Consumers is the consume side (cloud server and `dev`).
type Consumers struct {
	KafkaGroups []KafkaGroup
	// PulsarSubscriptions are listed when PulsarReported (a host whose
	// Pulsar server does not report them leaves it false).
	PulsarReported      bool
	PulsarSubscriptions []PulsarSubscription
}

// KafkaGroup is one Kafka consumer group.
type KafkaGroup struct {
	ID      string
	State   string
	Members []string
	Lag     []PartitionLag
}

// PartitionLag is one partition's committed offset and lag.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
}

// PulsarSubscription is one Pulsar subscription.
type PulsarSubscription struct {
	Topic     string
	Name      string
	Type      string
	Consumers int
	Backlog   int64
}

// Certificate is a served certificate.
type Certificate struct {
	Name     string
	NotAfter time.Time
}
