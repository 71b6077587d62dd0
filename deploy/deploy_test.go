// Package deploy_test checks the deployment kit in this directory against
// the code: every YAML parses, configs pass node.ParseConfig, command lines
// name existing subcommands and flags, ports agree with the configured
// listeners and the code's defaults, and probe paths answer.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tributary-io/tributary/node"
)

var binPath string

// TestMain builds the binary the way deploy/Dockerfile does (static, no cgo).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tributary-deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "tributary")
	build := exec.Command("go", "build", "-o", binPath, "../cmd/tributary")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tributary with CGO_ENABLED=0 (as deploy/Dockerfile does):", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---- the binary's command line ----

type flagInfo struct {
	isBool bool
	def    string
}

var (
	flagLineRE = regexp.MustCompile(`^  -(\S+)(?: (\S+))?`)
	defaultRE  = regexp.MustCompile(`\(default "?([^")]*)"?\)`)
	cachedSets = map[string]map[string]flagInfo{}
)

// flagSet parses `tributary SUB -h` into the subcommand's flags.
func flagSet(t *testing.T, sub string) map[string]flagInfo {
	t.Helper()
	if fs, ok := cachedSets[sub]; ok {
		return fs
	}
	out, _ := exec.Command(binPath, sub, "-h").CombinedOutput() // -h exits 2
	if !bytes.Contains(out, []byte("Usage of")) {
		t.Fatalf("tributary %s -h: no usage:\n%s", sub, out)
	}
	fs := map[string]flagInfo{}
	var last string
	for _, line := range strings.Split(string(out), "\n") {
		if m := flagLineRE.FindStringSubmatch(line); m != nil {
			last = m[1]
			fs[last] = flagInfo{isBool: m[2] == ""}
			continue
		}
		if m := defaultRE.FindStringSubmatch(line); m != nil && last != "" {
			fi := fs[last]
			fi.def = m[1]
			fs[last] = fi
		}
	}
	if len(fs) == 0 {
		t.Fatalf("tributary %s -h lists no flags:\n%s", sub, out)
	}
	cachedSets[sub] = fs
	return fs
}

var subcommands = map[string]bool{"dev": true, "edge": true, "cloud": true, "tables": true, "sim": true, "config": true}

// checkArgs validates argv (after the binary) the way the flag package
// would parse it and returns the subcommand and the flag values.
func checkArgs(t *testing.T, where string, argv []string) (string, map[string]string) {
	t.Helper()
	if len(argv) == 0 {
		t.Errorf("%s: no subcommand", where)
		return "", nil
	}
	sub := argv[0]
	if !subcommands[sub] {
		t.Errorf("%s: %q is not a tributary subcommand", where, sub)
		return sub, nil
	}
	if sub == "config" {
		if !(len(argv) == 3 || len(argv) == 4 && argv[2] == "--offline") || argv[1] != "check" {
			t.Errorf("%s: want `config check [--offline] FILE`, got %q", where, argv)
		}
		return sub, map[string]string{"file": argv[len(argv)-1]}
	}
	fs := flagSet(t, sub)
	vals := map[string]string{}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: unexpected argument %q (tributary %s takes flags only)", where, a, sub)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		fi, ok := fs[name]
		if !ok {
			t.Errorf("%s: tributary %s has no flag -%s", where, sub, name)
			continue
		}
		if !hasVal && !fi.isBool {
			if i+1 >= len(argv) {
				t.Errorf("%s: flag -%s needs a value", where, name)
				continue
			}
			i++
			val = argv[i]
		}
		vals[name] = val
	}
	return sub, vals
}

// flagOr is the flag's value on the command line, or its default.
func flagOr(t *testing.T, sub string, vals map[string]string, name string) string {
	if v, ok := vals[name]; ok {
		return v
	}
	return flagSet(t, sub)[name].def
}

// ---- addresses ----

func portOf(t *testing.T, where, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: address %q: %v", where, addr, err)
		return 0
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Errorf("%s: port of %q: %v", where, addr, err)
	}
	return n
}

// reachable: a listener in a container or on a server must not bind loopback.
func checkNotLoopback(t *testing.T, where, addr string) {
	t.Helper()
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		t.Errorf("%s: %q binds loopback; nothing outside the container/host can reach it (use 0.0.0.0)", where, addr)
	}
}

// defaultPorts are the ports of the code's listener defaults.
func defaultPorts(t *testing.T) map[int]string {
	ports := map[int]string{}
	for _, f := range []string{"mqtt-addr", "mqtt-ws-addr", "kafka-addr", "http-addr", "catalog-addr"} {
		ports[portOf(t, "tributary dev -"+f+" default", flagSet(t, "dev")[f].def)] = "dev -" + f
	}
	for _, f := range []string{"catalog-addr", "kafka-addr", "pulsar-addr"} {
		ports[portOf(t, "tributary cloud -"+f+" default", flagSet(t, "cloud")[f].def)] = "cloud -" + f
	}
	return ports
}

// ---- configs ----

var envRefRE = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// parseEdgeConfig runs node.ParseConfig on raw with env set; every ${VAR}
// in raw must be one of env's keys (what the container/unit provides).
func parseEdgeConfig(t *testing.T, where string, raw string, env map[string]string) node.Config {
	t.Helper()
	for _, m := range envRefRE.FindAllStringSubmatch(raw, -1) {
		v := m[1] + m[2]
		if _, ok := env[v]; !ok {
			t.Errorf("%s: references ${%s}, which the container/unit does not set (an unset variable fails the node)", where, v)
			env[v] = "x"
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := node.ParseConfig([]byte(raw))
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return cfg
}

// ---- probes ----

func get(t *testing.T, url string) int {
	t.Helper()
	return getWith(t, &http.Client{Timeout: 10 * time.Second}, url)
}

// getWith GETs url with c and returns the status (0, reported, on error).
func getWith(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// edgeProbeOK reports whether an edge node's HTTP mux answers 200 on path.
func edgeProbeOK(t *testing.T, path string) bool {
	t.Helper()
	dir := t.TempDir()
	cfg := node.Config{NodeID: "probe-1", DataDir: dir, HTTPAddr: "127.0.0.1:0"}
	cfg.MQTT.Addr = "127.0.0.1:0"
	n, err := node.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return get(t, "http://"+n.HTTPAddr()+path) == 200
}

// cloudProbeOK reports whether `tributary cloud` answers 200 on path.
func cloudProbeOK(t *testing.T, path string) bool {
	t.Helper()
	cmd := exec.Command(binPath, "cloud", "--catalog-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0", "--pulsar-addr", "127.0.0.1:0", "--data", t.TempDir())
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ready := regexp.MustCompile(`msg=ready catalog=(\S+)`)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return get(t, "http://"+a+path) == 200
	case <-time.After(30 * time.Second):
		t.Fatal("tributary cloud: no ready line in 30s")
	}
	return false
}

var probeCache = map[string]bool{}

func checkProbePath(t *testing.T, where, component, path string) {
	t.Helper()
	key := component + path
	ok, seen := probeCache[key]
	if !seen {
		if component == "edge" {
			ok = edgeProbeOK(t, path)
		} else {
			ok = cloudProbeOK(t, path)
		}
		probeCache[key] = ok
	}
	if !ok {
		t.Errorf("%s: probe path %s does not answer 200 on a running %s", where, path, component)
	}
}

// ---- YAML ----

func yamlDocs(t *testing.T, path string) []*yaml.Node {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, &n)
	}
	return docs
}

// TestYAMLParses parses every YAML file in deploy/ (all documents).
func TestYAMLParses(t *testing.T) {
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml", "*/*.yaml", "*/*.yml"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	if len(files) < 4 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		if docs := yamlDocs(t, f); len(docs) == 0 {
			t.Errorf("%s: no YAML documents", f)
		}
	}
}

// TestEdgeYAML: the reference config passes node.ParseConfig with
// HOSTNAME and the catalog credential set (the systemd unit sets them).
func TestEdgeYAML(t *testing.T) {
	raw, err := os.ReadFile("edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	parseEdgeConfig(t, "edge.yaml", string(raw), map[string]string{"HOSTNAME": "edge-test", "TRIBUTARY_CATALOG_CREDENTIAL": "edge-test:secret"})
}
