package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
)

const (
	s3Access = "tributary-test"
	s3Secret = "tributary-test-secret"
	s3Bucket = "lake"
)

// startVersity runs a real S3 server, versitygw (`make test` installs it
// with go install), on a loopback port with a POSIX backend in a temp dir,
// and creates the bucket. It returns the endpoint URL.
func startVersity(t *testing.T) string { return startVersityGW(t).url }

// versitygw is a running S3 server that a test may stop and start again
// (same port, same objects): the object store failing.
type versitygw struct {
	t              *testing.T
	bin, root, url string
	addr           string
	cmd            *exec.Cmd
}

func startVersityGW(t *testing.T) *versitygw {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, "go", "bin", "versitygw")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("versitygw not installed (`make test` runs go install github.com/versity/versitygw/cmd/versitygw): %v", err)
		}
	}
	v := &versitygw{t: t, bin: bin, root: t.TempDir(), addr: freeLoopbackPort(t)}
	v.url = "http://" + v.addr
	if err := os.Mkdir(filepath.Join(v.root, s3Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.stop)
	v.start()
	return v
}

// start runs the server and waits until it listens.
func (v *versitygw) start() {
	v.t.Helper()
	cmd := exec.Command(v.bin, "--access", s3Access, "--secret", s3Secret, "--port", v.addr, "posix", v.root)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		v.t.Fatal(err)
	}
	v.cmd = cmd
	waitFor(v.t, 20*time.Second, "versitygw listening", func() bool {
		c, err := net.Dial("tcp", v.addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// stop kills the server (SIGKILL); requests fail until start.
func (v *versitygw) stop() {
	if v.cmd != nil {
		v.cmd.Process.Kill()
		v.cmd.Wait()
		v.cmd = nil
	}
}

// s3EdgeConfig writes an edge config whose warehouse is on the S3 server.
func s3EdgeConfig(t *testing.T, dir, endpoint string) string {
	t.Helper()
	return edgeConfig(t, dir, "s3-edge", fmt.Sprintf(`catalog:
  uri: sqlite://%[1]s/catalog.db
  warehouse: s3://%[2]s/warehouse
storage:
  s3:
    endpoint: %[3]s
    region: us-east-1
    path_style: true
    access_key_id: %[4]s
    secret_access_key: %[5]s
`, dir, s3Bucket, endpoint, s3Access, s3Secret))
}

func s3Props(endpoint string) map[string]string {
	return map[string]string{"s3.endpoint": endpoint, "s3.region": "us-east-1", "s3.access-key-id": s3Access,
		"s3.secret-access-key": s3Secret, "s3.force-virtual-addressing": "false"}
}

// TestS3RoundTrip and TestS3Crash: the spine's round-trip and crash tests
// with the warehouse on a real S3 server, read back with iceberg-go's S3
// FileIO.
func TestS3RoundTrip(t *testing.T) {
	endpoint := startVersity(t)
	dir := t.TempDir()
	cfg := s3EdgeConfig(t, dir, endpoint)
	roundTrip(t, func() *proc { return startEdge(t, dir, cfg) },
		func() []*tributary.Record { return readTableProps(t, dir, "factory.telemetry", s3Props(endpoint)) })
}

func TestS3Crash(t *testing.T) {
	endpoint := startVersity(t)
	dir := t.TempDir()
	cfg := s3EdgeConfig(t, dir, endpoint)
	crashRounds(t, 3, func() *proc { return startEdge(t, dir, cfg) },
		func() []*tributary.Record { return readTableProps(t, dir, "factory.telemetry", s3Props(endpoint)) })
}
