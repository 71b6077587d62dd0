package consume

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/listen"
	"github.com/tributary-io/tributary/offsets"
	"github.com/tributary-io/tributary/tables"
)

// Config configures a Server, the consume side. Zero values take the
// defaults below.
type Config struct {
	// Config holds the listener settings (Addr, AdvertisedAddr,
	// ClusterID, MaxFrameBytes, IdleTimeout, Logger).
	kafka.Config
	// Peers are the advertised host:port of every cloud server of the
	// cluster, this one included. Each server computes the coordinator of
	// a group (and the nominal leader of a partition) by a rendezvous hash
	// over this list, so all agree as long as they are configured alike.
	// Empty = this server alone.
	Peers []string
	// OffsetsDB is the SQL database holding committed group offsets:
	// "sqlite:///abs/path.db", a path ending in .db, or a
	// postgres://user:pw@host/db DSN — normally the catalog database
	// itself. Required.
	OffsetsDB string
	// RowCacheBytes bounds the LRU of decoded row groups. Default 256 MiB.
	RowCacheBytes int64
	// MetadataMaxAge is how stale cached table metadata may be. Default 100ms.
	MetadataMaxAge time.Duration
	// BatchCacheBytes bounds the LRU of encoded record batches, kept per
	// row group (batches.go). Default 256 MiB; at least 1 MiB.
	BatchCacheBytes int64
	// MaxGroups caps the consumer groups this server coordinates: groups
	// with members (or member ids handed out) and groups with committed
	// offsets in OffsetsDB, which Start reloads, so a restart does not
	// lift the cap. A JoinGroup or OffsetCommit that would add one more
	// is refused with POLICY_VIOLATION. Default 10000; -1 = no cap.
	MaxGroups int
	// MaxGroupMembers caps a group's members, member ids handed out with
	// MEMBER_ID_REQUIRED and not yet used included; a join beyond it gets
	// GROUP_MAX_SIZE_REACHED (Kafka's group.max.size). Default 1000;
	// -1 = no cap.
	MaxGroupMembers int
	// MaxGroupOffsets caps the committed offsets ((topic, partition)
	// pairs, over time) one group holds; an OffsetCommit that would store
	// more is refused whole, POLICY_VIOLATION on each of its partitions.
	// Default 100000; -1 = no cap.
	MaxGroupOffsets int
	// OffsetsRetention: the offsets of a group with no members here whose
	// latest commit is older than this are deleted (Kafka's
	// offsets.retention.minutes), and the group stops counting toward
	// MaxGroups. Default 168h (7 days); -1 = kept forever.
	OffsetsRetention time.Duration
	// Reader, if set, is the table reader (and its caches) to serve from,
	// shared with the other protocol servers of the process; RowCacheBytes
	// and MetadataMaxAge are then the reader's. Nil = a reader of its own.
	Reader *tables.Reader
	// Tail, if set, serves the offsets of cloud-produced partitions
	// beyond their table's mark (tail.go). Nil = the table's mark only.
	Tail Tail
	// Producer, if set, answers Produce and InitProducerId (tail.go).
	// Nil = Produce is refused (produce.go).
	Producer Producer
}

// Defaults of the consume side.
const (
	DefaultRowCacheBytes    = tables.DefaultRowCacheBytes
	DefaultMetadataMaxAge   = tables.DefaultMetadataMaxAge
	DefaultAddr             = "127.0.0.1:19092"
	DefaultMaxGroups        = 10000
	DefaultMaxGroupMembers  = 1000
	DefaultMaxGroupOffsets  = 100000
	DefaultOffsetsRetention = 7 * 24 * time.Hour
)

// apis are the API keys and versions the consume side implements;
// see the file of each key for the reasons of its range.
var apis = kafka.APIs{
	kafka.ProduceKey:         {Min: 3, Max: 12}, // refused; for librdkafka's feature detection (produce.go)
	kafka.FetchKey:           {Min: 4, Max: 12},
	kafka.ListOffsetsKey:     {Min: 1, Max: 6},
	kafka.MetadataKey:        {Min: 0, Max: 12},
	kafka.OffsetCommitKey:    {Min: 0, Max: 8},
	kafka.OffsetFetchKey:     {Min: 0, Max: 7},
	kafka.FindCoordinatorKey: {Min: 0, Max: 4},
	kafka.JoinGroupKey:       {Min: 0, Max: 9},
	kafka.HeartbeatKey:       {Min: 0, Max: 4},
	kafka.LeaveGroupKey:      {Min: 0, Max: 5},
	kafka.SyncGroupKey:       {Min: 0, Max: 5},
	kafka.DescribeGroupsKey:  {Min: 0, Max: 5},
	kafka.ListGroupsKey:      {Min: 0, Max: 4},
	kafka.ApiVersionsKey:     kafka.ApiVersionsVersions,
	// Answered by kafka.Server (SASL authentication).
	kafka.SaslHandshakeKey:    kafka.SaslHandshakeVersions,
	kafka.SaslAuthenticateKey: kafka.SaslAuthenticateVersions,
}

// Server serves Kafka consumers from the stream tables (see the
// package documentation).
type Server struct {
	conn    *kafka.Server
	cfg     kafka.Config // the listener's, defaults applied
	log     *slog.Logger
	ccfg    Config
	cat     *tables.Catalog
	tc      *tables.Reader
	groups  *groups
	offsets *offsets.Store
	// commitLocks serialise each group's commits (caps.go).
	commitLocks commitLocks
	batches     *batchCache
	apis        kafka.APIs // apis, with InitProducerId when there is a Producer
}

// NewServer validates cfg, opens the committed-offsets database and
// returns a server that is not yet listening.
func NewServer(cfg Config, cat *tables.Catalog) (*Server, error) {
	if cat == nil {
		return nil, fmt.Errorf("%w: nil catalog", kafka.ErrInvalidConfig)
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if err := cfg.Config.Validate(); err != nil {
		return nil, err
	}
	cfg.SetDefaults()
	if cfg.RowCacheBytes == 0 {
		cfg.RowCacheBytes = DefaultRowCacheBytes
	}
	if cfg.MetadataMaxAge == 0 {
		cfg.MetadataMaxAge = DefaultMetadataMaxAge
	}
	if cfg.BatchCacheBytes == 0 {
		cfg.BatchCacheBytes = DefaultBatchCacheBytes
	}
	if cfg.BatchCacheBytes < 1<<20 {
		return nil, fmt.Errorf("%w: batch cache bytes %d: at least 1 MiB", kafka.ErrInvalidConfig, cfg.BatchCacheBytes)
	}
	if err := cfg.capDefaults(); err != nil {
		return nil, err
	}
	for _, p := range cfg.Peers {
		if _, _, err := kafka.SplitHostPort32(p); err != nil {
			return nil, fmt.Errorf("%w: peer %q: %v", kafka.ErrInvalidConfig, p, err)
		}
	}
	if cfg.OffsetsDB == "" {
		return nil, fmt.Errorf("%w: offsets database required", kafka.ErrInvalidConfig)
	}
	cs := &Server{cfg: cfg.Config, ccfg: cfg, cat: cat}
	table := apis
	if cfg.Producer != nil {
		table = maps.Clone(apis)
		table[kafka.InitProducerIDKey] = kafka.VersionRange{Min: 0, Max: 4}
	}
	cs.apis = table
	conn, err := kafka.NewServer(cfg.Config, "kafka-cloud", table, cs)
	if err != nil {
		return nil, err
	}
	os, err := offsets.Open(cfg.OffsetsDB)
	if errors.Is(err, tables.ErrStateDBURI) {
		return nil, fmt.Errorf("%w: offsets database: %v", kafka.ErrInvalidConfig, err)
	}
	if err != nil {
		return nil, err
	}
	cs.conn, cs.log, cs.offsets = conn, conn.Logger(), os
	cs.tc = cfg.Reader
	if cs.tc == nil {
		cs.tc = tables.NewReader(cat, tables.ReaderConfig{MetadataMaxAge: cfg.MetadataMaxAge, RowCacheBytes: cfg.RowCacheBytes})
	}
	cs.ccfg.MetadataMaxAge = cs.tc.MetadataMaxAge()
	cs.groups = newGroups(cs.log, cfg.MaxGroups, cfg.MaxGroupMembers)
	cs.batches = newBatchCache(cfg.BatchCacheBytes, cs.log.Warn)
	return cs, nil
}

// Start listens on cfg.Addr and serves connections in the background.
// The groups with committed offsets are loaded (MaxGroups) before any
// request is served.
func (cs *Server) Start() error {
	cs.groups.mu.Lock()
	if err := cs.conn.Start("mode", "consume", "peers", len(cs.ccfg.Peers)); err != nil {
		cs.groups.mu.Unlock()
		return err
	}
	err := cs.loadStoredGroups(context.Background())
	cs.groups.mu.Unlock()
	if err != nil {
		cs.conn.Close(context.Background())
		return err
	}
	go cs.groups.sweep(cs.conn.Context())
	go cs.expireOffsetsLoop(cs.conn.Context())
	return nil
}

// Addr is the listener's address (useful with port 0), or "" before Start.
func (cs *Server) Addr() string { return cs.conn.Addr() }

// Stats returns a snapshot of the connection counters.
func (cs *Server) Stats() kafka.Stats { return cs.conn.Stats() }

// Close stops the listener and connections (see kafka.Server.Close), then
// closes the offsets database. Waiting requests (long-poll fetches, joins
// and syncs) are answered at once. Group membership is lost (clients
// rejoin); committed offsets are not.
func (cs *Server) Close(ctx context.Context) error {
	cs.conn.Cancel()
	err := cs.conn.Close(ctx)
	return errors.Join(err, cs.offsets.Close())
}

// Handle dispatches one request (kafka.Handler).
func (cs *Server) Handle(ctx context.Context, req *kafka.Request) (kmsg.Response, bool) {
	switch r := req.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		return kafka.HandleApiVersions(req, r, cs.apis), false
	case *kmsg.MetadataRequest:
		return cs.handleMetadata(ctx, req, r), false
	case *kmsg.ProduceRequest, *kmsg.InitProducerIDRequest:
		if cs.ccfg.Producer != nil {
			return cs.ccfg.Producer.Handle(ctx, req)
		}
		if resp := cs.handleProduce(req, r.(*kmsg.ProduceRequest)); resp != nil {
			return resp, false
		}
		return nil, false
	case *kmsg.ListOffsetsRequest:
		return cs.handleListOffsets(ctx, req, r), false
	case *kmsg.FetchRequest:
		return cs.handleFetch(ctx, req, r), false
	case *kmsg.FindCoordinatorRequest:
		return cs.handleFindCoordinator(req, r), false
	case *kmsg.JoinGroupRequest:
		return cs.handleJoinGroup(ctx, req, r), false
	case *kmsg.SyncGroupRequest:
		return cs.handleSyncGroup(ctx, req, r), false
	case *kmsg.HeartbeatRequest:
		return cs.handleHeartbeat(req, r), false
	case *kmsg.LeaveGroupRequest:
		return cs.handleLeaveGroup(req, r), false
	case *kmsg.OffsetCommitRequest:
		return cs.handleOffsetCommit(ctx, req, r), false
	case *kmsg.OffsetFetchRequest:
		return cs.handleOffsetFetch(ctx, req, r), false
	case *kmsg.DescribeGroupsRequest:
		return cs.handleDescribeGroups(req, r), false
	case *kmsg.ListGroupsRequest:
		return cs.handleListGroups(req, r), false
	}
	panic(fmt.Sprintf("kafka: no cloud handler for key %d", req.Key))
}

// selfAddr is this server's advertised host:port.
func (cs *Server) selfAddr() string {
	h, p := cs.conn.Advertised()
	return net.JoinHostPort(h, fmt.Sprint(p))
}

// peerList is the sorted, deduplicated peer list, always including self.
func (cs *Server) peerList() []string {
	self := cs.selfAddr()
	seen := map[string]bool{self: true}
	out := []string{self}
	for _, p := range cs.ccfg.Peers {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// rendezvous picks the peer with the highest hash of (key, peer).
func rendezvous(key string, peers []string) string {
	var best string
	var bestH uint64
	for _, p := range peers {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(p))
		if v := h.Sum64(); best == "" || v > bestH {
			best, bestH = p, v
		}
	}
	return best
}

// coordinator is the peer coordinating group.
func (cs *Server) coordinator(group string) string {
	return rendezvous("group\x00"+group, cs.peerList())
}

func (cs *Server) isCoordinator(group string) bool {
	return cs.coordinator(group) == cs.selfAddr()
}

// peerBroker is the broker id and address of a peer.
func peerBroker(addr string) (int32, string, int32) {
	h, p, _ := kafka.SplitHostPort32(addr)
	return kafka.BrokerID(addr), h, p
}

// mayConsume decides a topic (audited when denied).
func mayConsume(req *kafka.Request, topic string) bool {
	return req.Authorize(auth.Consume, topic, "")
}

// mayUseGroup decides a consumer group (audited when denied).
func mayUseGroup(req *kafka.Request, group string) bool {
	return req.Authorize(auth.Consume, "", group)
}

// groupCode is the error of a request about group before its own checks:
// GROUP_AUTHORIZATION_FAILED when the principal may not use it,
// NOT_COORDINATOR when another server coordinates it, else 0.
func (cs *Server) groupCode(req *kafka.Request, group string) int16 {
	switch {
	case !mayUseGroup(req, group):
		return kafka.CodeGroupAuthorizationFailed
	case !cs.isCoordinator(group):
		return kafka.CodeNotCoordinator
	}
	return 0
}

// streamOf validates a topic name as a stream name.
func streamOf(topic string) (string, bool) {
	if _, _, err := tributary.ParseStream(topic); err != nil {
		return "", false
	}
	return topic, !strings.ContainsAny(topic, "/ ")
}

// ListenerStats are the listener's connection counters.
func (cs *Server) ListenerStats() listen.Stats { return cs.conn.ListenerStats() }

// deniedTopics decides each distinct topic of a request once (a denial
// audited once) and returns those the principal may not consume.
func deniedTopics[T any](req *kafka.Request, topics []T, name func(T) string) map[string]bool {
	var denied map[string]bool
	seen := map[string]bool{}
	for _, t := range topics {
		n := name(t)
		if seen[n] {
			continue
		}
		seen[n] = true
		if !mayConsume(req, n) {
			if denied == nil {
				denied = map[string]bool{}
			}
			denied[n] = true
		}
	}
	return denied
}
