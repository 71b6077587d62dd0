package config

import (
	"bytes"
	"fmt"
	"os"
)

// Secret is a secret setting written inline (key) or in a file (key_file,
// its contents with trailing newlines trimmed); nil when neither is set.
// field is the inline key's YAML path, e.g. cluster.secret; errors name
// the key at fault.
func Secret(field, inline, file string) ([]byte, error) {
	switch {
	case inline != "" && file != "":
		return nil, fmt.Errorf("%s: set %s or %s_file, not both", field, field, field)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s_file: %w", field, err)
		}
		if b = bytes.TrimRight(b, "\r\n"); len(b) == 0 {
			return nil, fmt.Errorf("%s_file: %s is empty", field, file)
		}
		return b, nil
	case inline != "":
		return []byte(inline), nil
	}
	return nil, nil
}
