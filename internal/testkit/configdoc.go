package testkit

import (
	"fmt"
	"reflect"
	"strings"
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
