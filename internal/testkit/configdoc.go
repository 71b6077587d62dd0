package testkit

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Settings renders every scalar setting of a yaml-tagged config struct
// by its YAML key (dotted): durations as time.Duration prints them, byte
// sizes in bytes, nil pointers and empty lists as "" and "[]".
func Settings(cfg any) map[string]string { return leaves(reflect.ValueOf(cfg), "") }

func leaves(v reflect.Value, prefix string) map[string]string {
	out := map[string]string{}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		key := prefix + name
		if opts == "inline" {
			key = strings.TrimSuffix(prefix, ".")
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				out[key] = ""
				continue
			}
			fv = fv.Elem()
		}
		switch x := fv.Interface().(type) {
		case time.Duration:
			out[key] = x.String()
		default:
			switch fv.Kind() {
			case reflect.Struct:
				p := key + "."
				if opts == "inline" {
					p = prefix
				}
				for k, s := range leaves(fv, p) {
					out[k] = s
				}
			case reflect.Slice:
				out[key] = fmt.Sprint(fv.Interface())
			case reflect.Map:
			default:
				out[key] = fmt.Sprint(fv.Interface())
			}
		}
	}
	return out
}

// DocComments maps each YAML key of the struct type root (in files) to
// its doc comment, whitespace folded; a field without a comment of its
// own has the comment of the group it follows. aliases maps a field's
// type as written to the struct type it names; the security section (a
// world of its own) is not walked. With Settings, a test compares the
// defaults the comments state with a config's effective values.
func DocComments(t *testing.T, files []string, root string, aliases map[string]string) map[string]string {
	t.Helper()
	types := map[string]*ast.StructType{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					types[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	out := map[string]string{}
	var walk func(st *ast.StructType, prefix string)
	walk = func(st *ast.StructType, prefix string) {
		group := ""
		for _, f := range st.Fields.List {
			doc := ""
			if f.Doc != nil {
				doc = strings.Join(strings.Fields(f.Doc.Text()), " ")
				group = doc
			} else {
				doc = group
			}
			if f.Tag == nil {
				continue
			}
			tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			key := prefix + name
			if opts == "inline" {
				key = strings.TrimSuffix(prefix, ".")
			}
			out[key] = doc
			switch ft := f.Type.(type) {
			case *ast.StructType:
				walk(ft, key+".")
			default:
				tn := types[aliases[exprString(ft)]]
				if tn == nil {
					tn = types[exprString(ft)]
				}
				if tn != nil && name != "security" {
					walk(tn, key+".")
				}
			}
		}
	}
	walk(types[root], "")
	return out
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprString(x.X) + "." + x.Sel.Name
	case *ast.StarExpr:
		return exprString(x.X)
	}
	return ""
}
