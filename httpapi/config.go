package httpapi

import (
	"time"

	"github.com/tributary-io/tributary/config"
)

// Config is this package's YAML section: the caps of the edge's produce
// endpoints (edge key http_api) and of the cloud's read endpoints (cloud
// key http).
type Config struct {
	// MaxRecordBytes caps one produced record's JSON (413 beyond); a body
	// sent with a Content-Length (not streamed) may be 4 times it.
	// Default 1MiB.
	MaxRecordBytes config.ByteSize `yaml:"max_record_bytes"`
	// MaxStreams caps the concurrent produce requests (edge), or long
	// polls and event streams (cloud); 429 with Retry-After beyond.
	// Default 1024.
	MaxStreams int `yaml:"max_streams"`
	// IdleTimeout ends a produce stream that sends nothing for so long.
	// Default 30s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout ends a response (delivery reports, events) whose
	// write blocks for so long: the client does not read. Default 30s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// Defaults fills every unset field with its default.
func (h *Config) Defaults() {
	if h.MaxRecordBytes == 0 {
		h.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if h.MaxStreams == 0 {
		h.MaxStreams = DefaultMaxStreams
	}
	if h.IdleTimeout == 0 {
		h.IdleTimeout = DefaultIdleTimeout
	}
	if h.WriteTimeout == 0 {
		h.WriteTimeout = DefaultWriteTimeout
	}
}

// Validate reports each bad field, under prefix (http_api or http),
// through bad.
func (h Config) Validate(prefix string, bad func(field, format string, args ...any)) {
	if h.MaxRecordBytes < 1<<10 || h.MaxRecordBytes > 64<<20 {
		bad(prefix+".max_record_bytes", "%d: want 1KiB to 64MiB", h.MaxRecordBytes)
	}
	if h.MaxStreams < 1 {
		bad(prefix+".max_streams", "%d: want at least 1", h.MaxStreams)
	}
	if h.IdleTimeout < time.Second {
		bad(prefix+".idle_timeout", "%s: want at least 1s", h.IdleTimeout)
	}
	if h.WriteTimeout < time.Second {
		bad(prefix+".write_timeout", "%s: want at least 1s", h.WriteTimeout)
	}
}

// Limits are the httpapi caps of h.
func (h Config) Limits() Limits {
	return Limits{MaxRecordBytes: int64(h.MaxRecordBytes), MaxStreams: h.MaxStreams,
		IdleTimeout: h.IdleTimeout, WriteTimeout: h.WriteTimeout}
}
