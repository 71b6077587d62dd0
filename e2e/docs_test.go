package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tributary-io/tributary/internal/testkit"
)

// The documentation runs: every fenced shell block of the repository's
// Markdown files is run here against a `tributary dev` on free ports, or
// carries a not-run mark with its reason (docs/testing.md "Documentation
// that runs" describes the marks and the rewriting).

// shellLangs are the info strings of fenced blocks that are shell.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true, "zsh": true, "shell-session": true}

// docMark is a mark in an HTML comment on the last non-blank line before
// a fence: <!-- not-run: REASON -->, <!-- start: COMMAND -->, <!-- start -->,
// <!-- file: NAME -->, <!-- output -->.
var docMark = regexp.MustCompile(`^<!--\s*([a-z-]+)(?::\s*(.*?))?\s*-->$`)

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	file string // relative to the repository root
	line int    // of the opening fence, 1-based
	lang string
	body string
	mark string // "", not-run, start, file, output
	arg  string // the mark's text after the colon
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

func (b docBlock) shell() bool { return shellLangs[b.lang] }

// runs reports whether the doc run executes b as a command block.
func (b docBlock) runs() bool { return b.shell() && b.mark == "" }

// docFiles is every Markdown file of the repository outside node_modules
// and testdata, relative to the root.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || d.Name() == "bin" || d.Name() == "data" || strings.HasPrefix(d.Name(), ".") && path != "..") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel("..", path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

// parseDoc splits a Markdown file into its fenced blocks with their marks.
func parseDoc(file, text string) ([]docBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []docBlock
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(trimmed, "```") && !strings.HasPrefix(trimmed, "~~~") {
			continue
		}
		fence := trimmed[:3]
		n := len(trimmed) - len(strings.TrimLeft(trimmed, fence[:1]))
		b := docBlock{file: file, line: i + 1, lang: strings.TrimSpace(trimmed[n:])}
		if f := strings.Fields(b.lang); len(f) > 0 {
			b.lang = f[0]
		}
		for j := i - 1; j >= 0; j-- {
			prev := strings.TrimSpace(lines[j])
			if prev == "" {
				continue
			}
			if m := docMark.FindStringSubmatch(prev); m != nil {
				switch m[1] {
				case "not-run", "start", "file", "output":
					b.mark, b.arg = m[1], m[2]
				default:
					return nil, fmt.Errorf("%s:%d: unknown mark %q (not-run, start, file, output)", file, j+1, m[1])
				}
			}
			break
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			t := strings.TrimSpace(lines[i])
			if strings.HasPrefix(t, strings.Repeat(fence[:1], n)) && strings.Trim(t, fence[:1]) == "" {
				closed = true
				break
			}
			l := lines[i]
			if len(l)-len(strings.TrimLeft(l, " ")) >= indent {
				l = l[indent:]
			}
			body = append(body, l)
		}
		if !closed {
			return nil, fmt.Errorf("%s: fence never closed", b)
		}
		b.body = strings.Join(body, "\n") + "\n"
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// looksLikeShell reports whether a block fenced without a shell language
// starts with a command line someone would paste.
func looksLikeShell(body string) bool {
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		for _, p := range []string{"$ ", "bin/tributary ", "tributary ", "mosquitto_", "kcat ", "curl ", "make ", "openssl ", "go ", "echo ", "printf "} {
			if strings.HasPrefix(l, p) {
				return true
			}
		}
		return false
	}
	return false
}

// bashisms are constructs dash (Debian's sh) does not have.
var bashisms = regexp.MustCompile(`<\(|\[\[|\$'|\bfunction\s|\bsource\s|&>`)

// checkMarks is the honesty check: every shell block runs or says why not,
// marks sit on blocks they fit, and commands are fenced as shell.
func checkMarks(blocks []docBlock) []string {
	var errs []string
	for i, b := range blocks {
		switch {
		case b.mark == "not-run" && b.arg == "":
			errs = append(errs, fmt.Sprintf("%s: not-run needs its reason (<!-- not-run: REASON -->)", b))
		case (b.mark == "not-run" || b.mark == "start") && !b.shell():
			errs = append(errs, fmt.Sprintf("%s: %s mark on a %q block (a shell block: sh or bash)", b, b.mark, b.lang))
		case b.mark == "file" && b.arg == "":
			errs = append(errs, fmt.Sprintf("%s: file mark without a file name", b))
		case b.mark == "output" && (i == 0 || !(blocks[i-1].runs() || blocks[i-1].mark == "start")):
			errs = append(errs, fmt.Sprintf("%s: output mark not right after a block that runs", b))
		case b.mark == "" && !b.shell() && (b.lang == "" || b.lang == "text") && looksLikeShell(b.body):
			errs = append(errs, fmt.Sprintf("%s: commands in a block fenced %q: fence it sh (or bash), and run it or mark it <!-- not-run: REASON -->", b, b.lang))
		case b.lang == "sh" && b.mark != "not-run" && bashisms.MatchString(b.body):
			errs = append(errs, fmt.Sprintf("%s: needs bash (%s): fence it bash", b, bashisms.FindString(b.body)))
		}
	}
	return errs
}

// TestDocsMarked fails when a fenced shell block has neither a runner nor
// a not-run mark: every block of every Markdown file runs (TestDocs)
// unless its mark says why it cannot here.
func TestDocsMarked(t *testing.T) {
	total := map[string][2]int{}
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseDoc(f, string(raw))
		if err != nil {
			t.Error(err)
			continue
		}
		for _, e := range checkMarks(blocks) {
			t.Error(e)
		}
		for _, b := range blocks {
			c := total[f]
			switch {
			case b.runs() || b.mark == "start":
				c[0]++
			case b.mark == "not-run":
				c[1]++
			}
			total[f] = c
		}
	}
	for _, f := range slices.Sorted(maps.Keys(total)) {
		if c := total[f]; c != [2]int{} {
			t.Logf("%s: %d shell blocks run, %d not run", f, c[0], c[1])
		}
	}
}

// The documented default ports of `tributary dev` and `tributary cloud`,
// each moved to a free port of the doc run.
var docPorts = []struct {
	port      int
	dev, clod string // the flag that sets it ("" when that command has none by default)
}{
	{1883, "--mqtt-addr", ""},
	{1884, "--mqtt-ws-addr", ""},
	{8080, "--http-addr", ""},
	{9092, "--kafka-addr", ""},
	{8181, "--catalog-addr", "--catalog-addr"},
	{19092, "--cloud-kafka-addr", "--kafka-addr"},
	{6650, "--pulsar-addr", "--pulsar-addr"},
	{11883, "--cloud-mqtt-addr", ""},
	{18080, "--cloud-http-addr", ""},
}

var (
	hostPort = regexp.MustCompile(`\b(127\.0\.0\.1|localhost|0\.0\.0\.0):(\d{2,5})\b`)
	portFlag = regexp.MustCompile(`(^|\s)(-p|--port)(\s+)(\d{2,5})\b`)
)

// docRun is the run of one Markdown file: its directory, the ports of its
// node, the environment its blocks leave to the next, its nodes.
type docRun struct {
	t     *testing.T
	dir   string
	ports map[int]int // documented → this run's
	env   []string
	nodes []*docNode
	last  *bytes.Buffer // output of the last block that ran
}

// rewrite moves the documented default ports to the run's.
func (r *docRun) rewrite(s string) string {
	s = hostPort.ReplaceAllStringFunc(s, func(m string) string {
		sm := hostPort.FindStringSubmatch(m)
		p, _ := strconv.Atoi(sm[2])
		if q, ok := r.ports[p]; ok {
			return sm[1] + ":" + strconv.Itoa(q)
		}
		return m
	})
	return portFlag.ReplaceAllStringFunc(s, func(m string) string {
		sm := portFlag.FindStringSubmatch(m)
		p, _ := strconv.Atoi(sm[4])
		if q, ok := r.ports[p]; ok {
			return sm[1] + sm[2] + sm[3] + strconv.Itoa(q)
		}
		return m
	})
}

// freePort is a port nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newDocRun(t *testing.T) *docRun {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binPath, filepath.Join(dir, "bin", "tributary")); err != nil {
		t.Fatal(err)
	}
	r := &docRun{t: t, dir: dir, ports: map[int]int{}}
	for _, p := range docPorts {
		r.ports[p.port] = freePort(t)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"))
	t.Cleanup(r.stopNodes)
	return r
}

// docNode is a server a start block (or the implicit `make run`) started.
type docNode struct {
	cmd    *exec.Cmd
	out    *testkit.SyncBuffer
	exited chan struct{}
}

// start runs command (one line: `bin/tributary dev|cloud|edge …`) in the
// background with --ready-file and every documented default port moved
// to the run's, and waits until it is ready.
func (r *docRun) start(where, command string) *docNode {
	t := r.t
	t.Helper()
	f := strings.Fields(r.rewrite(command))
	sub := slices.IndexFunc(f, func(s string) bool { return s == "dev" || s == "cloud" || s == "edge" })
	if sub < 1 || !strings.HasSuffix(f[sub-1], "tributary") {
		t.Fatalf("%s: a start block is one `bin/tributary dev|cloud|edge …` command, not %q", where, command)
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	flags := []string{"--ready-file", ready}
	for _, p := range docPorts {
		flag := p.dev
		if f[sub] == "cloud" {
			flag = p.clod
		}
		if f[sub] != "edge" && flag != "" {
			flags = append(flags, flag, "127.0.0.1:"+strconv.Itoa(r.ports[p.port]))
		}
	}
	argv := append(append(slices.Clone(f[:sub+1]), flags...), f[sub+1:]...)
	// bash expands what the command line has ("$PW") with the run's environment
	cmd := exec.Command("bash", "-c", "exec "+strings.Join(argv, " "))
	cmd.Dir, cmd.Env = r.dir, r.env
	n := &docNode{cmd: cmd, out: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = n.out, n.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(n.exited) }()
	r.nodes = append(r.nodes, n)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if raw, err := os.ReadFile(ready); err == nil && json.Valid(raw) {
			if f[sub] == "dev" && !strings.Contains(command, "--sim-devices 0") {
				// as a person reads the banner: the simulated devices' first
				// rows are in factory.telemetry before the next command
				data := "./data"
				if i := slices.Index(f, "--data"); i >= 0 && i+1 < len(f) {
					data = f[i+1]
				}
				waitFor(t, 60*time.Second, where+": the simulator's first commit", func() bool {
					out, _ := exec.Command(binPath, "tables", "list", "--data", filepath.Join(r.dir, data)).Output()
					for l := range strings.Lines(string(out)) {
						if f := strings.Fields(l); len(f) > 1 && f[0] == "factory.telemetry" && f[1] != "0" {
							return true
						}
					}
					return false
				})
			}
			return n
		}
		select {
		case <-n.exited:
			t.Fatalf("%s: %q exited before it was ready:\n%s", where, strings.Join(argv, " "), n.out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q not ready after 90 s:\n%s", where, strings.Join(argv, " "), n.out)
		}
	}
}

func (r *docRun) stopNodes() {
	for _, n := range slices.Backward(r.nodes) {
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(30 * time.Second):
			syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
			<-n.exited
		}
	}
	r.nodes = nil
}

// blockTimeout bounds one block (a command that waits forever fails).
const blockTimeout = 60 * time.Second

// run runs a shell block in the run's directory: sh blocks with sh (dash
// on Debian: no bashisms), bash blocks with bash, with -e; variables a
// block sets are there for the next blocks.
func (r *docRun) run(b docBlock) {
	t := r.t
	t.Helper()
	body := b.body
	var expect []string
	if b.lang == "console" { // $ commands, the other lines their output
		var cmds []string
		for _, l := range strings.Split(body, "\n") {
			if c, ok := strings.CutPrefix(l, "$ "); ok {
				cmds = append(cmds, c)
			} else if strings.TrimSpace(l) != "" {
				expect = append(expect, l)
			}
		}
		body = strings.Join(cmds, "\n") + "\n"
	}
	for _, l := range strings.Split(body, "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(l), "# => "); ok {
			expect = append(expect, e)
		}
	}
	shell := "bash"
	if b.lang == "sh" {
		shell = "sh"
	}
	state := filepath.Join(t.TempDir(), "env")
	// as pasted into a shell: a pipeline's status is its last command's
	script := "set -a\ntrap 'env -0 > \"$DOCS_STATE\"' EXIT\n" + r.rewrite(body)
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, shell, "-e", "-c", script)
	cmd.Dir, cmd.Env = r.dir, append(slices.Clone(r.env), "DOCS_STATE="+state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	r.last = &out
	if ctx.Err() != nil {
		t.Fatalf("%s: still running after %s (a documented command must end):\n%s\n--- output:\n%s", b, blockTimeout, body, out.String())
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		t.Fatalf("%s: %s exited %d:\n%s\n--- output:\n%s", b, shell, ee.ExitCode(), body, out.String())
	}
	t.Logf("%s: ran in %s", b, time.Since(began).Round(time.Millisecond))
	if raw, err := os.ReadFile(state); err == nil {
		r.env = r.env[:0:0]
		for kv := range strings.SplitSeq(string(raw), "\x00") {
			k, _, ok := strings.Cut(kv, "=")
			if ok && k != "PWD" && k != "OLDPWD" && k != "SHLVL" && k != "_" && k != "DOCS_STATE" {
				r.env = append(r.env, kv)
			}
		}
	}
	if msg := matchShape(expect, out.String()); msg != "" {
		t.Fatalf("%s: %s\n--- output:\n%s", b, msg, out.String())
	}
}

// shapePattern turns an expected line into a pattern: any digits match
// any digits, ... (or …) matches anything, runs of blanks any blanks.
func shapePattern(line string) *regexp.Regexp {
	var p strings.Builder
	p.WriteString(`^\s*`)
	s := strings.TrimSpace(line)
	for len(s) > 0 {
		switch {
		case strings.HasPrefix(s, "..."):
			p.WriteString(`.*`)
			s = s[3:]
		case strings.HasPrefix(s, "…"):
			p.WriteString(`.*`)
			s = s[len("…"):]
		case s[0] >= '0' && s[0] <= '9':
			p.WriteString(`[0-9]+`)
			s = strings.TrimLeft(s, "0123456789")
		case s[0] == ' ' || s[0] == '\t':
			p.WriteString(`\s+`)
			s = strings.TrimLeft(s, " \t")
		default:
			_, size := utf8.DecodeRuneInString(s)
			p.WriteString(regexp.QuoteMeta(s[:size]))
			s = s[size:]
		}
	}
	p.WriteString(`\s*$`)
	return regexp.MustCompile(p.String())
}

// matchShape checks that the expected lines occur in out in order, each
// as a whole line by shape; "" when they do.
func matchShape(expect []string, out string) string {
	lines := strings.Split(out, "\n")
	i := 0
	for _, e := range expect {
		re := shapePattern(e)
		for i < len(lines) && !re.MatchString(lines[i]) {
			i++
		}
		if i == len(lines) {
			return fmt.Sprintf("expected a line shaped like %q (in this order)", e)
		}
		i++
	}
	return ""
}

// TestDocs runs every Markdown file's shell blocks in order, one
// directory and one set of free ports per file (docs/testing.md
// "Documentation that runs").
func TestDocs(t *testing.T) {
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseDoc(f, string(raw))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(blocks, func(b docBlock) bool { return b.runs() || b.mark == "start" }) {
			continue
		}
		// no / in the name, so that -run 'TestDocs/security' picks a file
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			r := newDocRun(t)
			if !slices.ContainsFunc(blocks, func(b docBlock) bool { return b.mark == "start" }) {
				r.start(f+" (no start block: make run's node)", "bin/tributary dev --data ./data")
			}
			for i, b := range blocks {
				switch {
				case b.mark == "start":
					command := b.arg
					if command == "" {
						command = strings.TrimSpace(stripComments(b.body))
					}
					n := r.start(b.String(), command)
					r.last = nil
					if i+1 < len(blocks) && blocks[i+1].mark == "output" {
						want := strings.Split(strings.TrimRight(blocks[i+1].body, "\n"), "\n")
						waitFor(t, 10*time.Second, "the start's output", func() bool { return matchShape(want, n.out.String()) == "" })
					}
				case b.mark == "file":
					path := filepath.Join(r.dir, b.arg)
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(r.rewrite(b.body)), 0o600); err != nil {
						t.Fatal(err)
					}
				case b.mark == "output" && r.last != nil:
					want := strings.Split(strings.TrimRight(b.body, "\n"), "\n")
					if msg := matchShape(want, r.last.String()); msg != "" {
						t.Fatalf("%s: %s\n--- output of the block before:\n%s", b, msg, r.last)
					}
				case b.runs():
					r.run(b)
				}
			}
			r.stopNodes()
			t.Logf("%s: %s", f, time.Since(began).Round(time.Millisecond))
		})
	}
}

// stripComments drops comment lines and trailing # comments of a
// one-command block (a start block's command).
func stripComments(body string) string {
	var keep []string
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, " ")
}

// TestDocShape checks the doc run's own parts: marks, the shape match
// and the port rewriting.
func TestDocShape(t *testing.T) {
	blocks, err := parseDoc("x.md", "a\n<!-- not-run: needs Spark -->\n```sh\nspark-sql\n```\n\n```bash\necho hi # => hi\n```\n<!-- output -->\n```\nhi\n```\n```\ncurl -s x\n```\n```sh\ncat <(ls)\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 5 || blocks[0].mark != "not-run" || blocks[0].arg != "needs Spark" || blocks[1].lang != "bash" || blocks[2].mark != "output" {
		t.Fatalf("parsed %+v", blocks)
	}
	errs := checkMarks(blocks)
	if len(errs) != 2 || !strings.Contains(errs[0], "fence it sh") || !strings.Contains(errs[1], "needs bash") {
		t.Fatalf("checkMarks: %q", errs)
	}
	if msg := matchShape([]string{"MQTT 127.0.0.1:1883 (TCP)", `{"offset":0,...}`}, "  MQTT   127.0.0.1:40123 (TCP)\nx\n{\"offset\":17,\"b\":1}\n"); msg != "" {
		t.Fatal(msg)
	}
	if msg := matchShape([]string{"b", "a"}, "a\nb\n"); msg == "" {
		t.Fatal("out of order matched")
	}
	r := &docRun{ports: map[int]int{1883: 40001, 8080: 40002}}
	if got := r.rewrite("mosquitto_pub -h 127.0.0.1 -p 1883 x; curl http://localhost:8080/ -p 99 127.0.0.1:1884"); got != "mosquitto_pub -h 127.0.0.1 -p 40001 x; curl http://localhost:40002/ -p 99 127.0.0.1:1884" {
		t.Fatal(got)
	}
}
