package e2e

import (
	"bytes"
	"context"
	"html"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromiumPath finds Debian's chromium; `make deps` installs it, so a
// missing browser fails the test instead of skipping it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run `make deps` (Debian package chromium)")
	return ""
}

// runChromium runs headless Chromium on url with extra flags and its own
// throw-away profile, and returns its stdout.
func runChromium(t *testing.T, url string, extra ...string) []byte {
	t.Helper()
	profile, err := os.MkdirTemp("", "tributary-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	args := append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-quic", "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio",
		"--user-data-dir=" + profile, "--virtual-time-budget=3000"}, extra...)
	args = append(args, url)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath(t), args...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\nstderr:\n%s", strings.Join(extra, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

var (
	telemetryRowRE = regexp.MustCompile(`(?s)<tr[^>]*\bdata-stream="factory\.telemetry"[^>]*>(.*?)</tr>`)
	cellRE         = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
)

// nextOffsetCell parses the "next offset" cell (third column) of the
// factory.telemetry row of the status page's rendered DOM.
func nextOffsetCell(t *testing.T, dom []byte) int64 {
	t.Helper()
	row := telemetryRowRE.FindSubmatch(dom)
	if row == nil {
		t.Fatalf("no <tr data-stream=\"factory.telemetry\"> in the rendered status page:\n%s", dom)
	}
	cells := cellRE.FindAllSubmatch(row[1], -1)
	if len(cells) < 3 {
		t.Fatalf("factory.telemetry row has %d cells, want ≥ 3: %s", len(cells), row[0])
	}
	v, err := strconv.ParseInt(strings.TrimSpace(html.UnescapeString(string(cells[2][1]))), 10, 64)
	if err != nil {
		t.Fatalf("next offset cell %q: %v", cells[2][1], err)
	}
	return v
}

// TestStatusPageLive loads the status page in headless Chromium twice while
// the simulator publishes and checks that the rendered (JavaScript-built)
// factory.telemetry row's next offset grows; it also takes a screenshot.
func TestStatusPageLive(t *testing.T) {
	p := startDev(t, t.TempDir(), "--sim-devices", "4", "--sim-rate", "20")
	url := "http://" + p.HTTP + "/"
	waitFor(t, 30*time.Second, "simulator traffic in /status", func() bool {
		return status(t, p).Uplink.Commits > 0
	})

	dom1 := runChromium(t, url, "--dump-dom")
	first := nextOffsetCell(t, dom1)
	for _, want := range []string{"MQTT clients", "last table commit", `id="uplink" class="ok"`} {
		if !bytes.Contains(dom1, []byte(want)) {
			t.Errorf("rendered status page lacks %q", want)
		}
	}
	time.Sleep(2 * time.Second)
	dom2 := runChromium(t, url, "--dump-dom")
	second := nextOffsetCell(t, dom2)
	t.Logf("factory.telemetry next offset on the page: %d, then %d", first, second)
	if second <= first {
		t.Fatalf("next offset did not increase between two page loads: %d then %d", first, second)
	}

	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, url, "--window-size=1280,900", "--hide-scrollbars", "--screenshot="+shot)
	raw, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 800 || b.Dy() < 600 {
		t.Fatalf("screenshot is %dx%d, want ≥ 800x600", b.Dx(), b.Dy())
	}
	// Non-trivial: the page's text makes many pixels differ from the
	// background (a blank or error page would be almost uniform).
	bg := img.At(b.Min.X, b.Min.Y)
	br, bgc, bb, _ := bg.RGBA()
	differ := 0
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r != br || g != bgc || bl != bb {
				differ++
			}
		}
	}
	if differ < 500 {
		t.Fatalf("screenshot looks blank: %d sampled pixels differ from the background", differ)
	}
	t.Logf("screenshot %s: %dx%d, %d bytes, %d sampled non-background pixels", shot, b.Dx(), b.Dy(), len(raw), differ)
}
