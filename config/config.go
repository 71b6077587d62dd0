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
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Decode expands ${VAR} references in raw and decodes the YAML into v,
// refusing keys v does not have (a typo must not become a default).
func Decode(raw []byte, v any) error {
	expanded, err := expandEnv(raw)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(expanded), &doc); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if bad := unknownKeys(&doc, reflect.TypeOf(v), ""); len(bad) > 0 {
		msgs := make([]string, len(bad))
		for i, e := range bad {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("config: %s", strings.Join(msgs, "; "))
	}
	dec := yaml.NewDecoder(strings.NewReader(expanded))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		if te, ok := err.(*yaml.TypeError); ok {
			return plainTypeErrors(te)
		}
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// expandEnv replaces ${VAR} references with the environment; an unset
// variable is an error naming it.
func expandEnv(raw []byte) (string, error) {
	var missing []string
	expanded := os.Expand(string(raw), func(k string) string {
		v, ok := os.LookupEnv(k)
		if !ok {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("config: environment variables not set: %s", strings.Join(missing, ", "))
	}
	return expanded, nil
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
type ByteSize int64

// UnmarshalYAML parses a size with an optional unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// ParseByteSize parses "64MiB", "1GB", "512k", "1000".
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			s, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (KiB, MiB, GiB, KB, MB, GB)", s)
	}
	return ByteSize(n * mult), nil
}
