// Package config is the YAML plumbing shared by the edge config (package
// node) and the cloud config (package cloud): strict decoding with ${ENV}
// expansion, byte sizes, the embedded-catalog defaults, and the sections
// both roles have (storage, maintenance). It imports no protocol package:
// a part owns its own section (httpapi.Config is the http_api section).
//
// # Invariants
//
//   - A key the target struct does not have is an error, never a silent
//     default (a typo must not turn a setting off).
//   - A ${VAR} reference to an unset variable is an error naming it.
//   - Validation errors name the YAML field and the fix.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/tributary-io/tributary/internal/size"
	"gopkg.in/yaml.v3"
)

// Decode expands ${VAR} references in raw and decodes the YAML into v,
// refusing keys v does not have (a typo must not become a default). What
// is wrong with the YAML is an *Error naming each key as written, with
// its line; InFile adds the file's name.
func Decode(raw []byte, v any) error {
	expanded, err := expandEnv(raw)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(expanded), &doc); err != nil {
		return fromYAML(err)
	}
	if bad := check(&doc, reflect.TypeOf(v), ""); len(bad) > 0 {
		return &Error{Problems: bad}
	}
	dec := yaml.NewDecoder(strings.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fromYAML(err) // not reached when check foresaw every problem
	}
	return nil
}

// expandEnv replaces ${VAR} references with the environment; an unset
// variable is an *Error naming it at the line it is first written.
func expandEnv(raw []byte) (string, error) {
	var bad []Problem
	seen := map[string]bool{}
	expanded := os.Expand(string(raw), func(k string) string {
		v, ok := os.LookupEnv(k)
		if !ok && !seen[k] {
			seen[k] = true
			bad = append(bad, Problem{Line: lineOf(raw, k), Msg: fmt.Sprintf("environment variable %s is not set", k)})
		}
		return v
	})
	if len(bad) > 0 {
		return "", &Error{Problems: bad}
	}
	return expanded, nil
}

// lineOf is the line of raw where $name or ${name} is first written, or 0.
func lineOf(raw []byte, name string) int {
	for i, l := range strings.Split(string(raw), "\n") {
		if strings.Contains(l, "${"+name+"}") || strings.Contains(l, "$"+name) {
			return i + 1
		}
	}
	return 0
}

// RoleOf tells which kind of config file raw is: "cloud" when it says
// role: cloud, else "edge".
func RoleOf(raw []byte) string {
	var probe struct {
		Role string `yaml:"role"`
	}
	if yaml.Unmarshal(raw, &probe) == nil && probe.Role == "cloud" {
		return "cloud"
	}
	return "edge"
}

// DefaultCatalog fills the embedded-catalog defaults below dataDir: name
// tributary, SQLite at DATA_DIR/catalog.db, warehouse file://DATA_DIR/warehouse.
func DefaultCatalog(dataDir string, name, uri, warehouse *string) {
	if *name == "" {
		*name = "tributary"
	}
	if *uri == "" {
		*uri = "sqlite://" + absOrSame(filepath.Join(dataDir, "catalog.db"))
	}
	if *warehouse == "" {
		*warehouse = "file://" + absOrSame(filepath.Join(dataDir, "warehouse"))
	}
}

func absOrSame(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// ByteSize is a size in bytes that YAML may write as 64MiB, 1GiB, 512KB, 1000.
type ByteSize = size.Bytes

// ParseByteSize parses "64MiB", "1GB", "512k", "1000".
func ParseByteSize(s string) (ByteSize, error) { return size.Parse(s) }
