package mqtt

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultStream is the catch-all stream used when Config.DefaultStream is empty.
const DefaultStream = "default.mqtt"

// ErrInvalidRoute is returned by NewRouter (and New) for a route whose filter
// or stream name is not usable.
var ErrInvalidRoute = errors.New("mqtt: invalid route")

// Route maps an MQTT topic filter (with + and # wildcards) to a stream
// "namespace.stream".
type Route struct {
	Filter string
	Stream string
}

// Router maps MQTT topic names to streams. The first route whose filter
// matches wins; a topic no route matches goes to the default stream, so that
// nothing is dropped. The zero Router sends everything to DefaultStream.
type Router struct {
	routes []compiledRoute
	def    string
}

type compiledRoute struct {
	levels []string
	stream string
}

// NewRouter validates and compiles routes. def is the catch-all stream;
// "" means DefaultStream.
func NewRouter(routes []Route, def string) (Router, error) {
	if def == "" {
		def = DefaultStream
	}
	if err := validStream(def); err != nil {
		return Router{}, fmt.Errorf("default stream: %w", err)
	}
	r := Router{def: def}
	for i, rt := range routes {
		if err := validFilter(rt.Filter); err != nil {
			return Router{}, fmt.Errorf("route %d filter %q: %w", i, rt.Filter, err)
		}
		if err := validStream(rt.Stream); err != nil {
			return Router{}, fmt.Errorf("route %d: %w", i, err)
		}
		r.routes = append(r.routes, compiledRoute{levels: strings.Split(rt.Filter, "/"), stream: rt.Stream})
	}
	return r, nil
}

// StreamFor returns the stream for a topic name: the stream of the first
// matching route, else the default stream.
func (r Router) StreamFor(topic string) string {
	for _, rt := range r.routes {
		if matchFilter(rt.levels, topic) {
			return rt.stream
		}
	}
	if r.def == "" {
		return DefaultStream
	}
	return r.def
}

// matchFilter reports whether topic matches the filter split into levels,
// following MQTT 5 section 4.7: "+" matches exactly one level (possibly
// empty), a trailing "#" matches the parent level and any number of child
// levels, and a topic beginning with "$" is not matched by a filter whose
// first level is a wildcard.
func matchFilter(levels []string, topic string) bool {
	if strings.HasPrefix(topic, "$") && len(levels) > 0 && (levels[0] == "+" || levels[0] == "#") {
		return false
	}
	rest := topic
	for i, lv := range levels {
		if lv == "#" {
			return true // "a/#" also matches "a": rest is then consumed below
		}
		var part string
		more := false
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			part, rest, more = rest[:j], rest[j+1:], true
		} else {
			part, rest = rest, ""
		}
		if lv != "+" && lv != part {
			return false
		}
		if !more {
			// The topic is exhausted: it matches if the filter is too, or if
			// the only level left is "#" (parent match).
			return i == len(levels)-1 || (i == len(levels)-2 && levels[i+1] == "#")
		}
	}
	return false // topic has more levels than the filter
}

func validFilter(f string) error {
	if f == "" {
		return fmt.Errorf("empty filter: %w", ErrInvalidRoute)
	}
	if strings.HasPrefix(strings.ToLower(f), "$share/") {
		return fmt.Errorf("shared subscription filter: %w", ErrInvalidRoute)
	}
	levels := strings.Split(f, "/")
	for i, lv := range levels {
		if strings.Contains(lv, "#") && (lv != "#" || i != len(levels)-1) {
			return fmt.Errorf("'#' must be the whole last level: %w", ErrInvalidRoute)
		}
		if strings.Contains(lv, "+") && lv != "+" {
			return fmt.Errorf("'+' must be a whole level: %w", ErrInvalidRoute)
		}
	}
	return nil
}

// validStream checks the "namespace.stream" form: two non-empty parts
// separated by one dot, no spaces or slashes.
func validStream(s string) error {
	ns, name, ok := strings.Cut(s, ".")
	if !ok || ns == "" || name == "" || strings.Contains(name, ".") || strings.ContainsAny(s, " /\t\n") {
		return fmt.Errorf("stream %q is not \"namespace.stream\": %w", s, ErrInvalidRoute)
	}
	return nil
}
