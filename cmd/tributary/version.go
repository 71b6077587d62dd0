package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/tributary-io/tributary/tables"
)

// cmdVersion prints the build: module version, Go version, the warehouse
// stores linked in and the build tags that left the others out
// (docs/operations.md, "Smaller builds").
func cmdVersion(stdout io.Writer) int {
	version, goVersion, tags := "(devel)", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			version = v
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "-tags":
				tags = s.Value
			case "vcs.revision":
				version += " " + s.Value
			}
		}
	}
	fmt.Fprintf(stdout, "tributary %s\n", version)
	if goVersion != "" {
		fmt.Fprintf(stdout, "go: %s\n", goVersion)
	}
	fmt.Fprintf(stdout, "stores: %s\n", strings.Join(tables.LinkedStores(), ", "))
	if tags != "" {
		fmt.Fprintf(stdout, "tags: %s\n", tags)
	}
	return 0
}
