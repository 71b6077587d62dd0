package mqtt

import (
	"errors"
	"strings"
	"testing"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

func TestRouterStreamFor(t *testing.T) {
	r, err := NewRouter([]Route{
		{Filter: "factory/+/line/+/temp", Stream: "plant.temps"},
		{Filter: "factory/berlin/#", Stream: "plant.berlin"},
		{Filter: "factory/#", Stream: "plant.all"},
		{Filter: "+/status", Stream: "ops.status"},
		{Filter: "exact/topic", Stream: "ops.exact"},
		{Filter: "a/+", Stream: "ops.aplus"},
		{Filter: "$aws/things/#", Stream: "ops.aws"},
	}, "default.mqtt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ topic, want string }{
		{"factory/berlin/line/3/temp", "plant.temps"}, // first match wins over factory/berlin/#
		{"factory/berlin/line/3/temp/x", "plant.berlin"},
		{"factory/berlin", "plant.berlin"}, // # matches the parent level
		{"factory/paris/line/1/pressure", "plant.all"},
		{"factory", "plant.all"},
		{"factory/", "plant.all"},
		{"pump/status", "ops.status"},
		{"/status", "ops.status"}, // + matches an empty level
		{"pump/1/status", "default.mqtt"},
		{"exact/topic", "ops.exact"},
		{"exact/topic/more", "default.mqtt"},
		{"Exact/topic", "default.mqtt"}, // case-sensitive
		{"a/", "ops.aplus"},
		{"a", "default.mqtt"},
		{"$SYS/status", "default.mqtt"}, // $ topics are not matched by a leading wildcard
		{"$aws/things/x/shadow", "ops.aws"},
		{"", "default.mqtt"},
		{"unrouted/topic", "default.mqtt"},
	} {
		if got := r.StreamFor(tc.topic); got != tc.want {
			t.Errorf("StreamFor(%q) = %q, want %q", tc.topic, got, tc.want)
		}
	}
}

func TestRouterDefaultsAndValidation(t *testing.T) {
	if got := (Router{}).StreamFor("x"); got != DefaultStream {
		t.Errorf("zero router: %q", got)
	}
	r, err := NewRouter(nil, "")
	if err != nil || r.StreamFor("x") != DefaultStream {
		t.Errorf("empty default: %v %q", err, r.StreamFor("x"))
	}
	r, err = NewRouter([]Route{{Filter: "#", Stream: "all.things"}}, "")
	if err != nil || r.StreamFor("a/b") != "all.things" || r.StreamFor("$SYS/x") != DefaultStream {
		t.Errorf("#: %v", err)
	}
	for _, bad := range []struct {
		routes []Route
		def    string
	}{
		{[]Route{{Filter: "", Stream: "a.b"}}, ""},
		{[]Route{{Filter: "a/#/b", Stream: "a.b"}}, ""},
		{[]Route{{Filter: "a/b#", Stream: "a.b"}}, ""},
		{[]Route{{Filter: "a/b+/c", Stream: "a.b"}}, ""},
		{[]Route{{Filter: "$share/g/a", Stream: "a.b"}}, ""},
		{[]Route{{Filter: "a", Stream: "nodot"}}, ""},
		{[]Route{{Filter: "a", Stream: "a.b.c"}}, ""},
		{[]Route{{Filter: "a", Stream: ".b"}}, ""},
		{[]Route{{Filter: "a", Stream: "a/b.c"}}, ""},
		{nil, "bad default"},
	} {
		if _, err := NewRouter(bad.routes, bad.def); !errors.Is(err, ErrInvalidRoute) {
			t.Errorf("NewRouter(%v, %q) = %v, want ErrInvalidRoute", bad.routes, bad.def, err)
		}
	}
	if _, err := New(Config{NodeID: "n", Routes: []Route{{Filter: "a/#/b", Stream: "a.b"}}}, appender(&memSink{})); !errors.Is(err, ErrInvalidRoute) {
		t.Errorf("New with a bad route: %v", err)
	}
	if _, err := New(Config{}, appender(&memSink{})); !errors.Is(err, ErrConfig) {
		t.Errorf("New without node id: %v", err)
	}
}

// FuzzRouter checks the router against mochi's own subscription matching:
// a route matches a topic exactly when a subscription with the same filter
// would receive a publish to it.
func FuzzRouter(f *testing.F) {
	for _, s := range [][2]string{
		{"a/+/c", "a/b/c"}, {"a/#", "a"}, {"#", "$SYS/x"}, {"+/+", "/"}, {"a/+", "a/"},
		{"+", ""}, {"a//b", "a//b"}, {"$x/#", "$x/y"}, {"sensors/+/temp", "sensors/1/temp/x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, filter, topic string) {
		r, err := NewRouter([]Route{{Filter: filter, Stream: "routed.s"}}, "default.s")
		if err != nil {
			return
		}
		got := r.StreamFor(topic)
		if got != "routed.s" && got != "default.s" {
			t.Fatalf("StreamFor(%q) = %q", topic, got)
		}
		// Compare with mochi on inputs both consider valid.
		if !mochi.IsValidFilter(filter, false) || !mochi.IsValidFilter(topic, true) || topic == "" {
			return
		}
		mochiMatch := mochiMatches(filter, topic)
		if parent, ok := strings.CutSuffix(filter, "/#"); ok && !mochiMatch {
			// MQTT 5 4.7.1.2: "sport/#" also matches "sport"; mochi v2.7.9
			// does not when the parent ends in a wildcard ("+/#" vs "0").
			mochiMatch = mochiMatches(parent, topic)
		}
		if (got == "routed.s") != mochiMatch {
			t.Fatalf("filter %q topic %q: router match %v, mochi match %v", filter, topic, got == "routed.s", mochiMatch)
		}
	})
}

func mochiMatches(filter, topic string) bool {
	idx := mochi.NewTopicsIndex()
	idx.Subscribe("c", packets.Subscription{Filter: filter})
	_, ok := idx.Subscribers(topic).Subscriptions["c"]
	return ok
}
