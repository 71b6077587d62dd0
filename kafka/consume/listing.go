package consume

import "sort"

// GroupInfo describes one consumer group this coordinator holds, for the
// operator's console.
type GroupInfo struct {
	ID    string
	State string // Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
	// Members are "client-id@host" of each member.
	Members []string
}

// Groups lists the groups this server coordinates (in memory; groups
// known only by their committed offsets are not listed).
func (cs *Server) Groups() []GroupInfo {
	g := cs.groups
	g.mu.Lock()
	out := make([]GroupInfo, 0, len(g.m))
	for _, gr := range g.m {
		gi := GroupInfo{ID: gr.id, State: gr.state.String()}
		for _, m := range gr.members {
			gi.Members = append(gi.Members, m.clientID+"@"+m.clientHost)
		}
		sort.Strings(gi.Members)
		out = append(out, gi)
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
