package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tributary-io/tributary/internal/size"
)

// Problem is one mistake in a config file, at a key as written in YAML.
type Problem struct {
	Line int    // 1-based; 0 when not known
	Path string // e.g. mqtt.max_packet_size, mqtt.routes[0].stream; "" for the file as a whole
	Msg  string // e.g. "unknown key (did you mean max_packet_size?)"
}

// Error is what is wrong with a config file's YAML: unknown keys (with
// the nearest key of their section), values of the wrong type, repeated
// keys and syntax errors, each at its line and key path. It never names
// a Go type.
type Error struct {
	File     string // the file's name, set by InFile; "" when decoding bytes
	Problems []Problem
}

// Error is one line per problem: FILE:LINE: PATH: MSG, or
// config: line LINE: PATH: MSG without a file name.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		var b strings.Builder
		switch {
		case e.File != "" && p.Line > 0:
			fmt.Fprintf(&b, "%s:%d: ", e.File, p.Line)
		case e.File != "":
			fmt.Fprintf(&b, "%s: ", e.File)
		case p.Line > 0:
			fmt.Fprintf(&b, "config: line %d: ", p.Line)
		default:
			b.WriteString("config: ")
		}
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Msg)
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}

// InFile names file in err's problems when err is an *Error (from
// Decode), so that they read FILE:LINE: PATH: MSG; other errors are
// returned as they are.
func InFile(file string, err error) error {
	if e, ok := errors.AsType[*Error](err); ok {
		return &Error{File: file, Problems: e.Problems}
	}
	return err
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

var durationType = reflect.TypeOf(time.Duration(0))

// check walks a parsed YAML document beside the Go type it is to be
// decoded into and returns every problem decoding would have, named by
// the key path as written: a key the type has no field for, a key
// written twice in one mapping, a value of the wrong shape or type.
func check(n *yaml.Node, t reflect.Type, path string) []Problem {
	for n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == 0 || n.Kind == yaml.DocumentNode {
		return nil // an empty file
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // leaves the zero value
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return []Problem{{Line: n.Line, Path: path, Msg: withoutGoTypes(err.Error())}}
		}
		return nil
	}
	var out []Problem
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return []Problem{wrongShape(n, path, "a section of keys")}
		}
		fields := map[string]reflect.Type{}
		collectFields(t, fields)
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" {
				continue // merge key
			}
			p := join(path, k.Value)
			if first, ok := seen[k.Value]; ok {
				out = append(out, Problem{Line: k.Line, Path: p, Msg: fmt.Sprintf("key written twice (first at line %d)", first)})
				continue
			}
			seen[k.Value] = k.Line
			ft, ok := fields[k.Value]
			if !ok {
				ft, ok = fields["*"] // an inline map takes the rest
			}
			if !ok {
				msg := "unknown key"
				if s := closest(k.Value, fields); s != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", s)
				}
				out = append(out, Problem{Line: k.Line, Path: p, Msg: msg})
				continue
			}
			out = append(out, check(v, ft, p)...)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return []Problem{wrongShape(n, path, "a mapping")}
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			if first, ok := seen[k.Value]; ok {
				out = append(out, Problem{Line: k.Line, Path: p, Msg: fmt.Sprintf("key written twice (first at line %d)", first)})
				continue
			}
			seen[k.Value] = k.Line
			if pr := check(k, t.Key(), p); len(pr) > 0 {
				out = append(out, Problem{Line: k.Line, Path: p, Msg: "key: " + pr[0].Msg})
				continue
			}
			out = append(out, check(v, t.Elem(), p)...)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return []Problem{wrongShape(n, path, "a list")}
		}
		for i, c := range n.Content {
			out = append(out, check(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.Interface:
	default:
		want := scalarWant(t)
		if n.Kind != yaml.ScalarNode {
			return []Problem{wrongShape(n, path, want)}
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return []Problem{wrongShape(n, path, want)}
		}
	}
	return out
}

// wrongShape is the problem of a value that is not the kind of node the
// key takes (a list where a section goes, a word where a list goes).
func wrongShape(n *yaml.Node, path, want string) Problem {
	return Problem{Line: n.Line, Path: path, Msg: fmt.Sprintf("want %s, got %s", want, size.Written(n))}
}

// scalarWant names, for an operator, what a scalar of type t is written as.
func scalarWant(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 30s, 5m or 1h"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return "a single value"
}

// collectFields maps the YAML key of every field of struct t (inline
// structs flattened) to its type; an inline map is under "*".
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
				into["*"] = ft.Elem()
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

// yamlLine matches the line yaml.v3 puts in its messages ("yaml: line 3: …").
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// withoutGoTypes is a yaml.v3 message without the Go types it names.
func withoutGoTypes(msg string) string {
	return goType.ReplaceAllString(strings.TrimPrefix(msg, "yaml: "), "")
}

// fromYAML is a yaml.v3 error (syntax, or a type error check did not
// foresee) as problems at their lines, without Go types.
func fromYAML(err error) *Error {
	msgs := []string{err.Error()}
	if te, ok := errors.AsType[*yaml.TypeError](err); ok {
		msgs = te.Errors
	}
	e := &Error{}
	for _, m := range msgs {
		p := Problem{Msg: withoutGoTypes(m)}
		if sub := yamlLine.FindStringSubmatch(p.Msg); sub != nil {
			p.Line, _ = strconv.Atoi(sub[1])
			p.Msg = sub[2]
		}
		e.Problems = append(e.Problems, p)
	}
	return e
}
