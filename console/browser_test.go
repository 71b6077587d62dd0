package console

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPageWithCredentialsInURL: the page opened as
// http://user:password@host/ loads its model (it stayed a blank
// "connection lost" page: fetch refuses relative URLs resolved with
// credentials in them). Headless Chromium (Debian package chromium,
// installed by `make deps`) renders it.
func TestPageWithCredentialsInURL(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not found: run `make deps` (Debian package chromium)")
	}
	h := &fakeHost{s: Snapshot{Node: "n1", Role: "edge", Streams: []Stream{{Name: "a.b"}}}}
	c, _ := newTest(h)
	c.Sample()
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	url := strings.Replace(srv.URL, "http://", "http://ops:secret@", 1) + "/"
	profile := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-extensions", "--user-data-dir="+profile, "--virtual-time-budget=3000", "--dump-dom", url)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(out.String(), `data-loaded="true"`) || strings.Contains(out.String(), "connection lost") {
		t.Fatalf("the page did not load its model:\n%s", out.String())
	}
}
