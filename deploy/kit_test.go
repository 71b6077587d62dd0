package deploy_test

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ---- compose.yaml ----

type composeService struct {
	Build   any      `yaml:"build"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Configs []struct {
		Source string `yaml:"source"`
		Target string `yaml:"target"`
	} `yaml:"configs"`
	Ports           []string `yaml:"ports"`
	Volumes         []string `yaml:"volumes"`
	StopGracePeriod string   `yaml:"stop_grace_period"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Configs  map[string]struct {
		Content string `yaml:"content"`
		File    string `yaml:"file"`
	} `yaml:"configs"`
	Volumes map[string]any `yaml:"volumes"`
}

// containerPorts maps "HOST:CONTAINER" entries to their container ports.
func composePorts(t *testing.T, where string, ports []string) map[int]bool {
	out := map[int]bool{}
	for _, p := range ports {
		parts := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
		n, err := strconv.Atoi(parts[len(parts)-1])
		if err != nil {
			t.Errorf("%s: ports entry %q", where, p)
			continue
		}
		out[n] = true
	}
	return out
}

// composeMount finds the volume (name) mounted at the deepest prefix of p.
func composeMount(svc composeService, p string) (string, bool) {
	best, name := "", ""
	for _, v := range svc.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		dst, _, _ = strings.Cut(dst, ":")
		if (p == dst || strings.HasPrefix(p, strings.TrimSuffix(dst, "/")+"/")) && len(dst) > len(best) {
			best, name = dst, src
		}
	}
	return name, best != ""
}

func TestCompose(t *testing.T) {
	const f = "compose.yaml"
	docs := yamlDocs(t, f)
	var c composeFile
	if err := docs[0].Decode(&c); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	edge, ok := c.Services["edge"]
	if !ok {
		t.Fatalf("%s: no services.edge", f)
	}
	cloud, ok := c.Services["cloud"]
	if !ok {
		t.Fatalf("%s: no services.cloud", f)
	}
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if _, ok := c.Volumes[src]; !ok && !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				t.Errorf("%s: services.%s.volumes %q: volume %q is not declared under volumes:", f, name, v, src)
			}
		}
	}

	sub, vals := checkArgs(t, f+" services.edge.command", edge.Command)
	if sub != "edge" {
		t.Fatalf("%s: services.edge.command runs %q", f, sub)
	}
	var raw string
	for _, cr := range edge.Configs {
		if cr.Target == vals["config"] {
			raw = c.Configs[cr.Source].Content
		}
	}
	if raw == "" {
		t.Fatalf("%s: services.edge -config %s is not the target of a config with inline content", f, vals["config"])
	}
	if envRefRE.MatchString(raw) {
		t.Errorf("%s: configs: the edge config uses $VAR, which compose substitutes itself", f)
	}
	cfg := parseEdgeConfig(t, f+" configs.edge_config", raw, map[string]string{})
	ports := composePorts(t, f+" services.edge", edge.Ports)
	for field, addr := range map[string]string{"mqtt.addr": cfg.MQTT.Addr, "kafka.addr": cfg.Kafka.Addr, "http_addr": cfg.HTTPAddr} {
		checkNotLoopback(t, f+" edge config "+field, addr)
		if p := portOf(t, f+" "+field, addr); !ports[p] {
			t.Errorf("%s: services.edge.ports does not publish %s's port %d", f, field, p)
		}
	}
	if d, err := time.ParseDuration(edge.StopGracePeriod); err != nil || d <= cfg.ShutdownTimeout {
		t.Errorf("%s: services.edge.stop_grace_period %q must exceed shutdown_timeout %s", f, edge.StopGracePeriod, cfg.ShutdownTimeout)
	}
	for field, p := range map[string]string{"data_dir": cfg.DataDir, "wal.path": cfg.WAL.Path} {
		if _, ok := composeMount(edge, p); !ok {
			t.Errorf("%s: edge config %s %s is not on a volume", f, field, p)
		}
	}

	csub, cvals := checkArgs(t, f+" services.cloud.command", cloud.Command)
	if csub != "cloud" {
		t.Fatalf("%s: services.cloud.command runs %q", f, csub)
	}
	catAddr := flagOr(t, "cloud", cvals, "catalog-addr")
	checkNotLoopback(t, f+" services.cloud --catalog-addr", catAddr)
	catPort := portOf(t, f, catAddr)
	if !composePorts(t, f+" services.cloud", cloud.Ports)[catPort] {
		t.Errorf("%s: services.cloud.ports does not publish --catalog-addr port %d", f, catPort)
	}
	if want := "http://cloud:" + strconv.Itoa(catPort); cfg.Catalog.URI != want {
		t.Errorf("%s: edge catalog.uri %q, want %q (the cloud service)", f, cfg.Catalog.URI, want)
	}
	wh := flagOr(t, "cloud", cvals, "warehouse")
	if wh != cfg.Catalog.Warehouse {
		t.Errorf("%s: edge catalog.warehouse %q ≠ cloud --warehouse %q", f, cfg.Catalog.Warehouse, wh)
	}
	if p, ok := strings.CutPrefix(wh, "file://"); ok {
		ev, eok := composeMount(edge, p)
		cv, cok := composeMount(cloud, p)
		if !eok || !cok || ev != cv {
			t.Errorf("%s: file warehouse %s must be the same volume in edge (%q) and cloud (%q)", f, p, ev, cv)
		}
	}
	if cloud.Build == nil && edge.Build == nil {
		t.Errorf("%s: no service builds the image (build: deploy/Dockerfile)", f)
	}
}

// ---- systemd units ----

func unitKeys(t *testing.T, file string) map[string][]string {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	keys := map[string][]string{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: malformed line %q", file, line)
			continue
		}
		keys[k] = append(keys[k], v)
	}
	return keys
}

func unitArgv(t *testing.T, file, key, line string) []string {
	f := strings.Fields(strings.TrimLeft(line, "-@+!"))
	if len(f) == 0 || !strings.HasPrefix(f[0], "/") || !strings.HasSuffix(f[0], "/tributary") {
		t.Errorf("%s: %s=%s: want an absolute path to the tributary binary", file, key, line)
		return nil
	}
	return f[1:]
}

func TestSystemdUnits(t *testing.T) {
	// edge
	const ef = "tributary-edge.service"
	ek := unitKeys(t, ef)
	if len(ek["ExecStart"]) != 1 {
		t.Fatalf("%s: want one ExecStart", ef)
	}
	sub, vals := checkArgs(t, ef+" ExecStart", unitArgv(t, ef, "ExecStart", ek["ExecStart"][0]))
	if sub != "edge" || vals["config"] == "" {
		t.Fatalf("%s: ExecStart must run `tributary edge -config FILE`", ef)
	}
	for _, pre := range ek["ExecStartPre"] {
		psub, pvals := checkArgs(t, ef+" ExecStartPre", unitArgv(t, ef, "ExecStartPre", pre))
		if psub == "config" && pvals["file"] != vals["config"] {
			t.Errorf("%s: ExecStartPre checks %s but ExecStart runs -config %s", ef, pvals["file"], vals["config"])
		}
	}
	raw, err := os.ReadFile("edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range ek["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		// systemd specifiers (%H host name, %i instance, ...) expand to words
		env[k] = regexp.MustCompile(`%[a-zA-Z]`).ReplaceAllString(v, "spec")
	}
	cfg := parseEdgeConfig(t, ef+" with deploy/edge.yaml as "+vals["config"], string(raw), env)
	checkStop(t, ef, ek, cfg.ShutdownTimeout)
	if !strings.HasPrefix(cfg.DataDir, "/var/lib/"+ek["StateDirectory"][0]) {
		t.Errorf("%s: StateDirectory=%s but edge.yaml data_dir is %s", ef, ek["StateDirectory"][0], cfg.DataDir)
	}

	// cloud
	const cf = "tributary-cloud.service"
	ck := unitKeys(t, cf)
	if len(ck["ExecStart"]) != 1 {
		t.Fatalf("%s: want one ExecStart", cf)
	}
	csub, cvals := checkArgs(t, cf+" ExecStart", unitArgv(t, cf, "ExecStart", ck["ExecStart"][0]))
	if csub != "cloud" {
		t.Fatalf("%s: ExecStart must run `tributary cloud`", cf)
	}
	checkNotLoopback(t, cf+" --catalog-addr", flagOr(t, "cloud", cvals, "catalog-addr"))
	if d := cvals["data"]; len(ck["StateDirectory"]) == 0 || d != "/var/lib/"+ck["StateDirectory"][0] {
		t.Errorf("%s: --data %q is not the StateDirectory /var/lib/%v", cf, d, ck["StateDirectory"])
	}
	checkStop(t, cf, ck, 10*time.Second) // cloud.go shuts down within 10s
	if _, ok := cvals["token"]; ok {
		t.Errorf("%s: --token on the command line is visible in ps; use TRIBUTARY_CATALOG_TOKEN in the EnvironmentFile", cf)
	}
}

func checkStop(t *testing.T, file string, keys map[string][]string, shutdown time.Duration) {
	if len(keys["TimeoutStopSec"]) != 1 {
		t.Errorf("%s: TimeoutStopSec missing", file)
		return
	}
	s, err := strconv.Atoi(keys["TimeoutStopSec"][0])
	if err != nil || time.Duration(s)*time.Second <= shutdown {
		t.Errorf("%s: TimeoutStopSec=%s must exceed the shutdown bound %s", file, keys["TimeoutStopSec"][0], shutdown)
	}
}

// ---- Dockerfile ----

var jsonArrayRE = regexp.MustCompile(`"([^"]*)"`)

func TestDockerfile(t *testing.T) {
	const f = "Dockerfile"
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	// join continuation lines
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	var froms int
	var user, entry, cmd, binCopy string
	exposed := map[int]bool{}
	buildsCmd := false
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			froms++
			user = "" // USER applies per stage; we want the final one
		case "RUN":
			if strings.Contains(rest, "go build") && strings.Contains(rest, "./cmd/tributary") && strings.Contains(rest, "CGO_ENABLED=0") {
				buildsCmd = true
			}
		case "COPY":
			if fs := strings.Fields(rest); strings.Contains(rest, "--from=") && len(fs) >= 2 && strings.HasSuffix(fs[len(fs)-2], "/tributary") {
				binCopy = fs[len(fs)-1]
			}
		case "USER":
			user = rest
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Errorf("%s: EXPOSE %q", f, p)
				}
				exposed[n] = true
			}
		case "ENTRYPOINT":
			entry = rest
		case "CMD":
			cmd = rest
		}
	}
	if froms < 2 {
		t.Errorf("%s: want a multi-stage build (build stage + runtime), found %d FROM", f, froms)
	}
	if !buildsCmd {
		t.Errorf("%s: no RUN with CGO_ENABLED=0 go build ... ./cmd/tributary", f)
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("%s: the final stage must set a non-root USER (got %q)", f, user)
	}
	ep := jsonArrayRE.FindAllStringSubmatch(entry, -1)
	if !strings.HasPrefix(entry, "[") || len(ep) != 1 || ep[0][1] != binCopy {
		t.Errorf("%s: ENTRYPOINT %s: want the exec form [\"%s\"] (the copied binary)", f, entry, binCopy)
	}
	if cmd != "" {
		var argv []string
		for _, m := range jsonArrayRE.FindAllStringSubmatch(cmd, -1) {
			argv = append(argv, m[1])
		}
		checkArgs(t, f+" CMD", argv)
	}
	// EXPOSE = the ports of the code's default listeners
	for p, what := range defaultPorts(t) {
		if !exposed[p] {
			t.Errorf("%s: EXPOSE lacks %d (%s default)", f, p, what)
		}
	}
	def := defaultPorts(t)
	for p := range exposed {
		if _, ok := def[p]; !ok {
			t.Errorf("%s: EXPOSE %d is no listener default of tributary dev/cloud", f, p)
		}
	}
	// every port a manifest publishes is exposed by the image
	for _, file := range []string{"k8s/edge.yaml", "k8s/cloud.yaml"} {
		for key, o := range k8sObjects(t, file) {
			for _, c := range o.Spec.Template.Spec.Containers {
				for _, cp := range c.Ports {
					if !exposed[cp.ContainerPort] {
						t.Errorf("%s: %s %s containerPort %d is not EXPOSEd by %s", file, key, c.Name, cp.ContainerPort, f)
					}
				}
			}
		}
	}
}
