package console

import (
	"encoding/hex"
	"sort"
	"time"
	"unicode/utf8"
)

// Model is what GET /console/api returns: the page polls it once a second.
// Field names are stable (the Grafana-less operator's API); figures carry
// their unit in the name.
type Model struct {
	Node          string            `json:"node"`
	Role          string            `json:"role"`
	Now           time.Time         `json:"now"`
	UptimeSeconds float64           `json:"uptime_seconds"`
	Listeners     map[string]string `json:"listeners,omitempty"`
	// IntervalMS is the sampling interval of the charts; WindowSeconds
	// how far back they go.
	IntervalMS    int64     `json:"interval_ms"`
	WindowSeconds float64   `json:"window_seconds"`
	Health        []Alert   `json:"health"`
	Overview      Overview  `json:"overview"`
	Charts        []Chart   `json:"charts"`
	Streams       []StreamV `json:"streams"`
	Cluster       *ClusterV `json:"cluster,omitempty"`
	Consumers     *ConsV    `json:"consumers,omitempty"`
}

// Alert is one health banner.
type Alert struct {
	ID       string `json:"id"`
	Severity string `json:"severity"` // "critical" or "warning"
	Title    string `json:"title"`
	Detail   string `json:"detail"`
	Action   string `json:"action"` // what to do
}

// Overview is the headline figures.
type Overview struct {
	IngestPerSecond      float64          `json:"ingest_per_second"`
	CommittedPerSecond   float64          `json:"committed_per_second"`
	Clients              map[string]int64 `json:"clients,omitempty"`
	WALBytes             int64            `json:"wal_bytes"`
	WALBudgetBytes       int64            `json:"wal_budget_bytes"`
	WALRecords           int64            `json:"wal_records"`
	WALFillPercent       float64          `json:"wal_fill_percent"`
	OldestUnuploadedSec  float64          `json:"oldest_unuploaded_seconds"`
	LastCommitAgeSeconds *float64         `json:"last_commit_age_seconds,omitempty"`
	UplinkState          string           `json:"uplink_state,omitempty"` // "ok", "failing", "idle"
	UplinkLastError      string           `json:"uplink_last_error,omitempty"`
	RowsCommitted        int64            `json:"rows_committed"`
	BytesUploaded        int64            `json:"bytes_uploaded"`
	// RecordsReadmitted counts fenced records only this node held, moved
	// into its own partition with new offsets (0: none, no tile).
	RecordsReadmitted int64   `json:"records_readmitted,omitempty"`
	Refusals          []Count `json:"refusals"` // cumulative, by reason
}

// Count is a labelled cumulative count.
type Count struct {
	Label string `json:"label"`
	Value int64  `json:"value"`
}

// Chart is one time series chart: T are unix milliseconds, each series has
// one value (or null for a gap) per T.
type Chart struct {
	ID     string   `json:"id"`
	Title  string   `json:"title"`
	Unit   string   `json:"unit"`
	MinTop float64  `json:"min_top,omitempty"` // least top of the y axis
	T      []int64  `json:"t"`
	Series []Series `json:"series"`
}

// Series is one line of a chart; Points counts its non-null values.
type Series struct {
	Key    string     `json:"key"`
	Label  string     `json:"label"`
	V      []*float64 `json:"v"`
	Points int        `json:"points"`
}

// StreamV is one stream of the streams view.
type StreamV struct {
	Name          string       `json:"name"`
	Partitions    []PartitionV `json:"partitions"`
	Snapshots     int          `json:"snapshots"`
	DataFiles     int64        `json:"data_files"`
	Rows          int64        `json:"rows"`
	DataBytes     int64        `json:"data_bytes"`
	MetadataBytes int64        `json:"metadata_bytes"`
	Schema        []ColumnV    `json:"schema,omitempty"`
	Maintenance   *MaintV      `json:"maintenance,omitempty"`
	Recent        []RowV       `json:"recent"`
	// DeadLetters: a dead-letter table's latest rows, newest first.
	DeadLetters []DeadLetterV `json:"dead_letters,omitempty"`
}

// DeadLetterV is one dead letter with its reason.
type DeadLetterV struct {
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	At        time.Time `json:"at"`
	Error     string    `json:"error"`
}

// PartitionV is one partition of a stream.
type PartitionV struct {
	ID          int32  `json:"id"`
	Owner       string `json:"owner,omitempty"`
	Epoch       int64  `json:"epoch"`
	NextOffset  int64  `json:"next_offset"`
	Committed   int64  `json:"committed"` // -1 = unknown
	Uncommitted int64  `json:"uncommitted"`
	WALBytes    int64  `json:"wal_bytes"`
	Fenced      bool   `json:"fenced,omitempty"`
}

// ColumnV is a schema column.
type ColumnV struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required,omitempty"`
}

// MaintV is a table's maintenance status.
type MaintV struct {
	LastPass        *time.Time `json:"last_pass,omitempty"`
	LastDurationSec float64    `json:"last_duration_seconds"`
	Passes          int64      `json:"passes"`
	Failures        int64      `json:"failures"`
	LastError       string     `json:"last_error,omitempty"`
	LeaseHolder     string     `json:"lease_holder,omitempty"`
}

// RowV is a recent message; Value is text when it is valid UTF-8, else
// hex (Encoding says which).
type RowV struct {
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`
	Topic     string    `json:"topic"`
	Key       string    `json:"key,omitempty"`
	Value     string    `json:"value"`
	Encoding  string    `json:"encoding"` // "text" or "hex"
	Size      int       `json:"size"`
	Truncated bool      `json:"truncated,omitempty"`
	Source    string    `json:"source"`
	ClientID  string    `json:"client_id,omitempty"`
}

// ClusterV is the cluster view.
type ClusterV struct {
	Gossip            bool      `json:"gossip"`
	ReplicationFactor int       `json:"replication_factor"`
	Degraded          bool      `json:"degraded"`
	LagRecords        int64     `json:"lag_records"`
	Members           []MemberV `json:"members"`
	Forwarding        []QueueV  `json:"forwarding,omitempty"`
}

// MemberV is one member.
type MemberV struct {
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Since        time.Time `json:"since"`
	Self         bool      `json:"self,omitempty"`
	Partitions   int       `json:"partitions"`
	WALBytes     int64     `json:"wal_bytes"`
	WALBudget    int64     `json:"wal_budget"`
	UplinkOK     bool      `json:"uplink_ok"`
	ReplicatesTo []string  `json:"replicates_to,omitempty"`
}

// QueueV is a forwarding queue.
type QueueV struct {
	Peer      string `json:"peer"`
	Forwarded int64  `json:"forwarded"`
	Dropped   int64  `json:"dropped"`
}

// ConsV is the consumers view.
type ConsV struct {
	KafkaGroups []KafkaGroupV `json:"kafka_groups"`
	// PulsarSubscriptions is null when the host does not report them.
	PulsarSubscriptions []PulsarSubV `json:"pulsar_subscriptions"`
}

// KafkaGroupV is a consumer group.
type KafkaGroupV struct {
	ID       string         `json:"id"`
	State    string         `json:"state,omitempty"`
	Members  []string       `json:"members"`
	TotalLag int64          `json:"total_lag"`
	Lag      []PartitionLag `json:"partitions"`
}

// PulsarSubV is a subscription.
type PulsarSubV struct {
	Topic     string `json:"topic"`
	Name      string `json:"name"`
	Type      string `json:"type,omitempty"`
	Consumers int    `json:"consumers"`
	Backlog   int64  `json:"backlog"`
}

// maxValueShown bounds a recent row's value on the page.
const maxValueShown = 256

func rowView(r Row) RowV {
	v := RowV{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp.UTC(), Topic: r.Topic,
		Size: r.ValueSize, Source: r.Source, ClientID: r.ClientID}
	if v.Size < len(r.Value) {
		v.Size = len(r.Value)
	}
	val := r.Value
	if len(val) > maxValueShown {
		val = val[:maxValueShown]
	}
	v.Truncated = v.Size > len(val)
	if printable(val) {
		v.Value, v.Encoding = string(val), "text"
	} else {
		v.Value, v.Encoding = hex.EncodeToString(val), "hex"
	}
	if r.Key != nil {
		if printable(r.Key) {
			v.Key = string(r.Key)
		} else {
			v.Key = "0x" + hex.EncodeToString(r.Key)
		}
	}
	return v
}

// printable is valid UTF-8 without control characters other than
// whitespace (a truncated multi-byte tail is tolerated).
func printable(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' || r == 0x7f {
			return false
		}
		b = b[n:]
	}
	return true
}

func streamViews(ss []Stream) []StreamV {
	out := make([]StreamV, 0, len(ss))
	for _, s := range ss {
		v := StreamV{Name: s.Name, Snapshots: s.Snapshots, DataFiles: s.DataFiles, Rows: s.Rows,
			DataBytes: s.DataBytes, MetadataBytes: s.MetadataBytes, Recent: []RowV{}, Partitions: []PartitionV{}}
		for _, p := range s.Partitions {
			v.Partitions = append(v.Partitions, PartitionV(p))
		}
		sort.Slice(v.Partitions, func(i, j int) bool { return v.Partitions[i].ID < v.Partitions[j].ID })
		for _, c := range s.Schema {
			v.Schema = append(v.Schema, ColumnV(c))
		}
		if m := s.Maintenance; m != nil {
			mv := &MaintV{LastDurationSec: m.LastDuration.Seconds(), Passes: m.Passes, Failures: m.Failures,
				LastError: m.LastError, LeaseHolder: m.LeaseHolder}
			if !m.LastPass.IsZero() {
				t := m.LastPass.UTC()
				mv.LastPass = &t
			}
			v.Maintenance = mv
		}
		for i := len(s.Recent) - 1; i >= 0; i-- { // newest first
			v.Recent = append(v.Recent, rowView(s.Recent[i]))
		}
		for _, d := range s.DeadLetters {
			v.DeadLetters = append(v.DeadLetters, DeadLetterV{Partition: d.Partition, Offset: d.Offset, At: d.At.UTC(), Error: d.Error})
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func clusterView(c *Cluster) *ClusterV {
	if c == nil {
		return nil
	}
	v := &ClusterV{Gossip: c.Gossip, ReplicationFactor: max(c.ReplicationFactor, 1), Degraded: c.Degraded,
		LagRecords: c.LagRecords, Members: []MemberV{}}
	for _, m := range c.Members {
		v.Members = append(v.Members, MemberV(m))
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
	for _, q := range c.Forwarding {
		v.Forwarding = append(v.Forwarding, QueueV(q))
	}
	return v
}

func consumersView(c *Consumers) *ConsV {
	if c == nil {
		return nil
	}
	v := &ConsV{KafkaGroups: []KafkaGroupV{}}
	if c.PulsarReported {
		v.PulsarSubscriptions = []PulsarSubV{}
	}
	for _, g := range c.KafkaGroups {
		gv := KafkaGroupV{ID: g.ID, State: g.State, Members: g.Members, Lag: g.Lag}
		if gv.Members == nil {
			gv.Members = []string{}
		}
		for _, l := range g.Lag {
			gv.TotalLag += l.Lag
		}
		v.KafkaGroups = append(v.KafkaGroups, gv)
	}
	for _, s := range c.PulsarSubscriptions {
		v.PulsarSubscriptions = append(v.PulsarSubscriptions, PulsarSubV(s))
	}
	return v
}
