package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// docs/configuration.md is what `make docs` generates from the code: a
// change of a Config struct's field, comment or default must come with
// the regenerated file.
func TestConfigReferenceCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := configReference(&b, "../.."); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, b.Bytes()) {
		t.Fatalf("docs/configuration.md is not what the code generates: run `make docs` and commit it\n%s", firstDiff(string(have), b.String()))
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n  file: " + x + "\n  code: " + y
		}
	}
	return ""
}

// That each documented default is what the code applies is checked where
// the defaults live: node's and cloud's TestDocumentedDefaults.
