package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tributary-io/tributary/cloud"
	"github.com/tributary-io/tributary/node"
	"gopkg.in/yaml.v3"
)

var updateSettings = flag.Bool("update-settings", false, "rewrite testdata/settings/*.txt from the code")

// TestEffectiveSettings pins the effective settings (after defaults) of
// the example configs operators copy — deploy/edge.yaml, deploy/cloud.yaml,
// the edge config of deploy/k8s/edge.yaml — and of empty edge and cloud
// files (every default), one YAML key path a line, sorted. Moving a
// setting between structs (a part's Config embedded in node.Config or
// cloud.Config) must leave these files unchanged: the keys, their
// defaults and their values are what operators have today.
// go test -run TestEffectiveSettings -update-settings ./cmd/tributary rewrites them.
func TestEffectiveSettings(t *testing.T) {
	t.Setenv("HOSTNAME", "edge-golden-1")
	t.Setenv("TRIBUTARY_CATALOG_CREDENTIAL", "edge-golden-1:secret")
	t.Setenv("POD_NAME", "edge-golden-0")
	t.Setenv("POD_NAMESPACE", "plant")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("TRIBUTARY_S3_BUCKET", "plant-lake")
	k8sEdge := k8sConfigMapFile(t, "../../deploy/k8s/edge.yaml", "edge.yaml")
	cases := []struct {
		name string
		raw  func() []byte
	}{
		{"deploy-edge", func() []byte { return readFile(t, "../../deploy/edge.yaml") }},
		{"deploy-cloud", func() []byte { return readFile(t, "../../deploy/cloud.yaml") }},
		{"k8s-edge", func() []byte { return k8sEdge }},
		{"edge-defaults", func() []byte { return []byte("") }},
		{"cloud-defaults", func() []byte { return []byte("role: cloud\n") }},
	}
	for _, c := range cases {
		raw := c.raw()
		var cfg any
		var err error
		if cloud.RoleOf(raw) == "cloud" {
			cfg, err = cloud.ParseConfig(raw)
		} else {
			cfg, err = node.ParseConfig(raw)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := dumpSettings(t, cfg)
		file := filepath.Join("testdata", "settings", c.name+".txt")
		if *updateSettings {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%s: %v (run with -update-settings to write it)", c.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: effective settings differ from %s:\n%s", c.name, file, lineDiff(string(want), string(got)))
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// k8sConfigMapFile is data[key] of the ConfigMap in the manifest at path.
func k8sConfigMapFile(t *testing.T, path, key string) []byte {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, path)))
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s: no ConfigMap with %s: %v", path, key, err)
		}
		if doc.Kind == "ConfigMap" && doc.Data[key] != "" {
			return []byte(doc.Data[key])
		}
	}
}

// dumpSettings is cfg as YAML flattened to "path: value" lines, sorted;
// the host name and the working directory (defaults of node_id and
// data_dir's absolute paths) are written as $HOST and $CWD.
func dumpSettings(t *testing.T, cfg any) []byte {
	t.Helper()
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	var lines []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				lines = append(lines, path+": {}")
			}
			for k, e := range x {
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, e)
			}
		case []any:
			if len(x) == 0 {
				lines = append(lines, path+": []")
			}
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		default:
			lines = append(lines, fmt.Sprintf("%s: %v", path, x))
		}
	}
	walk("", tree)
	sort.Strings(lines)
	host, _ := os.Hostname()
	cwd, _ := os.Getwd()
	out := strings.Join(lines, "\n") + "\n"
	out = strings.ReplaceAll(out, cwd, "$CWD")
	if host != "" {
		out = strings.ReplaceAll(out, ": "+host+"\n", ": $HOST\n")
	}
	return []byte(out)
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
