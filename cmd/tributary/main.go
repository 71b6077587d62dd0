// Command tributary is the one binary of Tributary: an edge node, the
// all-in-one development setup, the device simulator and table tools.
//
//	tributary dev     all-in-one on embedded defaults (edge + simulator)
//	tributary edge    an edge node from a config file
//	tributary cloud   the cloud server (Iceberg REST catalog)
//	tributary tables  list, describe, scan and maintain stream tables
//	tributary sim     the device-fleet simulator
//	tributary config  check a config file
//	tributary certs   a CA and TLS certificates for one site
//	tributary version the build: version, and the warehouse stores linked in
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	firmwaresim "github.com/tributary-io/tributary/firmware-sim"
)

const usage = `usage: tributary <command> [flags]

commands:
  dev      run an edge node on embedded defaults with a simulated device fleet
  edge     run an edge node from a YAML config file (-config FILE)
  cloud    run the cloud server: Iceberg REST catalog on --catalog-addr
  tables   list | describe STREAM | scan STREAM | maintain STREAM: stream tables
  sim      run the device-fleet simulator against an MQTT broker
  config   check FILE: validate a config file and print the effective settings
  quarantine list|replay: records of fenced or taken-over partitions, kept instead of dropped
  passwd   [-D] FILE USER: create, update or delete a user in a password file
  certs    ca | node NAME [HOST|IP ...] | client NAME: a CA and certificates for TLS
  version  the build: version, and the warehouse stores linked in (file, s3, gcs, azure)

Run 'tributary <command> -h' for the flags of a command.
`

func main() {
	privateFiles()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "dev":
		return cmdDev(args[1:], stdout, stderr)
	case "edge":
		return cmdEdge(args[1:], stdout, stderr)
	case "cloud":
		return cmdCloud(args[1:], stdout, stderr)
	case "tables":
		return cmdTables(args[1:], stdout, stderr)
	case "sim":
		return firmwaresim.Main(args[1:], stdout, stderr)
	case "config":
		return cmdConfig(args[1:], stdout, stderr)
	case "quarantine":
		return cmdQuarantine(args[1:], stdout, stderr)
	case "passwd":
		return cmdPasswd(args[1:], os.Stdin, stdout, stderr)
	case "certs":
		return cmdCerts(args[1:], stdout, stderr)
	case "version", "--version":
		return cmdVersion(stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "tributary: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// newLogger makes the process logger: text for a terminal, or JSON.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
}
