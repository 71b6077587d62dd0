package consume

// Caps on what clients can make the coordinator hold: groups, members per
// group, committed offsets per group — and the expiry of offsets of
// abandoned groups, without which the group cap would fill up for good.
//
// Invariants:
//   - The groups this server coordinates — those with members or handed-out
//     member ids (groups.m) and those with committed offsets in the offsets
//     database (groups.stored) — are at most MaxGroups. stored is loaded
//     from the database at Start, so a restart keeps the count; a new
//     group is reserved in stored before its first commit is written, so
//     concurrent commits cannot overshoot the cap.
//   - A group holds at most MaxGroupOffsets committed (topic, partition)
//     offsets: a commit is counted in its own transaction whenever the
//     upper bound kept in stored (last exact count plus everything
//     committed since) could pass the cap, and rolled back if it does.
//     Commits of one group are serialised here (commitLocks), so the count
//     is exact for the coordinator.
//   - Offsets of a group with no members here whose latest commit is older
//     than OffsetsRetention are deleted (Kafka's offsets.retention after
//     KIP-211: a group's offsets expire together, once it is empty).
//
// Refusals: a new group is POLICY_VIOLATION (Kafka has no such cap; this
// is a policy of the server, not a transient condition, so a retriable
// COORDINATOR_NOT_AVAILABLE would only make clients retry forever); a
// member beyond MaxGroupMembers is GROUP_MAX_SIZE_REACHED (Kafka's
// group.max.size); a commit beyond MaxGroupOffsets is POLICY_VIOLATION on
// each of its partitions (OFFSET_METADATA_TOO_LARGE and
// INVALID_COMMIT_OFFSET_SIZE mean one partition's metadata and one
// request's size). Each refusal is counted and logged at most every
// capLogEvery per cap.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-io/tributary/kafka"
	"github.com/tributary-io/tributary/offsets"
)

// capLogEvery rate-limits the log line of each cap.
const capLogEvery = 5 * time.Second

// capStats count refusals (and expiries); last* rate-limit their lines.
type capStats struct {
	groups, members, offsets, expired atomic.Int64
	lastGroups, lastMembers, lastOffs atomic.Int64
}

// logLimited reports whether a line may be logged now (at most once every
// capLogEvery per last).
func logLimited(last *atomic.Int64) bool {
	now, prev := time.Now().UnixNano(), last.Load()
	return now-prev >= int64(capLogEvery) && last.CompareAndSwap(prev, now)
}

// capDefaults fills the cap settings' defaults and checks them.
func (c *Config) capDefaults() error {
	def := func(v *int, d int, name string) error {
		switch {
		case *v == 0:
			*v = d
		case *v < -1:
			return fmt.Errorf("%w: %s %d (want > 0, or -1 for no cap)", kafka.ErrInvalidConfig, name, *v)
		}
		return nil
	}
	if err := errors.Join(def(&c.MaxGroups, DefaultMaxGroups, "max_groups"),
		def(&c.MaxGroupMembers, DefaultMaxGroupMembers, "max_group_members"),
		def(&c.MaxGroupOffsets, DefaultMaxGroupOffsets, "max_group_offsets")); err != nil {
		return err
	}
	if c.OffsetsRetention == 0 {
		c.OffsetsRetention = DefaultOffsetsRetention
	}
	return nil
}

// total is how many groups count toward maxGroups; gs.mu held.
func (gs *groups) total() int {
	n := len(gs.stored)
	for id := range gs.m {
		if _, ok := gs.stored[id]; !ok {
			n++
		}
	}
	return n
}

// admit reports whether group may be held (it is, or there is room),
// counting and logging a refusal; gs.mu held.
func (gs *groups) admit(group string) bool {
	if _, ok := gs.m[group]; ok {
		return true
	}
	if _, ok := gs.stored[group]; ok {
		return true
	}
	if gs.maxGroups <= 0 {
		return true
	}
	if n := gs.total(); n >= gs.maxGroups {
		gs.caps.groups.Add(1)
		if logLimited(&gs.caps.lastGroups) {
			gs.log.Warn("kafka group refused: kafka.max_groups reached (POLICY_VIOLATION)", "group", group, "groups", n,
				"max_groups", gs.maxGroups, "refused_total", gs.caps.groups.Load())
		}
		return false
	}
	return true
}

// admitMember reports whether g may take one more member; gs.mu held.
func (gs *groups) admitMember(g *group) bool {
	n := len(g.members) + len(g.pending)
	if gs.maxMembers <= 0 || n < gs.maxMembers {
		return true
	}
	gs.caps.members.Add(1)
	if logLimited(&gs.caps.lastMembers) {
		gs.log.Warn("kafka group member refused: kafka.max_group_members reached (GROUP_MAX_SIZE_REACHED)", "group", g.id,
			"members", n, "max_group_members", gs.maxMembers, "refused_total", gs.caps.members.Load())
	}
	return false
}

// commitLocks serialise the commits of one group (striped by group id).
type commitLocks [64]sync.Mutex

func (l *commitLocks) of(group string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(group))
	return &l[h.Sum32()%uint32(len(l))]
}

// commitOffsets stores offs for group within the caps: 0, or the code
// every partition of the request gets (nothing stored).
func (cs *Server) commitOffsets(ctx context.Context, group string, offs []offsets.Offset) int16 {
	if len(offs) == 0 {
		return 0
	}
	mu := cs.commitLocks.of(group)
	mu.Lock()
	defer mu.Unlock()
	gs := cs.groups
	gs.mu.Lock()
	bound, known := gs.stored[group]
	if !known {
		if !gs.admit(group) {
			gs.mu.Unlock()
			return kafka.CodePolicyViolation
		}
		gs.stored[group] = 0 // reserved: counts toward maxGroups from now on
	}
	gs.mu.Unlock()
	limit := -1
	if c := cs.ccfg.MaxGroupOffsets; c > 0 && (!known || bound+len(offs) > c) {
		limit = c // the bound could pass the cap: count exactly
	}
	n, err := cs.offsets.Commit(ctx, group, offs, limit)
	gs.mu.Lock()
	defer gs.mu.Unlock()
	switch {
	case err == nil && limit < 0:
		gs.stored[group] = bound + len(offs)
	case err == nil:
		gs.stored[group] = n
	case !known && n == 0:
		delete(gs.stored, group) // nothing stored: the reservation ends
	default:
		gs.stored[group] = n // refused: n (counted with the refused ones) is an upper bound
	}
	if errors.Is(err, offsets.ErrTooMany) {
		gs.caps.offsets.Add(1)
		if logLimited(&gs.caps.lastOffs) {
			cs.log.Warn("kafka offset commit refused: kafka.max_group_offsets reached (POLICY_VIOLATION)", "group", group,
				"offsets", n, "max_group_offsets", cs.ccfg.MaxGroupOffsets, "refused_total", gs.caps.offsets.Load())
		}
		return kafka.CodePolicyViolation
	}
	if err != nil {
		cs.log.Warn("kafka: commit offsets", "group", group, "err", err)
		return kafka.CodeUnknownServerError
	}
	return 0
}

// loadStoredGroups fills groups.stored with the groups this server
// coordinates that have committed offsets; gs.mu held.
func (cs *Server) loadStoredGroups(ctx context.Context) error {
	counts, err := cs.offsets.Groups(ctx)
	if err != nil {
		return fmt.Errorf("load consumer groups: %w", err)
	}
	for g, sg := range counts {
		if cs.isCoordinator(g) {
			cs.groups.stored[g] = sg.Offsets
		}
	}
	return nil
}

// expireOffsetsLoop runs expireOffsets every tenth of the retention (at
// most hourly, at least every second) until ctx ends.
func (cs *Server) expireOffsetsLoop(ctx context.Context) {
	ret := cs.ccfg.OffsetsRetention
	if ret < 0 {
		return
	}
	every(ctx, min(max(ret/10, time.Second), time.Hour), func(now time.Time) {
		if _, err := cs.expireOffsets(ctx, now); err != nil && ctx.Err() == nil {
			cs.log.Warn("kafka: expire group offsets", "err", err)
		}
	})
}

// expireOffsets deletes the offsets of the groups this server coordinates
// that have no members here and no commit since now-OffsetsRetention, and
// returns how many groups it expired.
func (cs *Server) expireOffsets(ctx context.Context, now time.Time) (int, error) {
	before := now.Add(-cs.ccfg.OffsetsRetention)
	stored, err := cs.offsets.Groups(ctx)
	if err != nil {
		return 0, err
	}
	gs := cs.groups
	n := 0
	for g, sg := range stored {
		if !sg.LastCommit.Before(before) || !cs.isCoordinator(g) {
			continue
		}
		mu := cs.commitLocks.of(g)
		mu.Lock()
		gs.mu.Lock()
		live := gs.m[g] != nil && len(gs.m[g].members) > 0
		gs.mu.Unlock()
		if !live {
			var deleted bool
			if deleted, err = cs.offsets.Expire(ctx, g, before); err == nil && deleted {
				gs.mu.Lock()
				delete(gs.stored, g)
				gs.mu.Unlock()
				gs.caps.expired.Add(1)
				n++
				cs.log.Info("kafka group offsets expired (kafka.offsets_retention)", "group", g, "retention", cs.ccfg.OffsetsRetention)
			}
		}
		mu.Unlock()
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// CapStats are the consumer-group cap counters of a Server.
type CapStats struct {
	Groups          int64 // groups this server coordinates now (live or with stored offsets)
	GroupsRefused   int64 // JoinGroup/OffsetCommit refused for kafka.max_groups
	MembersRefused  int64 // JoinGroup refused for kafka.max_group_members
	OffsetsRefused  int64 // OffsetCommit refused for kafka.max_group_offsets
	GroupsExpired   int64 // groups whose offsets expired (kafka.offsets_retention)
	InflightBytes   int64 // request bytes held now (kafka.max_inflight_bytes)
	InflightWaits   int64 // frames whose reading waited for kafka.max_inflight_bytes
	MaxGroups       int   // the caps in effect (-1: none)
	MaxGroupMembers int
	MaxGroupOffsets int
}

// CapStats returns a snapshot of the cap counters.
func (cs *Server) CapStats() CapStats {
	gs := cs.groups
	gs.mu.Lock()
	n := gs.total()
	gs.mu.Unlock()
	st := cs.conn.Stats()
	return CapStats{Groups: int64(n), GroupsRefused: gs.caps.groups.Load(), MembersRefused: gs.caps.members.Load(),
		OffsetsRefused: gs.caps.offsets.Load(), GroupsExpired: gs.caps.expired.Load(),
		InflightBytes: st.InflightBytes, InflightWaits: st.InflightWaits,
		MaxGroups: cs.ccfg.MaxGroups, MaxGroupMembers: cs.ccfg.MaxGroupMembers, MaxGroupOffsets: cs.ccfg.MaxGroupOffsets}
}

// Collectors are the server's metrics: consumer-group lag (LagCollector),
// the groups it coordinates, the refusals of each cap, expired groups,
// and its listener's in-flight request bytes (label listener=kafka-cloud;
// an edge node's Kafka listener has listener=kafka).
func (cs *Server) Collectors() []prometheus.Collector {
	counter := func(name, help string, labels prometheus.Labels, f func(CapStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f(cs.CapStats())) })
	}
	gauge := func(name, help string, labels prometheus.Labels, f func(CapStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f(cs.CapStats())) })
	}
	refused := "Consumer-group requests refused because a cap was reached (JoinGroup, OffsetCommit)."
	listener := prometheus.Labels{"listener": "kafka-cloud"}
	return []prometheus.Collector{cs.LagCollector(),
		gauge("tributary_kafka_groups", "Consumer groups this server coordinates (with members or committed offsets), at most kafka.max_groups.",
			nil, func(s CapStats) int64 { return s.Groups }),
		counter("tributary_kafka_group_refusals_total", refused, prometheus.Labels{"cap": "max_groups"}, func(s CapStats) int64 { return s.GroupsRefused }),
		counter("tributary_kafka_group_refusals_total", refused, prometheus.Labels{"cap": "max_group_members"}, func(s CapStats) int64 { return s.MembersRefused }),
		counter("tributary_kafka_group_refusals_total", refused, prometheus.Labels{"cap": "max_group_offsets"}, func(s CapStats) int64 { return s.OffsetsRefused }),
		counter("tributary_kafka_groups_expired_total", "Consumer groups whose committed offsets expired (kafka.offsets_retention).",
			nil, func(s CapStats) int64 { return s.GroupsExpired }),
		gauge("tributary_kafka_inflight_bytes", "Kafka request bytes held now (read, not yet answered), at most kafka.max_inflight_bytes.",
			listener, func(s CapStats) int64 { return s.InflightBytes }),
		counter("tributary_kafka_inflight_waits_total", "Kafka requests whose reading waited for kafka.max_inflight_bytes (back-pressure).",
			listener, func(s CapStats) int64 { return s.InflightWaits }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_kafka_batch_cache_bytes",
			Help: "Record batches encoded from the tables' row groups and cached for fetches, bytes (at most kafka.batch_cache_bytes plus one row group)."},
			func() float64 { return float64(cs.batches.groups.Size()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tributary_kafka_batch_cache_builds_total",
			Help: "Row groups encoded as record batches (a fetch or a prefetch found them not cached)."},
			func() float64 { return float64(cs.batches.builds.Load()) }),
	}
}
