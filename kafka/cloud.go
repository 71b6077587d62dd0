package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// CloudConfig configures a CloudServer, the consume side. Zero values take
// the defaults below.
type CloudConfig struct {
	// Config holds the listener settings shared with the produce side
	// (Addr, AdvertisedAddr, ClusterID, MaxFrameBytes, IdleTimeout, Logger);
	// the produce-only fields are ignored.
	Config
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
	// Reader, if set, is the table reader (and its caches) to serve from,
	// shared with the other protocol servers of the process; RowCacheBytes
	// and MetadataMaxAge are then the reader's. Nil = a reader of its own.
	Reader *tables.Reader
}

// Defaults of the consume side.
const (
	DefaultRowCacheBytes  = tables.DefaultRowCacheBytes
	DefaultMetadataMaxAge = tables.DefaultMetadataMaxAge
	DefaultCloudAddr      = "127.0.0.1:19092"
)

// cloudAPIs are the API keys and versions the consume side implements;
// see the file of each key for the reasons of its range.
var cloudAPIs = map[int16]versionRange{
	produceKey:         {3, 12}, // refused; for librdkafka's feature detection (cloud_produce.go)
	fetchKey:           {4, 12},
	listOffsetsKey:     {1, 6},
	metadataKey:        {0, 12},
	offsetCommitKey:    {0, 8},
	offsetFetchKey:     {0, 7},
	findCoordinatorKey: {0, 4},
	joinGroupKey:       {0, 9},
	heartbeatKey:       {0, 4},
	leaveGroupKey:      {0, 5},
	syncGroupKey:       {0, 5},
	apiVersionsKey:     {0, 4},
}

const (
	listOffsetsKey     int16 = 2
	offsetCommitKey    int16 = 8
	offsetFetchKey     int16 = 9
	findCoordinatorKey int16 = 10
	joinGroupKey       int16 = 11
	heartbeatKey       int16 = 12
	leaveGroupKey      int16 = 13
	syncGroupKey       int16 = 14
)

// Kafka error codes of the consume side.
const (
	errOffsetOutOfRange       int16 = 1
	errCoordinatorNotAvail    int16 = 15
	errNotCoordinator         int16 = 16
	errIllegalGeneration      int16 = 22
	errInconsistentProtocol   int16 = 23
	errInvalidGroupID         int16 = 24
	errUnknownMemberID        int16 = 25
	errInvalidSessionTimeout  int16 = 26
	errRebalanceInProgress    int16 = 27
	errMemberIDRequired       int16 = 79
	errGroupMaxSizeReached    int16 = 81
	errCoordinatorLoadInProgr int16 = 14
)

// CloudServer serves Kafka consumers from the stream tables (see the
// package documentation). Start, Close, Addr and Stats are those of the
// embedded Server.
type CloudServer struct {
	*Server
	ccfg    CloudConfig
	cat     *tables.Catalog
	tc      *tables.Reader
	groups  *groups
	offsets *offsetStore
	self    string // advertised host:port
	peers   []string
}

// NewCloudServer validates cfg, opens the committed-offsets database and
// returns a server that is not yet listening.
func NewCloudServer(cfg CloudConfig, cat *tables.Catalog) (*CloudServer, error) {
	if cat == nil {
		return nil, fmt.Errorf("%w: nil catalog", ErrInvalidConfig)
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultCloudAddr
	}
	if err := cfg.Config.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.RowCacheBytes == 0 {
		cfg.RowCacheBytes = DefaultRowCacheBytes
	}
	if cfg.MetadataMaxAge == 0 {
		cfg.MetadataMaxAge = DefaultMetadataMaxAge
	}
	for _, p := range cfg.Peers {
		if _, _, err := splitHostPort32(p); err != nil {
			return nil, fmt.Errorf("%w: peer %q: %v", ErrInvalidConfig, p, err)
		}
	}
	if cfg.OffsetsDB == "" {
		return nil, fmt.Errorf("%w: offsets database required", ErrInvalidConfig)
	}
	os, err := openOffsetStore(cfg.OffsetsDB)
	if err != nil {
		return nil, err
	}
	cs := &CloudServer{
		Server:  newServer(cfg.Config, "kafka-cloud", cloudAPIs),
		ccfg:    cfg,
		cat:     cat,
		offsets: os,
	}
	cs.tc = cfg.Reader
	if cs.tc == nil {
		cs.tc = tables.NewReader(cat, tables.ReaderConfig{MetadataMaxAge: cfg.MetadataMaxAge, RowCacheBytes: cfg.RowCacheBytes})
	}
	cs.ccfg.MetadataMaxAge = cs.tc.MetadataMaxAge()
	cs.groups = newGroups(cs.log)
	cs.handler = cs.handle
	cs.onStart = func(ctx context.Context) ([]any, error) {
		go cs.groups.sweep(ctx)
		return []any{"mode", "consume", "peers", len(cfg.Peers)}, nil
	}
	return cs, nil
}

// Close stops the listener and connections (see Server.Close), then
// closes the offsets database. Waiting requests (long-poll fetches, joins
// and syncs) are answered at once. Group membership is lost (clients
// rejoin); committed offsets are not.
func (cs *CloudServer) Close(ctx context.Context) error {
	cs.cancel()
	err := cs.Server.Close(ctx)
	return errors.Join(err, cs.offsets.Close())
}

func (cs *CloudServer) handle(ctx context.Context, req *request) (kmsg.Response, bool) {
	switch r := req.kreq.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := r.ResponseKind().(*kmsg.ApiVersionsResponse)
		if req.unsupported {
			resp.SetVersion(0)
			resp.ErrorCode = errUnsupportedVersion
		}
		return apiVersionsResponse(resp, cloudAPIs), false
	case *kmsg.MetadataRequest:
		return cs.handleMetadata(ctx, r), false
	case *kmsg.ProduceRequest:
		if resp := cs.handleProduce(req, r); resp != nil {
			return resp, false
		}
		return nil, false
	case *kmsg.ListOffsetsRequest:
		return cs.handleListOffsets(ctx, r), false
	case *kmsg.FetchRequest:
		return cs.handleFetch(ctx, r), false
	case *kmsg.FindCoordinatorRequest:
		return cs.handleFindCoordinator(r), false
	case *kmsg.JoinGroupRequest:
		return cs.handleJoinGroup(ctx, req, r), false
	case *kmsg.SyncGroupRequest:
		return cs.handleSyncGroup(ctx, r), false
	case *kmsg.HeartbeatRequest:
		return cs.handleHeartbeat(r), false
	case *kmsg.LeaveGroupRequest:
		return cs.handleLeaveGroup(r), false
	case *kmsg.OffsetCommitRequest:
		return cs.handleOffsetCommit(ctx, r), false
	case *kmsg.OffsetFetchRequest:
		return cs.handleOffsetFetch(ctx, r), false
	}
	panic(fmt.Sprintf("kafka: no cloud handler for key %d", req.key))
}

// selfAddr is this server's advertised host:port.
func (cs *CloudServer) selfAddr() string {
	h, p := cs.advertised()
	return net.JoinHostPort(h, fmt.Sprint(p))
}

// peerList is the sorted, deduplicated peer list, always including self.
func (cs *CloudServer) peerList() []string {
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
func (cs *CloudServer) coordinator(group string) string {
	return rendezvous("group\x00"+group, cs.peerList())
}

func (cs *CloudServer) isCoordinator(group string) bool {
	return cs.coordinator(group) == cs.selfAddr()
}

// peerBroker is the broker id and address of a peer.
func peerBroker(addr string) (int32, string, int32) {
	h, p, _ := splitHostPort32(addr)
	return BrokerID(addr), h, p
}

// streamOf validates a topic name as a stream name.
func streamOf(topic string) (string, bool) {
	if _, _, err := tributary.ParseStream(topic); err != nil {
		return "", false
	}
	return topic, !strings.ContainsAny(topic, "/ ")
}
