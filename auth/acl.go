package auth

import (
	"slices"
	"strings"
)

// Request is one thing a principal wants to do. The resource fields that
// apply to the action are set; an empty one is not checked.
type Request struct {
	Client
	Principal Principal
	Action    Action
	// ClientID is the protocol's client id (MQTT); %c in topic patterns.
	ClientID string
	// Topic: the MQTT topic published to, or the filter subscribed to
	// ($share/NAME/ prefixes are stripped; NAME is then the Group).
	Topic string
	// Stream: namespace.stream produced to, consumed or written.
	Stream string
	// Group: a Kafka consumer group, Pulsar or gRPC/HTTP subscription,
	// or an MQTT shared subscription's group.
	Group string
	// Namespace: a catalog namespace read or written (a rule covers it
	// when one of its stream patterns could name a stream in it).
	Namespace string
}

// resource names what r is about, for the audit log.
func (r Request) resource() string {
	var parts []string
	for _, kv := range [][2]string{{"topic", r.Topic}, {"stream", r.Stream}, {"group", r.Group}, {"namespace", r.Namespace}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+":"+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

// Authorize decides r: nil when allowed; ErrDenied (audited and
// counted) when not.
func (a *Authority) Authorize(r Request) error {
	if a.Allowed(r) {
		return nil
	}
	a.metrics.denial(r.Protocol, r.Action)
	a.log.Warn("request denied", "event", "authorization", "decision", "deny", "protocol", r.Protocol,
		"remote", r.Remote, "principal", r.Principal.String(), "action", string(r.Action), "resource", r.resource())
	return ErrDenied
}

// Allowed decides r without an audit line (for filtering what a listing
// shows).
func (a *Authority) Allowed(r Request) bool {
	if a.Open() {
		return true
	}
	if r.Principal.Anonymous() && !a.AnonymousAllowed() {
		return false
	}
	for _, rule := range a.cfg.ACL {
		if a.matchPrincipal(rule.Principal, r.Principal) && rule.allows(r) {
			return true
		}
	}
	return false
}

// AuthorizeClientID decides whether p may connect with clientID: the
// client id patterns of p's rules (any id for an admin), by default "%u"
// only — never a pattern that could name another principal — and for an
// anonymous client none: it gets an id the server assigns unless a rule
// of principal anonymous lists client_ids (see Rule.ClientIDs). Denials
// are audited.
func (a *Authority) AuthorizeClientID(c Client, p Principal, clientID string) error {
	if a.clientIDAllowed(p, clientID) {
		return nil
	}
	a.metrics.denial(c.Protocol, "connect")
	a.log.Warn("client id denied", "event", "authorization", "decision", "deny", "protocol", c.Protocol,
		"remote", c.Remote, "principal", p.String(), "action", "connect", "resource", "client_id:"+clientID)
	return ErrDenied
}

func (a *Authority) clientIDAllowed(p Principal, clientID string) bool {
	if a.Open() {
		return true
	}
	var patterns []string
	for _, rule := range a.cfg.ACL {
		if !a.matchPrincipal(rule.Principal, p) {
			continue
		}
		if slices.Contains(rule.Allow, Admin) {
			return true
		}
		patterns = append(patterns, rule.ClientIDs...)
	}
	if len(patterns) == 0 {
		if p.Anonymous() {
			// Any id would be another client's: an anonymous client has
			// no name to bind one to, so it gets a server-assigned id.
			return false
		}
		// Its own name only: "%u-*" let user sensor take sensor-1.
		patterns = []string{"%u"}
	}
	for _, pat := range patterns {
		if pat, ok := substitute(pat, p.Name, "", "*"); ok && glob(pat, clientID) {
			return true
		}
	}
	return false
}

// matchPrincipal tells whether a rule's principal pattern names p.
func (a *Authority) matchPrincipal(pattern string, p Principal) bool {
	if p.Anonymous() {
		return pattern == anonymousName
	}
	if g, ok := strings.CutPrefix(pattern, "group:"); ok {
		for _, m := range a.cfg.Groups[g] {
			if glob(m, p.Name) {
				return true
			}
		}
		return false
	}
	return pattern != anonymousName && glob(pattern, p.Name)
}

// allows tells whether rule grants r (its principal already matched).
func (rule Rule) allows(r Request) bool {
	if slices.Contains(rule.Allow, Admin) {
		return true
	}
	if !slices.Contains(rule.Allow, r.Action) {
		return false
	}
	switch r.Action {
	case Publish, Subscribe:
		if r.Topic == "" {
			return false
		}
		// The cloud MQTT listener's $stream subscriptions name the stream
		// too: a rule listing streams must cover it.
		if r.Stream != "" && !anyGlob(rule.Streams, r.Principal.Name, r.Stream) {
			return false
		}
		// A shared subscription's group is a group like a Kafka consumer
		// group's or a gRPC/HTTP subscription's: a rule listing groups
		// must cover it, or another principal could join a team's group
		// and divert its rows.
		if g := shareGroup(r); g != "" && !anyGlob(rule.Groups, r.Principal.Name, g) {
			return false
		}
		if len(rule.Topics) == 0 {
			return true
		}
		topic := stripShare(r.Topic)
		for _, f := range rule.Topics {
			f, ok := substitute(f, r.Principal.Name, r.ClientID, "+#/")
			if !ok {
				continue
			}
			if r.Action == Publish && topicMatch(f, topic) || r.Action == Subscribe && filterWithin(topic, f) {
				return true
			}
		}
		return false
	}
	name := r.Principal.Name
	if r.Stream != "" && !anyGlob(rule.Streams, name, r.Stream) {
		return false
	}
	if r.Namespace != "" && !anyNamespace(rule.Streams, name, r.Namespace) {
		return false
	}
	if r.Group != "" && !anyGlob(rule.Groups, name, r.Group) {
		return false
	}
	return true
}

func anyGlob(patterns []string, user, s string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if p, ok := substitute(p, user, "", "*"); ok && glob(p, s) {
			return true
		}
	}
	return false
}

// anyNamespace tells whether a stream pattern could name a stream of ns.
func anyNamespace(patterns []string, user, ns string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		p, ok := substitute(p, user, "", "*")
		if !ok {
			continue
		}
		// The namespace part of the pattern (all of it when it has no dot:
		// "fact*" may name streams of namespace "factory").
		if head, _, _ := strings.Cut(p, "."); glob(head, ns) {
			return true
		}
	}
	return false
}

// substitute replaces %u and %c in pattern; ok is false when a value is
// empty or holds a character special in the pattern language (forbidden),
// so that a principal named "#" cannot widen its own rules.
func substitute(pattern, user, clientID, forbidden string) (string, bool) {
	if !strings.Contains(pattern, "%") {
		return pattern, true
	}
	for _, kv := range [][2]string{{"%u", user}, {"%c", clientID}} {
		if !strings.Contains(pattern, kv[0]) {
			continue
		}
		if kv[1] == "" || strings.ContainsAny(kv[1], forbidden) {
			return "", false
		}
		pattern = strings.ReplaceAll(pattern, kv[0], kv[1])
	}
	return pattern, true
}

// glob matches s against a pattern where * matches any run of characters.
func glob(pattern, s string) bool {
	star, mark := -1, 0
	p, i := 0, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// shareGroup is the group of a shared subscription request: r.Group, or
// the NAME of a $share/NAME/ topic filter.
func shareGroup(r Request) string {
	if r.Group != "" || r.Action != Subscribe {
		return r.Group
	}
	if rest, ok := strings.CutPrefix(r.Topic, "$share/"); ok {
		if g, _, ok := strings.Cut(rest, "/"); ok {
			return g
		}
	}
	return ""
}

func stripShare(f string) string {
	if rest, ok := strings.CutPrefix(f, "$share/"); ok {
		if _, filter, ok := strings.Cut(rest, "/"); ok {
			return filter
		}
	}
	return f
}

// topicMatch tells whether topic name t matches filter f (MQTT rules:
// wildcards at the first level do not match topics starting with $).
func topicMatch(f, t string) bool {
	fl, tl := strings.Split(f, "/"), strings.Split(t, "/")
	if strings.HasPrefix(t, "$") && (fl[0] == "+" || fl[0] == "#") {
		return false
	}
	for i, l := range fl {
		if l == "#" {
			return true
		}
		if i >= len(tl) || (l != "+" && l != tl[i]) {
			return false
		}
	}
	return len(fl) == len(tl)
}

// filterWithin tells whether every topic filter sub matches is matched by
// filter f too.
func filterWithin(sub, f string) bool {
	sl, fl := strings.Split(sub, "/"), strings.Split(f, "/")
	if strings.HasPrefix(sub, "$") && (fl[0] == "+" || fl[0] == "#") {
		return false
	}
	for i, l := range fl {
		if l == "#" {
			return true
		}
		if i >= len(sl) {
			return false
		}
		switch s := sl[i]; {
		case s == "#":
			return false
		case l == "+":
		case s == "+" || s != l:
			return false
		}
	}
	return len(sl) == len(fl)
}
