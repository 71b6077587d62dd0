// Package size is a size in bytes as a config file writes it (64MiB, 1GiB,
// 512KB, 1000). It is a leaf: every part's yaml-tagged Config section may
// use it without importing package config.
package size

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bytes is a size in bytes that YAML may write as 64MiB, 1GiB, 512KB, 1000.
type Bytes int64

// UnmarshalYAML parses a size with an optional unit.
func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	v, err := Parse(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("want a size such as 64MiB, 1GiB or 1000, got %s", Written(n))
	}
	*b = v
	return nil
}

// Written names what a YAML node holds, as an operator wrote it: its
// value quoted, or "a section of keys" or "a list" (config's messages
// use it too).
func Written(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// Parse parses "64MiB", "1GB", "512k", "1000".
func Parse(s string) (Bytes, error) {
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
	return Bytes(n * mult), nil
}
