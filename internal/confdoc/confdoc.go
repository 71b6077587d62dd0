// Package confdoc generates the configuration reference
// (docs/configuration.md) from the Config structs themselves: every YAML
// key as the decoder sees it (reflection over the yaml tags, inline
// sections flattened), the doc comment written above its field in the
// source (go/ast), and the default the code applies to an empty file. So
// the reference cannot drift from the code: `make docs` writes it, and a
// test fails when the committed file differs.
package confdoc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/tributary-io/tributary/internal/size"
	"gopkg.in/yaml.v3"
)

// Module is the module path whose packages' sources are read.
const Module = "github.com/tributary-io/tributary"

// Docs maps every key of v (a struct value) to its doc comment, for tests
// that hold the comments to the code.
func (w *Walker) Docs(v any) (map[string]string, error) {
	keys, err := w.Keys(v)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k.Path] = k.Doc
	}
	return out, nil
}

// Key is one documented setting.
type Key struct {
	Path    string // e.g. cluster.owner_lease
	Type    string
	Default string
	Doc     string
}

// Walker reads the sources below Root (the module's root directory).
type Walker struct {
	Root string
	fset *token.FileSet
	pkgs map[string][]*ast.File
}

// Keys lists every key of v (a struct value with its defaults applied).
func (w *Walker) Keys(v any) ([]Key, error) {
	if w.fset == nil {
		w.fset, w.pkgs = token.NewFileSet(), map[string][]*ast.File{}
	}
	rv := reflect.ValueOf(v)
	st, err := w.structOf(rv.Type())
	if err != nil {
		return nil, err
	}
	var out []Key
	err = w.walk(rv, st, "", &out)
	return out, err
}

var unmarshaler = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

func leaf(t reflect.Type) bool {
	if t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) || t == reflect.TypeOf(time.Duration(0)) {
		return true
	}
	return t.Kind() != reflect.Struct
}

// walk lists the keys of struct value v, whose source is st.
func (w *Walker) walk(v reflect.Value, st *ast.StructType, prefix string, out *[]Key) error {
	t := v.Type()
	var fields []*ast.Field // one per Go field, in order
	for _, f := range st.Fields.List {
		n := max(len(f.Names), 1)
		for range n {
			fields = append(fields, f)
		}
	}
	if len(fields) != t.NumField() {
		return fmt.Errorf("confdoc: %s: %d fields in the source, %d in the type", t, len(fields), t.NumField())
	}
	group := "" // a comment above a group of fields serves each that has none
	for i := 0; i < t.NumField(); i++ {
		f, src := t.Field(i), fields[i]
		doc := docOf(src)
		if doc == "" {
			doc = group
		} else {
			group = doc
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		inline := strings.Contains(","+opts+",", ",inline,")
		if name == "" && !inline {
			name = strings.ToLower(f.Name)
		}
		path := prefix
		if !inline {
			path = join(prefix, name)
		}
		fv := v.Field(i)
		ft := f.Type
		if !leaf(ft) {
			sub, ok := src.Type.(*ast.StructType)
			if !ok {
				var err error
				if sub, err = w.structOf(ft); err != nil {
					return err
				}
			}
			if doc != "" && !inline {
				*out = append(*out, Key{Path: path, Type: "section", Doc: doc})
			}
			if err := w.walk(fv, sub, path, out); err != nil {
				return err
			}
			continue
		}
		*out = append(*out, Key{Path: path, Type: typeName(ft), Default: format(fv), Doc: doc})
		// A list of sections (routes, users): document its items' keys.
		if (ft.Kind() == reflect.Slice) && ft.Elem().Kind() == reflect.Struct && !leaf(ft.Elem()) {
			var sub *ast.StructType
			if at, ok := src.Type.(*ast.ArrayType); ok {
				sub, _ = at.Elt.(*ast.StructType)
			}
			if sub == nil {
				var err error
				if sub, err = w.structOf(ft.Elem()); err != nil {
					return err
				}
			}
			if err := w.walk(reflect.New(ft.Elem()).Elem(), sub, path+"[]", out); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// structOf finds the source of the named struct type t.
func (w *Walker) structOf(t reflect.Type) (*ast.StructType, error) {
	pkg := t.PkgPath()
	rel, ok := strings.CutPrefix(pkg, Module)
	if !ok {
		return nil, fmt.Errorf("confdoc: %s is not of module %s", t, Module)
	}
	files, ok := w.pkgs[pkg]
	if !ok {
		dir := filepath.Join(w.Root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("confdoc: %w", err)
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(w.fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
			if err != nil {
				return nil, fmt.Errorf("confdoc: %w", err)
			}
			files = append(files, f)
		}
		w.pkgs[pkg] = files
	}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if ts.Name.Name == t.Name() {
					if st, ok := ts.Type.(*ast.StructType); ok {
						return st, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("confdoc: no struct type %s in %s", t.Name(), pkg)
}

// docOf is a field's comment as one paragraph.
func docOf(f *ast.Field) string {
	var parts []string
	for _, cg := range []*ast.CommentGroup{f.Doc, f.Comment} {
		if cg != nil {
			parts = append(parts, strings.Join(strings.Fields(cg.Text()), " "))
		}
	}
	return strings.Join(parts, " ")
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return "duration"
	case t == reflect.TypeOf(size.Bytes(0)):
		return "size"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Map:
		return "map of " + typeName(t.Elem())
	case t.Kind() == reflect.Pointer:
		return typeName(t.Elem())
	case t.Kind() == reflect.Struct:
		return "section"
	}
	return t.Kind().String()
}

// format writes a default as it would be written in YAML.
func format(v reflect.Value) string {
	switch {
	case v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface:
		if v.IsNil() {
			return ""
		}
		return format(v.Elem())
	case v.Type() == reflect.TypeOf(time.Duration(0)):
		return duration(time.Duration(v.Int()))
	case v.Type() == reflect.TypeOf(size.Bytes(0)):
		return byteSize(v.Int())
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return `""`
		}
		return v.String()
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		if v.Len() == 0 {
			return "[]"
		}
		var items []string
		for i := 0; i < v.Len(); i++ {
			items = append(items, format(v.Index(i)))
		}
		return "[" + strings.Join(items, ", ") + "]"
	case v.Kind() == reflect.Map:
		if v.Len() == 0 {
			return "{}"
		}
		var items []string
		for _, k := range v.MapKeys() {
			items = append(items, fmt.Sprintf("%v: %s", k, format(v.MapIndex(k))))
		}
		sort.Strings(items)
		return "{" + strings.Join(items, ", ") + "}"
	case v.Kind() == reflect.Struct:
		return "…"
	}
	return fmt.Sprint(v.Interface())
}

// duration writes d as YAML would, without Go's zero minutes and seconds
// ("1h", "2m", "1m30s").
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func byteSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return fmt.Sprintf("%d%s", n/u.m, u.s)
		}
	}
	return fmt.Sprint(n)
}

// Markdown renders keys as a table under heading.
func Markdown(heading, intro string, keys []Key) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n%s\n\n| key | type | default | meaning |\n|---|---|---|---|\n", heading, intro)
	for _, k := range keys {
		def := k.Default
		if def != "" {
			def = "`" + strings.ReplaceAll(def, "|", `\|`) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Path, k.Type, def, strings.ReplaceAll(k.Doc, "|", `\|`))
	}
	return b.String()
}
