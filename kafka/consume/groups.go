package consume

// Classic consumer groups, in memory on the coordinator.
//
// Invariants:
//   - A group's generation only grows while the server runs; a member
//     gets an assignment only for the generation it joined, and SyncGroup,
//     Heartbeat and OffsetCommit of another generation are refused.
//   - Membership is soft state: a restart forgets it and members rejoin
//     (their heartbeats get UNKNOWN_MEMBER_ID). Committed offsets are not
//     kept here but in the offsets store.
//   - At most maxGroups groups: those in m (members or member ids handed
//     out) and those with stored offsets (stored, reloaded at start),
//     counted once; at most maxMembers members and handed-out ids in a
//     group (caps.go). A group with neither members nor handed-out ids
//     leaves m at the next sweep.
//
// States, as in Kafka: Empty → PreparingRebalance (a member joined, left
// or expired; members must (re)join within the rebalance timeout, those
// that do not are removed) → CompletingRebalance (generation bumped,
// JoinGroup answered, the leader's SyncGroup assignment awaited) → Stable.
// A sweeper removes members whose session timed out and ends rebalances
// whose timeout passed. Static membership (group instance ids) is not
// implemented: instance ids are ignored and such members are dynamic.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary-io/tributary/kafka"
)

type groupState int

const (
	groupEmpty groupState = iota
	groupPreparing
	groupCompleting
	groupStable
)

func (s groupState) String() string {
	return [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"}[s]
}

type member struct {
	id               string
	clientID         string
	clientHost       string
	instanceID       *string
	protocols        []kmsg.JoinGroupRequestProtocol
	sessionTimeout   time.Duration
	rebalanceTimeout time.Duration
	lastSeen         time.Time
	joined           bool // has (re)joined in the current rebalance
	joinResp         *kmsg.JoinGroupResponse
	assignment       []byte
}

type group struct {
	id           string
	state        groupState
	generation   int32
	protocolType string
	protocol     string
	leader       string
	members      map[string]*member
	pending      map[string]time.Time // ids handed out with MEMBER_ID_REQUIRED
	deadline     time.Time            // end of the current join phase
	joinDone     chan struct{}        // closed when the join phase completes
	syncDone     chan struct{}        // closed when the leader's assignment arrives or the generation ends
}

// groups is the coordinator's state of all groups it coordinates.
type groups struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[string]*group
	// stored are the groups with committed offsets that this server
	// coordinates, each with an upper bound of how many it holds.
	stored     map[string]int
	maxGroups  int // <= 0: no cap
	maxMembers int // <= 0: no cap
	caps       capStats
}

func newGroups(log *slog.Logger, maxGroups, maxMembers int) *groups {
	return &groups{log: log, m: map[string]*group{}, stored: map[string]int{}, maxGroups: maxGroups, maxMembers: maxMembers}
}

func (gs *groups) get(id string) *group {
	g := gs.m[id]
	if g == nil {
		g = &group{id: id, members: map[string]*member{}, pending: map[string]time.Time{},
			joinDone: make(chan struct{}), syncDone: make(chan struct{})}
		gs.m[id] = g
	}
	return g
}

func newMemberID(clientID string) string {
	var b [16]byte
	rand.Read(b[:])
	return clientID + "-" + hex.EncodeToString(b[:])
}

// startRebalance moves g to PreparingRebalance (if it is not already):
// every member must rejoin before the deadline. Sync waiters of the old
// generation are released.
func (g *group) startRebalance(now time.Time) {
	if g.state == groupPreparing {
		return
	}
	g.state = groupPreparing
	g.joinDone = make(chan struct{})
	close(g.syncDone)
	g.syncDone = make(chan struct{})
	var rt time.Duration
	for _, m := range g.members {
		m.joined = false
		m.joinResp = nil
		rt = max(rt, m.rebalanceTimeout)
	}
	g.deadline = now.Add(max(rt, time.Second))
}

// maybeCompleteJoin completes the join phase when every member has
// rejoined, or, when force (deadline passed), after removing those that
// did not.
func (g *group) maybeCompleteJoin(force bool) {
	if g.state != groupPreparing {
		return
	}
	for id, m := range g.members {
		if !m.joined {
			if !force {
				return
			}
			delete(g.members, id)
		}
	}
	g.generation++
	if len(g.members) == 0 {
		g.state = groupEmpty
		g.leader, g.protocol = "", ""
		close(g.joinDone)
		return
	}
	if _, ok := g.members[g.leader]; !ok {
		g.leader = ""
		for id := range g.members {
			if g.leader == "" || id < g.leader {
				g.leader = id
			}
		}
	}
	g.protocol = g.chooseProtocol()
	for _, m := range g.members {
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.Generation = g.generation
		resp.Protocol = kmsg.StringPtr(g.protocol)
		resp.ProtocolType = kmsg.StringPtr(g.protocolType)
		resp.LeaderID = g.leader
		resp.MemberID = m.id
		if m.id == g.leader {
			for _, o := range g.members {
				gm := kmsg.NewJoinGroupResponseMember()
				gm.MemberID = o.id
				gm.InstanceID = o.instanceID
				for _, p := range o.protocols {
					if p.Name == g.protocol {
						gm.ProtocolMetadata = p.Metadata
					}
				}
				resp.Members = append(resp.Members, gm)
			}
		}
		m.joinResp = resp
		m.assignment = nil
	}
	g.state = groupCompleting
	close(g.joinDone)
}

// chooseProtocol picks the leader's most preferred protocol that every
// member supports (members were admitted only if they share one).
func (g *group) chooseProtocol() string {
	lead := g.members[g.leader]
	for _, p := range lead.protocols {
		ok := true
		for _, m := range g.members {
			if !m.supports(p.Name) {
				ok = false
				break
			}
		}
		if ok {
			return p.Name
		}
	}
	return lead.protocols[0].Name
}

func (m *member) supports(name string) bool {
	for _, p := range m.protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}

// remove drops members and rebalances the rest (or empties the group).
func (g *group) remove(now time.Time, ids ...string) {
	removed := false
	for _, id := range ids {
		if _, ok := g.members[id]; ok {
			delete(g.members, id)
			removed = true
		}
	}
	if !removed {
		return
	}
	if len(g.members) == 0 {
		if g.state != groupPreparing {
			g.startRebalance(now)
		}
		g.maybeCompleteJoin(true)
		return
	}
	g.startRebalance(now)
	g.maybeCompleteJoin(false)
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func(now time.Time)) {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			f(now)
		}
	}
}

// sweep expires members and join phases until ctx ends.
func (gs *groups) sweep(ctx context.Context) {
	every(ctx, 100*time.Millisecond, func(now time.Time) {
		gs.mu.Lock()
		for _, g := range gs.m {
			for id, t := range g.pending {
				if now.Sub(t) > 5*time.Minute {
					delete(g.pending, id)
				}
			}
			if g.state == groupPreparing && now.After(g.deadline) {
				gs.log.Info("kafka group: rebalance timed out", "group", g.id)
				g.maybeCompleteJoin(true)
			}
			var expired []string
			for id, m := range g.members {
				waiting := g.state == groupPreparing && m.joined
				if !waiting && now.Sub(m.lastSeen) > m.sessionTimeout {
					expired = append(expired, id)
				}
			}
			if len(expired) > 0 {
				gs.log.Info("kafka group: session expired", "group", g.id, "members", expired)
				g.remove(now, expired...)
			}
			if len(g.members) == 0 && len(g.pending) == 0 && g.state == groupEmpty {
				delete(gs.m, g.id) // nothing held: it no longer counts toward maxGroups
			}
		}
		gs.mu.Unlock()
	})
}

// checkCommit validates an OffsetCommit's member and generation.
func (gs *groups) checkCommit(groupID, memberID string, generation int32) int16 {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[groupID]
	if g == nil || len(g.members) == 0 {
		// No member owns any partition: a simple (generation -1) commit,
		// or a member that joined before this coordinator restarted (its
		// membership was soft state) and has not rejoined yet.
		return 0
	}
	if generation < 0 && memberID == "" {
		return kafka.CodeUnknownMemberID
	}
	m, ok := g.members[memberID]
	switch {
	case !ok:
		return kafka.CodeUnknownMemberID
	case generation != g.generation:
		return kafka.CodeIllegalGeneration
	case g.state == groupCompleting:
		return kafka.CodeRebalanceInProgress
	}
	m.lastSeen = time.Now()
	return 0
}
