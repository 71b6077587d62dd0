package deploy_test

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// ---- compose.yaml ----

type composeService struct {
	Build       any               `yaml:"build"`
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Configs     []composeRef      `yaml:"configs"`
	Secrets     []composeRef      `yaml:"secrets"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	// StopGracePeriod bounds a stop.
	StopGracePeriod string `yaml:"stop_grace_period"`
}

// composeRef is a service's configs/secrets entry: "name" or {source, target}.
type composeRef struct {
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

func (r *composeRef) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		r.Source = n.Value
		return nil
	}
	type plain composeRef
	return n.Decode((*plain)(r))
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Configs  map[string]struct {
		Content string `yaml:"content"`
		File    string `yaml:"file"`
	} `yaml:"configs"`
	Secrets map[string]struct {
		File        string `yaml:"file"`
		Environment string `yaml:"environment"`
	} `yaml:"secrets"`
	Volumes map[string]any `yaml:"volumes"`
}

// composeInterpolateRE: what compose substitutes itself ($$ is a literal $).
var composeInterpolateRE = regexp.MustCompile(`\$\$|\$\{[^}]*\}|\$\w+`)

// composeValue is s as the container sees it: ${VAR...} from the shell
// or .env become placeholders, $$ becomes $.
func composeValue(name, s string) string {
	return composeInterpolateRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		return placeholder(name)
	})
}

// composeSandbox provides the service's configs (inline content or file)
// and secrets (at /run/secrets/NAME or their target), and its environment.
func composeSandbox(t *testing.T, f string, c composeFile, name string) (*sandbox, map[string]string) {
	t.Helper()
	svc := c.Services[name]
	where := f + " services." + name
	sb := newSandbox(t)
	for _, r := range svc.Configs {
		cfg, ok := c.Configs[r.Source]
		if !ok {
			t.Errorf("%s: configs: %q is not declared under configs:", where, r.Source)
			continue
		}
		target := r.Target
		if target == "" {
			target = "/" + r.Source
		}
		content := []byte(composeValue("", cfg.Content))
		if cfg.File != "" {
			b, err := os.ReadFile(cfg.File)
			if err != nil {
				t.Errorf("%s: configs.%s file %s: %v", where, r.Source, cfg.File, err)
			}
			content = b
		}
		sb.provide(target, content)
	}
	for _, r := range svc.Secrets {
		sec, ok := c.Secrets[r.Source]
		if !ok {
			t.Errorf("%s: secrets: %q is not declared under secrets:", where, r.Source)
			continue
		}
		target := r.Target
		switch {
		case target == "":
			target = "/run/secrets/" + r.Source
		case !strings.HasPrefix(target, "/"):
			target = "/run/secrets/" + target
		}
		src := sec.File
		if src == "" {
			src = r.Source
		}
		sb.provide(target, materialFor(t, where+" secrets."+r.Source, src))
	}
	env := map[string]string{}
	for k, v := range svc.Environment {
		env[k] = composeValue(k, v)
	}
	return sb, env
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
	if envRefRE.MatchString(strings.ReplaceAll(raw, "$$", "")) {
		t.Errorf("%s: configs: the edge config uses $VAR, which compose substitutes itself (write $$VAR for the node's environment)", f)
	}
	esb, eenv := composeSandbox(t, f, c, "edge")
	cfg := checkEdgeStarts(t, f+" configs.edge_config", esb, composeValue("", raw), eenv, "config or secret")
	if cfg.Security.TLS.On("http") {
		checkEdgeTLSProbes(t, f+" services.edge (https://localhost:8080/readyz)", esb, composeValue("", raw), eenv, "/healthz", "/readyz")
	}
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
	csb, cenv := composeSandbox(t, f, c, "cloud")
	cchk := checkCloudStarts(t, f+" services.cloud.command", csb, cloud.Command, cenv, "config or secret")
	if cchk.tlsOn("rest") {
		checkCloudTLSProbes(t, f+" services.cloud (curl --cacert … https://localhost:8181/readyz)", csb, cloud.Command, cenv, "/healthz", "/readyz")
	}
	catAddr := flagOr(t, "cloud", cvals, "catalog-addr")
	checkNotLoopback(t, f+" services.cloud --catalog-addr", catAddr)
	catPort := portOf(t, f, catAddr)
	if !composePorts(t, f+" services.cloud", cloud.Ports)[catPort] {
		t.Errorf("%s: services.cloud.ports does not publish --catalog-addr port %d", f, catPort)
	}
	scheme := "http"
	if cchk.tlsOn("rest") {
		scheme = "https"
	}
	if want := scheme + "://cloud:" + strconv.Itoa(catPort); len(cchk) > 0 && cfg.Catalog.URI != want {
		t.Errorf("%s: edge catalog.uri %q, want %q (the cloud service)", f, cfg.Catalog.URI, want)
	}
	_, nodeTok := cenv["TRIBUTARY_NODE_TOKEN"]
	_, nodeTokFlag := cvals["node-token"]
	checkEdgeToCloud(t, f+" configs.edge_config", cfg, cchk, nodeTok || nodeTokFlag)
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

// unitComments are the comment lines of a unit: they document the files
// the operator installs (absolute paths under /etc/tributary) and the
// variables of its EnvironmentFile (indented NAME=value lines).
func unitComments(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if l, ok := strings.CutPrefix(strings.TrimSpace(line), "#"); ok {
			out = append(out, l)
		}
	}
	return out
}

var (
	unitFileRE = regexp.MustCompile(`^\s+(/etc/tributary/\S+)`)
	unitEnvRE  = regexp.MustCompile(`^\s+([A-Z][A-Z0-9_]*)=(\S*)`)
)

// unitSandbox provides the files the unit's comments list, the example
// config (deploy/edge.yaml, deploy/cloud.yaml) at configPath, and returns
// the environment: Environment= lines, and the documented variables of an
// EnvironmentFile= the unit reads.
func unitSandbox(t *testing.T, file string, keys map[string][]string, configPath, example string) (*sandbox, map[string]string) {
	t.Helper()
	sb := newSandbox(t)
	env := map[string]string{}
	for _, e := range keys["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		// systemd specifiers (%H host name, %i instance, ...) expand to words
		env[k] = regexp.MustCompile(`%[a-zA-Z]`).ReplaceAllString(v, "spec")
	}
	for _, l := range unitComments(t, file) {
		if m := unitFileRE.FindStringSubmatch(l); m != nil && m[1] != configPath && !strings.HasSuffix(m[1], ".env") {
			sb.provide(m[1], materialFor(t, file, m[1]))
		}
		if m := unitEnvRE.FindStringSubmatch(l); m != nil && len(keys["EnvironmentFile"]) > 0 {
			env[m[1]] = placeholder(m[1])
		}
	}
	raw, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	sb.provide(configPath, raw)
	return sb, env
}

func checkReload(t *testing.T, file string, keys map[string][]string) {
	t.Helper()
	if r := keys["ExecReload"]; len(r) != 1 || !strings.Contains(r[0], "-HUP $MAINPID") {
		t.Errorf("%s: ExecReload=%v, want /bin/kill -HUP $MAINPID (SIGHUP reloads certificates, users and JWT keys)", file, r)
	}
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
	esb, env := unitSandbox(t, ef, ek, vals["config"], "edge.yaml")
	raw, _ := os.ReadFile("edge.yaml")
	cfg := checkEdgeStarts(t, ef+" with deploy/edge.yaml as "+vals["config"], esb, string(raw), env, "file the unit's comments list")
	checkStop(t, ef, ek, cfg.ShutdownTimeout)
	checkReload(t, ef, ek)
	if !strings.HasPrefix(cfg.DataDir, "/var/lib/"+ek["StateDirectory"][0]) {
		t.Errorf("%s: StateDirectory=%s but edge.yaml data_dir is %s", ef, ek["StateDirectory"][0], cfg.DataDir)
	}

	// cloud
	const cf = "tributary-cloud.service"
	ck := unitKeys(t, cf)
	if len(ck["ExecStart"]) != 1 {
		t.Fatalf("%s: want one ExecStart", cf)
	}
	argv := unitArgv(t, cf, "ExecStart", ck["ExecStart"][0])
	csub, cvals := checkArgs(t, cf+" ExecStart", argv)
	if csub != "cloud" {
		t.Fatalf("%s: ExecStart must run `tributary cloud`", cf)
	}
	if cvals["config"] == "" && cvals["security"] == "" {
		t.Errorf("%s: ExecStart runs tributary cloud without --config or --security: no security section, and on 0.0.0.0 it refuses to start", cf)
	}
	example := "cloud.yaml"
	cpath := cvals["config"]
	if cpath == "" {
		cpath, example = cvals["security"], "cloud.yaml" // a --security file: deploy/cloud.yaml's section alone is not shipped
	}
	csb, cenv := unitSandbox(t, cf, ck, cpath, example)
	cchk := checkCloudStarts(t, cf+" ExecStart with deploy/"+example+" as "+cpath, csb, argv, cenv, "file the unit's comments list")
	checkNotLoopback(t, cf+" catalog.addr", cchk["catalog.addr"])
	for _, pre := range ck["ExecStartPre"] {
		pargv := unitArgv(t, cf, "ExecStartPre", pre)
		if len(pargv) > 1 && pargv[0] == "cloud" {
			_, pvals := checkArgs(t, cf+" ExecStartPre", pargv)
			if _, ok := pvals["check"]; !ok {
				t.Errorf("%s: ExecStartPre runs tributary cloud without --check", cf)
			}
			for _, k := range []string{"config", "security", "data", "catalog-addr", "kafka-addr", "pulsar-addr", "catalog", "warehouse"} {
				if pvals[k] != cvals[k] {
					t.Errorf("%s: ExecStartPre --check has --%s %q but ExecStart %q: it checks another configuration", cf, k, pvals[k], cvals[k])
				}
			}
		}
	}
	if d := cvals["data"]; len(ck["StateDirectory"]) == 0 || d != "/var/lib/"+ck["StateDirectory"][0] {
		t.Errorf("%s: --data %q is not the StateDirectory /var/lib/%v", cf, d, ck["StateDirectory"])
	}
	checkStop(t, cf, ck, 10*time.Second) // cloud.go shuts down within 10s
	checkReload(t, cf, ck)
	if _, ok := cvals["token"]; ok {
		t.Errorf("%s: --token on the command line is visible in ps; use TRIBUTARY_CATALOG_TOKEN in the EnvironmentFile", cf)
	}
	if _, ok := cvals["node-token"]; ok {
		t.Errorf("%s: --node-token on the command line is visible in ps; use TRIBUTARY_NODE_TOKEN in the EnvironmentFile", cf)
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
