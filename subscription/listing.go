package subscription

import "sort"

// SubscriptionInfo describes one subscription this server holds, for the
// operator's console.
type SubscriptionInfo struct {
	Topic     string // persistent://tenant/namespace/stream-partition-N
	Name      string
	Type      string // Exclusive, Shared, Failover, Key_Shared
	Consumers int
	// Backlog is the messages not yet acknowledged up to the end of the
	// partition as last seen by the subscription's dispatch.
	Backlog int64
}

// Subscriptions lists the subscriptions this server holds, by topic and name.
func (m *Manager) Subscriptions() []SubscriptionInfo {
	m.mu.Lock()
	subs := make([]*Subscription, 0, len(m.subs))
	for _, s := range m.subs {
		subs = append(subs, s)
	}
	m.mu.Unlock()
	out := make([]SubscriptionInfo, 0, len(subs))
	for _, s := range subs {
		s.mu.Lock()
		backlog := s.knownEnd - (s.cur.markDelete + 1)
		for _, r := range s.cur.ranges {
			if r[0] < s.knownEnd {
				backlog -= min(r[1], s.knownEnd) - r[0]
			}
		}
		out = append(out, SubscriptionInfo{Topic: s.key.topic, Name: s.key.sub, Type: s.typ.String(),
			Consumers: len(s.consumers), Backlog: max(backlog, 0)})
		s.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Name < out[j].Name
	})
	return out
}
