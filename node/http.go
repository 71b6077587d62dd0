package node

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/tables"
)

// Status is what /status reports.
type Status struct {
	Node      string         `json:"node"`
	Uptime    string         `json:"uptime"`
	Listeners map[string]any `json:"listeners"`
	WAL       WALStatus      `json:"wal"`
	Uplink    UplinkStatus   `json:"uplink"`
	Streams   []StreamStatus `json:"streams"`
	// Typed lists the streams with typed columns (payload infer).
	Typed []TypedStatus `json:"typed,omitempty"`
	MQTT  any           `json:"mqtt"`
	Kafka any           `json:"kafka,omitempty"`
}

// WALStatus is the WAL part of Status.
type WALStatus struct {
	Records          int64   `json:"records"`
	Bytes            int64   `json:"bytes"`
	MaxBytes         int64   `json:"max_bytes"`
	BudgetRejections int64   `json:"budget_rejections"`
	Commits          int64   `json:"commits"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// UplinkStatus is the uplink part of Status.
type UplinkStatus struct {
	State            string `json:"state"` // "ok" or "offline, buffering N MB"
	Commits          int64  `json:"commits"`
	CommitFailures   int64  `json:"commit_failures"`
	UploadFailures   int64  `json:"upload_failures"`
	FilesUploaded    int64  `json:"files_uploaded"`
	BytesUploaded    int64  `json:"bytes_uploaded"`
	RecordsCommitted int64  `json:"records_committed"`
	LastCommit       string `json:"last_commit,omitempty"`
	// LastCommitAgeSeconds is the time since the last successful table
	// commit (since the node started when there was none yet).
	LastCommitAgeSeconds float64  `json:"last_commit_age_seconds"`
	LastError            string   `json:"last_error,omitempty"`
	Failing              []string `json:"failing,omitempty"`
}

// StreamStatus is one stream partition of Status.
type StreamStatus struct {
	Stream      string `json:"stream"`
	Partition   int32  `json:"partition"`
	NextOffset  int64  `json:"next_offset"`
	Uncommitted int64  `json:"uncommitted"`
	WALBytes    int64  `json:"wal_bytes"`
}

// TypedStatus is one typed stream of Status: its payload mode, the
// records this node committed to its dead-letter table (and their rate
// since the node started) and the columns it added.
type TypedStatus struct {
	Stream            string  `json:"stream"`
	Mode              string  `json:"mode"`
	DeadLetterTable   string  `json:"dead_letter_table"`
	DeadLetters       int64   `json:"dead_letters"`
	DeadLettersPerMin float64 `json:"dead_letters_per_minute"`
	TypedColumnsAdded int64   `json:"typed_columns_added"`
}

// Status reports the node's state.
func (n *Node) Status() Status {
	ws := n.wal.Stats()
	us := n.up.Stats()
	ms := n.mqtt.Stats()
	st := Status{
		Node:      n.cfg.NodeID,
		Uptime:    time.Since(n.started).Round(time.Second).String(),
		Listeners: map[string]any{"mqtt": n.mqtt.Addrs(), "http": n.HTTPAddr()},
		WAL: WALStatus{Records: ws.Records, Bytes: ws.Bytes, MaxBytes: ws.MaxBytes,
			BudgetRejections: int64(ws.BudgetRejections), Commits: int64(ws.Commits)},
		Uplink: UplinkStatus{State: "ok", Commits: us.Commits, CommitFailures: us.CommitFailures,
			UploadFailures: us.UploadFailures, FilesUploaded: us.FilesUploaded, BytesUploaded: us.BytesUploaded,
			RecordsCommitted: us.RecordsCommitted, LastError: us.LastError, Failing: us.Failing},
		MQTT: ms,
	}
	if n.kafka != nil {
		st.Kafka = n.kafka.Stats()
		st.Listeners["kafka"] = n.kafka.Addr()
	}
	if !us.LastCommit.IsZero() {
		st.Uplink.LastCommit = us.LastCommit.UTC().Format(time.RFC3339Nano)
	}
	st.Uplink.LastCommitAgeSeconds = n.lastCommitAge(us.LastCommit).Seconds()
	if len(us.Failing) > 0 {
		st.Uplink.State = "offline, buffering " + formatMB(ws.Bytes)
	}
	var oldest int64
	for _, p := range n.wal.Partitions() {
		st.Streams = append(st.Streams, StreamStatus{Stream: p.Stream, Partition: p.Partition,
			NextOffset: p.Next, Uncommitted: p.Next - p.Released, WALBytes: p.Bytes})
		if p.OldestTimestamp > 0 && (oldest == 0 || p.OldestTimestamp < oldest) {
			oldest = p.OldestTimestamp
		}
	}
	if oldest > 0 {
		st.WAL.OldestAgeSeconds = time.Since(time.UnixMicro(oldest)).Seconds()
	}
	up := time.Since(n.started).Minutes()
	for stream, pol := range n.up.Payloads() {
		d := us.DeadLetters[stream]
		ts := TypedStatus{Stream: stream, Mode: string(pol.Mode), DeadLetterTable: tables.DLQStream(stream), DeadLetters: d,
			TypedColumnsAdded: us.TypedColumns[stream]}
		if up > 0 {
			ts.DeadLettersPerMin = float64(d) / up
		}
		st.Typed = append(st.Typed, ts)
	}
	sort.Slice(st.Typed, func(i, j int) bool { return st.Typed[i].Stream < st.Typed[j].Stream })
	sort.Slice(st.Streams, func(i, j int) bool {
		if st.Streams[i].Stream != st.Streams[j].Stream {
			return st.Streams[i].Stream < st.Streams[j].Stream
		}
		return st.Streams[i].Partition < st.Streams[j].Partition
	})
	return st
}

// lastCommitAge is the time since the last successful commit, or since the
// node started when nothing was committed yet.
func (n *Node) lastCommitAge(last time.Time) time.Duration {
	if last.IsZero() || last.Before(n.started) {
		last = n.started
	}
	return time.Since(last)
}

func formatMB(b int64) string {
	return json.Number(formatFloat(float64(b)/(1<<20))).String() + " MB"
}

func formatFloat(f float64) string {
	b, _ := json.Marshal(float64(int64(f*10)) / 10)
	return string(b)
}

func (n *Node) handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	n.registerMetrics(reg)
	n.registerClusterMetrics(reg)
	n.registerMQTTClusterMetrics(reg)
	reg.MustRegister(n.wal.Collectors()...)
	reg.MustRegister(n.auth.Collectors()...)
	reg.MustRegister(n.up.Collectors()...)
	reg.MustRegister(n.mqtt.PubackHistogram())
	if n.kafka != nil {
		reg.MustRegister(n.kafka.LatencyHistogram())
	}
	reg.MustRegister(newMaintCollector(n))
	reg.MustRegister(n.ingest.Collectors()...)
	for _, c := range n.collectors {
		reg.MustRegister(c)
	}
	prod, gprod := n.newHTTPProducer(), n.newGRPCProducer()
	reg.MustRegister(prod.Collectors()...)
	reg.MustRegister(gprod.Collectors()...)
	mux := http.NewServeMux()
	// OpenMetrics (when the scraper asks for it) carries the exemplars.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	top := http.NewServeMux()
	top.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// A WAL broken by a failed replicated commit refuses every write
		// until it is reopened: only a restart mends it, which is what a
		// failing liveness probe asks for.
		if err := n.wal.Stats().Broken; err != nil {
			http.Error(w, err.Error()+": restart the node", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	top.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// Ready when the WAL takes writes and the listeners are up; an
		// unreachable catalog is "buffering", which is still ready.
		if n.mqtt.Addrs()["tcp"] == "" && n.cfg.MQTT.Addr != "" {
			http.Error(w, "mqtt listener not up", http.StatusServiceUnavailable)
			return
		}
		if err := n.wal.Stats().Broken; err != nil {
			http.Error(w, err.Error()+": restart the node", http.StatusServiceUnavailable)
			return
		}
		ws := n.wal.Stats()
		if ws.MaxBytes > 0 && ws.Bytes >= ws.MaxBytes {
			http.Error(w, "wal budget exhausted: refusing QoS 1/2 publishes", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, n.Status())
	})
	mux.HandleFunc("GET /cluster", n.serveCluster)
	n.registerTestHooks(mux)
	// HTTP produce (Confluent REST v3) and /openapi.yaml: the producer
	// authenticates and authorizes each request itself.
	prod.Register(top)
	gprod.Register(top) // gRPC ProduceService (h2c or TLS; httpProtocols)
	// The operator's console: GET / (the page), /console/app.js|css,
	// /console/api (its JSON model).
	n.console = n.newConsole()
	n.console.Register(top, n.auth.AdminOnly)
	return n.auth.StatusPort(top, mux)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (n *Node) registerMetrics(reg *prometheus.Registry) {
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	gauge("tributary_wal_records", "Records in the WAL not yet committed to the tables.", func() float64 { return float64(n.wal.Stats().Records) })
	gauge("tributary_wal_broken", "1 while the WAL refuses every write because a group its replicas hold failed to commit (restart the node), else 0.", func() float64 {
		if n.wal.Stats().Broken != nil {
			return 1
		}
		return 0
	})
	gauge("tributary_wal_bytes", "Bytes of records in the WAL not yet committed.", func() float64 { return float64(n.wal.Stats().Bytes) })
	gauge("tributary_wal_budget_bytes", "The WAL disk budget.", func() float64 { return float64(n.wal.Stats().MaxBytes) })
	counter("tributary_wal_budget_rejections_total", "Appends refused because the WAL budget was exhausted.", func() float64 { return float64(n.wal.Stats().BudgetRejections) })
	counter("tributary_wal_commits_total", "WAL group commits (one fsync each).", func() float64 { return float64(n.wal.Stats().Commits) })
	counter("tributary_wal_appended_records_total", "Records appended to the WAL.", func() float64 { return float64(n.wal.Stats().AppendedRecords) })
	gauge("tributary_wal_oldest_record_age_seconds", "Age of the oldest record not yet committed.", func() float64 { return n.Status().WAL.OldestAgeSeconds })
	counter("tributary_wal_fsyncs_total", "WAL commits that were fsynced.", func() float64 { return float64(n.wal.Stats().Fsyncs) })
	counter("tributary_wal_commit_errors_total", "Failed WAL transactions.", func() float64 { return float64(n.wal.Stats().CommitErrors) })
	gauge("tributary_wal_last_commit_duration_seconds", "Duration of the last WAL group commit, fsync included.", func() float64 { return n.wal.Stats().LastCommitDuration.Seconds() })
	gauge("tributary_wal_last_commit_ops", "Operations (appends, releases) in the last WAL group commit, sharing one fsync.", func() float64 { return float64(n.wal.Stats().LastCommitOps) })
	counter("tributary_uplink_commits_total", "Table commits made by the uplink.", func() float64 { return float64(n.up.Stats().Commits) })
	counter("tributary_uplink_commit_failures_total", "Failed table commits (retried).", func() float64 { return float64(n.up.Stats().CommitFailures) })
	counter("tributary_uplink_upload_failures_total", "Failed object-store writes (retried).", func() float64 { return float64(n.up.Stats().UploadFailures) })
	counter("tributary_uplink_bytes_uploaded_total", "Bytes written to the object store.", func() float64 { return float64(n.up.Stats().BytesUploaded) })
	counter("tributary_uplink_records_committed_total", "Records committed to tables.", func() float64 { return float64(n.up.Stats().RecordsCommitted) })
	counter("tributary_uplink_files_uploaded_total", "Data files written to the object store.", func() float64 { return float64(n.up.Stats().FilesUploaded) })
	gauge("tributary_uplink_last_commit_age_seconds", "Seconds since the last successful table commit (since start when none yet): table freshness.", func() float64 { return n.lastCommitAge(n.up.Stats().LastCommit).Seconds() })
	counter("tributary_partition_fenced_total", "Partitions this node was fenced out of (another node took them over): their records in this WAL were dropped, not uploaded.", func() float64 { return float64(n.up.Stats().Fenced) })
	counter("tributary_uplink_readmitted_records_total", "Records of fenced partitions that only this node held (at or above the offset where the new owner's history starts), re-admitted with new offsets into this node's own partition of the stream instead of being quarantined.", func() float64 { return float64(n.up.Stats().ReadmittedRecords) })
	counter("tributary_uplink_quarantined_records_total", "Records of fenced partitions, and stale records a take-over removed, moved from the WAL to the quarantine folder (DATA_DIR/quarantine) instead of being dropped: replay them with `tributary quarantine replay`.", func() float64 { return float64(n.up.Stats().QuarantinedRecords) })
	counter("tributary_uplink_unproven_marks_total", "Uplink passes that found a partition's high-water mark covering offsets that no data file committed by this node under the records' epoch holds; those records stay in the WAL (repair the mark, or find who wrote the files).", func() float64 { return float64(n.up.Stats().UnprovenMarks) })
	counter("tributary_uplink_delta_commits_total", "Commits to the Delta logs of [iceberg, delta] streams (a Delta log beside the Iceberg table, over its files).", func() float64 { return float64(n.up.Stats().DeltaCommits) })
	counter("tributary_uplink_delta_checkpoints_total", "Parquet checkpoints written to Delta logs.", func() float64 { return float64(n.up.Stats().DeltaCheckpoints) })
	counter("tributary_uplink_delta_failures_total", "Failed syncs of a Delta log to its Iceberg table (a bad or unreachable log); the Iceberg commits go on and the log catches up once it can.", func() float64 { return float64(n.up.Stats().DeltaFailures) })
	gauge("tributary_uplink_failing_streams", "Streams whose commits are failing and in backoff.", func() float64 { return float64(len(n.up.Stats().Failing)) })
	gauge("tributary_mqtt_clients", "Connected MQTT clients.", func() float64 { return float64(n.mqtt.Stats().Clients) })
	for q := range 3 {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_mqtt_publishes_accepted_total",
			Help: "MQTT publishes made durable.", ConstLabels: prometheus.Labels{"qos": string(rune('0' + q))}},
			func() float64 { return float64(n.mqtt.Stats().Accepted[q]) }))
	}
	counter("tributary_mqtt_publishes_refused_total", "QoS 1/2 publishes refused (not acknowledged).", func() float64 { return float64(n.mqtt.Stats().Refused) })
	n.registerListenerMetrics(reg)
	counter("tributary_mqtt_publishes_refused_retained_total", "Retained publishes refused: the retained message limit (mqtt.max_retained, mqtt.max_retained_bytes) was reached.", func() float64 { return float64(n.mqtt.Stats().RefusedRetained) })
	counter("tributary_mqtt_connects_refused_sessions_total", "MQTT CONNECTs refused: the session limit (mqtt.max_sessions) was reached.", func() float64 { return float64(n.mqtt.Stats().RefusedSessions) })
	gauge("tributary_mqtt_retained_messages", "Retained messages held.", func() float64 { return float64(n.mqtt.Stats().Retained) })
	counter("tributary_mqtt_publishes_refused_budget_total", "QoS 1/2 publishes refused because the WAL budget was exhausted.", func() float64 { return float64(n.mqtt.Stats().RefusedBudget) })
	counter("tributary_mqtt_publishes_refused_replication_total", "QoS 1/2 publishes refused because too few replicas could store them (replication_policy refuse).", func() float64 { return float64(n.mqtt.Stats().RefusedReplication) })
	counter("tributary_mqtt_publishes_withheld_total", "QoS 1/2 publishes stored but not confirmed by the replicas in time: disconnected without an acknowledgement, remembered for the client's re-send.", func() float64 { return float64(n.mqtt.Stats().WithheldAcks) })
	counter("tributary_mqtt_publishes_resent_stored_total", "Re-sends (DUP) of withheld publishes, confirmed and acknowledged instead of stored again.", func() float64 { return float64(n.mqtt.Stats().ResentStored) })
	counter("tributary_mqtt_stored_evicted_total", "Remembered stored-but-unacknowledged publishes forgotten for the bound (65536, an hour); a re-send after that is stored again.", func() float64 { return float64(n.mqtt.Stats().StoredEvicted) })
	counter("tributary_mqtt_qos0_dropped_total", "QoS 0 publishes dropped because they could not be made durable.", func() float64 { return float64(n.mqtt.Stats().DroppedQoS0) })
	kstat := func(f func(s produce.Stats) int64) func() float64 {
		return func() float64 {
			if n.kafka == nil {
				return 0
			}
			return float64(f(n.kafka.Stats()))
		}
	}
	gauge("tributary_kafka_connections", "Open Kafka client connections.", kstat(func(s produce.Stats) int64 { return s.Connections }))
	counter("tributary_kafka_produced_records_total", "Kafka records made durable.", kstat(func(s produce.Stats) int64 { return s.ProducedRecords }))
	counter("tributary_kafka_produced_batches_total", "Kafka record batches made durable.", kstat(func(s produce.Stats) int64 { return s.ProducedBatches }))
	counter("tributary_kafka_duplicate_batches_total", "Idempotent retries answered without appending.", kstat(func(s produce.Stats) int64 { return s.DuplicateBatch }))
	counter("tributary_kafka_backpressure_total", "Produce partitions refused because the WAL budget was exhausted.", kstat(func(s produce.Stats) int64 { return s.Backpressure }))
	kafkaListener := prometheus.Labels{"listener": "kafka"} // the cloud's consume listener is kafka-cloud
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_kafka_inflight_bytes", ConstLabels: kafkaListener,
		Help: "Kafka request bytes held now (read, not yet answered), at most kafka.max_inflight_bytes."}, kstat(func(s produce.Stats) int64 { return s.InflightBytes })))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_kafka_inflight_waits_total", ConstLabels: kafkaListener,
		Help: "Kafka requests whose reading waited for kafka.max_inflight_bytes (back-pressure)."}, kstat(func(s produce.Stats) int64 { return s.InflightWaits })))
	counter("tributary_kafka_pipelined_requests_total", "Kafka requests read while an earlier request of the same connection was not yet answered (kafka.max_pipelined_requests).", kstat(func(s produce.Stats) int64 { return s.Pipelined }))
	counter("tributary_kafka_malformed_connections_total", "Kafka connections closed for a malformed frame or a request body not received within kafka.body_timeout.", kstat(func(s produce.Stats) int64 { return s.ClosedMalformed }))
	counter("tributary_mqtt_payload_bytes_total", "MQTT payload bytes made durable.", func() float64 { return float64(n.mqtt.Stats().PayloadBytes) })
}

// registerListenerMetrics exports the connection counters of the
// listeners that go through package listen, by listener name.
func (n *Node) registerListenerMetrics(reg *prometheus.Registry) {
	stats := n.listenerStats
	names := []string{"mqtt", "mqtt-ws", "http", "peer", "kafka"}
	for _, name := range names {
		l := prometheus.Labels{"listener": name}
		get := func(f func(listen.Stats) float64) func() float64 {
			return func() float64 { return f(stats()[name]) }
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_listener_connections", ConstLabels: l,
			Help: "Connections open now."}, get(func(s listen.Stats) float64 { return float64(s.Open) })))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_listener_refused_total", ConstLabels: mergeLabels(l, "reason", "max_connections"),
			Help: "Connections closed at accept because a cap was reached."}, get(func(s listen.Stats) float64 { return float64(s.RefusedMax) })))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_listener_refused_total", ConstLabels: mergeLabels(l, "reason", "max_connections_per_ip"),
			Help: "Connections closed at accept because a cap was reached."}, get(func(s listen.Stats) float64 { return float64(s.RefusedPerIP) })))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_listener_panics_total", ConstLabels: l,
			Help: "Connections (or HTTP requests) whose handler panicked: closed (or answered 500), the node kept running."}, get(func(s listen.Stats) float64 { return float64(s.Panics) })))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_listener_handshake_timeouts_total", ConstLabels: l,
			Help: "Connections closed because their handshake (MQTT CONNECT) did not complete in time."}, get(func(s listen.Stats) float64 { return float64(s.HandshakeTimeouts) })))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_listener_tls_handshake_failures_total", ConstLabels: l,
			Help: "Connections closed because their TLS handshake failed (not TLS, no or a bad client certificate)."}, get(func(s listen.Stats) float64 { return float64(s.TLSHandshakeFailures) })))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_listener_write_timeouts_total", ConstLabels: l,
			Help: "Connections closed because a write to them was blocked for the write timeout (the client does not read)."}, get(func(s listen.Stats) float64 { return float64(s.WriteTimeouts) })))
	}
}

func mergeLabels(l prometheus.Labels, k, v string) prometheus.Labels {
	out := prometheus.Labels{k: v}
	for a, b := range l {
		out[a] = b
	}
	return out
}

// listenerStats gathers the counters of the node's listeners by name.
func (n *Node) listenerStats() map[string]listen.Stats {
	out := n.mqtt.ListenerStats()
	if l, ok := n.httpLn.(*listen.Listener); ok {
		out["http"] = l.Stats()
	}
	if n.peer != nil {
		out["peer"] = n.peer.ListenerStats()
	}
	if n.kafka != nil {
		out["kafka"] = n.kafka.ListenerStats()
	}
	return out
}
