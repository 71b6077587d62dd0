package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tributary-io/tributary/cloud"
	"github.com/tributary-io/tributary/internal/confdoc"
	"github.com/tributary-io/tributary/node"
)

// configReference writes docs/configuration.md: every key of the edge and
// the cloud config, its type, the default the code applies to an empty
// file, and the doc comment of its field (package confdoc). root is the
// module's source directory.
func configReference(w io.Writer, root string) error {
	walker := &confdoc.Walker{Root: root}
	edge, err := walker.Keys(node.WithDefaults(node.Config{}))
	if err != nil {
		return err
	}
	cc := cloud.Config{Role: "cloud"}
	cc.ApplyDefaults()
	cl, err := walker.Keys(cc)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# Configuration reference\n\n" +
		"Generated from the Config structs by `make docs` (`tributary config reference`); a test fails when this file and the code disagree, so edit the doc comments in the code, not this file. " +
		"Defaults are what the code applies to an empty file: `./data` stands for the working directory's data folder (flag `--data`), `HOSTNAME` for the machine's host name. " +
		"Sizes take KiB/MiB/GiB (or KB/MB/GB), durations Go's form (`250ms`, `5s`, `1h`); `${VAR}` expands from the environment. See [operations.md](operations.md#configuration) for where each file goes.\n\n")
	b.WriteString(confdoc.Markdown("Edge node (`tributary edge -config FILE`)", "The edge's file; `tributary dev` uses the same keys for its edge side.", edge))
	b.WriteString("\n")
	b.WriteString(confdoc.Markdown("Cloud server (`tributary cloud -config FILE`, `role: cloud`)", "The cloud server's file.", cl))
	out := b.String()
	if wd, err := os.Getwd(); err == nil {
		out = strings.ReplaceAll(out, wd+string(os.PathSeparator), "./")
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		out = strings.ReplaceAll(out, "`"+h+"`", "`HOSTNAME`")
	}
	_, err = io.WriteString(w, out)
	return err
}

func cmdConfigReference(args []string, stdout, stderr io.Writer) int {
	root := "."
	if len(args) > 0 {
		root = args[0]
	}
	if err := configReference(stdout, root); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
