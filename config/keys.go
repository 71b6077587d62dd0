package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// KeyError is a key of a config file that the target has no setting for,
// named by its path as written in YAML.
type KeyError struct {
	Line    int
	Path    string // e.g. mqtt.max_packet_bytes
	Suggest string // the closest key of the same section, or ""
}

func (e KeyError) Error() string {
	s := fmt.Sprintf("line %d: %s: unknown key", e.Line, e.Path)
	if e.Suggest != "" {
		s += fmt.Sprintf(" (did you mean %s?)", e.Suggest)
	}
	return s
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// unknownKeys walks a decoded YAML document beside the Go type it is
// decoded into and returns every mapping key the type has no field for.
func unknownKeys(n *yaml.Node, t reflect.Type, path string) []KeyError {
	for n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
		return nil // decodes itself
	}
	var out []KeyError
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		fields := map[string]reflect.Type{}
		collectFields(t, fields)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				continue // merge key
			}
			p := join(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				out = append(out, KeyError{Line: k.Line, Path: p, Suggest: closest(k.Value, fields)})
				continue
			}
			out = append(out, unknownKeys(v, ft, p)...)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, unknownKeys(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))...)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return nil
		}
		for i, c := range n.Content {
			out = append(out, unknownKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

// collectFields maps the YAML key of every field of struct t (inline
// structs flattened) to its type.
func collectFields(t reflect.Type, into map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, into)
			} else {
				into["*"] = ft
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		into[name] = f.Type
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// closest is the key of fields nearest to key (edit distance at most a
// third of its length, at least 2), or "".
func closest(key string, fields map[string]reflect.Type) string {
	best, bestD := "", max(2, len(key)/3)+1
	for f := range fields {
		if f == "*" {
			continue
		}
		d := distance(key, f)
		if strings.HasPrefix(f, key) || strings.HasPrefix(key, f) {
			d = min(d, 2)
		}
		if d < bestD || d == bestD && f < best {
			best, bestD = f, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// goType matches the Go type yaml.v3 names in its type errors ("into
// struct { Addr string "yaml:\"addr\""; … }", "in type node.Config").
var goType = regexp.MustCompile(`(?: in type| into) (?:struct \{.*\}|[\w.*\[\]]+)`)

// plainTypeErrors rewrites yaml.v3's type errors without Go types.
func plainTypeErrors(err *yaml.TypeError) error {
	msgs := make([]string, len(err.Errors))
	for i, m := range err.Errors {
		msgs[i] = goType.ReplaceAllString(m, "")
	}
	return fmt.Errorf("config: %s", strings.Join(msgs, "; "))
}
