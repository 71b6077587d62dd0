package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// writeReadyFile writes addrs (listener name -> bound host:port, "" for a
// listener that is off) as one JSON object to path, atomically: a reader
// that sees the file sees all of it. It is written once every listener is
// bound, next to the "ready" log line, for scripts and tests that start
// the binary on port 0 (--ready-file).
func writeReadyFile(path string, addrs map[string]string) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(addrs, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("ready file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}
