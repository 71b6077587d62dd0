package delta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Actions of the Delta transaction log (PROTOCOL.md "Actions"). A commit
// file holds one JSON object per line, each with exactly one action.

// Protocol is the protocol action: the versions a reader and a writer
// must implement, and, from reader version 3 / writer version 7, the
// named table features.
type Protocol struct {
	MinReaderVersion int      `json:"minReaderVersion"`
	MinWriterVersion int      `json:"minWriterVersion"`
	ReaderFeatures   []string `json:"readerFeatures,omitempty"`
	WriterFeatures   []string `json:"writerFeatures,omitempty"`
}

// Format is the metaData action's file format.
type Format struct {
	Provider string            `json:"provider"`
	Options  map[string]string `json:"options"`
}

// Metadata is the metaData action: the table's id, schema, partition
// columns and configuration. The latest one in the log wins.
type Metadata struct {
	ID               string            `json:"id"`
	Name             string            `json:"name,omitempty"`
	Description      string            `json:"description,omitempty"`
	Format           Format            `json:"format"`
	SchemaString     string            `json:"schemaString"`
	PartitionColumns []string          `json:"partitionColumns"`
	CreatedTime      *int64            `json:"createdTime,omitempty"`
	Configuration    map[string]string `json:"configuration"`
}

// Schema decodes the metadata's schemaString.
func (m *Metadata) Schema() (*StructType, error) {
	var st StructType
	if m.SchemaString == "" {
		// Databricks' pipelines create a table before its first schema.
		return &StructType{Type: "struct"}, nil
	}
	if err := json.Unmarshal([]byte(m.SchemaString), &st); err != nil {
		return nil, fmt.Errorf("%w: schemaString: %v", ErrCorrupt, err)
	}
	if st.Type != "struct" {
		return nil, fmt.Errorf("%w: schemaString is a %q, not a struct", ErrCorrupt, st.Type)
	}
	return &st, nil
}

// DeletionVector is a file's deletion vector descriptor (reader feature
// deletionVectors). This reader does not apply them: a table that has the
// feature is refused by its protocol check.
type DeletionVector struct {
	StorageType    string `json:"storageType"`
	PathOrInlineDv string `json:"pathOrInlineDv"`
	Offset         *int32 `json:"offset,omitempty"`
	SizeInBytes    int32  `json:"sizeInBytes"`
	Cardinality    int64  `json:"cardinality"`
}

// Add is the add action: a data file that is part of the table from this
// version on. Path is relative to the table root (URL-encoded) or an
// absolute URI.
type Add struct {
	Path             string             `json:"path"`
	PartitionValues  map[string]*string `json:"partitionValues"`
	Size             int64              `json:"size"`
	ModificationTime int64              `json:"modificationTime"`
	DataChange       bool               `json:"dataChange"`
	Stats            string             `json:"stats,omitempty"`
	Tags             map[string]string  `json:"tags,omitempty"`
	DeletionVector   *DeletionVector    `json:"deletionVector,omitempty"`
}

// Remove is the remove action: a file that is no longer part of the table
// (a tombstone, kept for vacuum's retention).
type Remove struct {
	Path                 string             `json:"path"`
	DeletionTimestamp    *int64             `json:"deletionTimestamp,omitempty"`
	DataChange           bool               `json:"dataChange"`
	ExtendedFileMetadata bool               `json:"extendedFileMetadata,omitempty"`
	PartitionValues      map[string]*string `json:"partitionValues,omitempty"`
	Size                 *int64             `json:"size,omitempty"`
	Stats                string             `json:"stats,omitempty"`
	Tags                 map[string]string  `json:"tags,omitempty"`
	DeletionVector       *DeletionVector    `json:"deletionVector,omitempty"`
}

// Txn is the transaction identifier action: the version an application
// (appId) has committed up to, Delta's idempotent-writer mark. Tributary
// writes one per partition: appId "<stream>/<partition>", version the
// partition's next offset (the Iceberg high-water mark).
type Txn struct {
	AppID       string `json:"appId"`
	Version     int64  `json:"version"`
	LastUpdated *int64 `json:"lastUpdated,omitempty"`
}

// Action is one line of a commit: exactly one field is set. CommitInfo is
// free-form; actions this package does not interpret but may skip (cdc,
// domainMetadata, checkpointMetadata) are kept only as their name in
// Other.
type Action struct {
	Protocol   *Protocol       `json:"protocol,omitempty"`
	MetaData   *Metadata       `json:"metaData,omitempty"`
	Add        *Add            `json:"add,omitempty"`
	Remove     *Remove         `json:"remove,omitempty"`
	Txn        *Txn            `json:"txn,omitempty"`
	CommitInfo json.RawMessage `json:"commitInfo,omitempty"`
	Other      string          `json:"-"`
}

// Errors of the log.
var (
	// ErrCorrupt: a log entry, checkpoint or _last_checkpoint that does
	// not parse or breaks the protocol's rules.
	ErrCorrupt = errors.New("delta: corrupt log")
	// ErrUnsupported: the table needs a protocol version or feature this
	// package does not implement.
	ErrUnsupported = errors.New("delta: unsupported protocol")
	// ErrConflict: the commit's version was written first by another
	// writer (put-if-absent refused it).
	ErrConflict = errors.New("delta: commit conflict")
	// ErrNotTable: there is no _delta_log at the location.
	ErrNotTable = errors.New("delta: not a Delta table")
)

// Caps on what a log may make this package hold: a commit file, a line of
// it, and the actions of one commit.
const (
	MaxCommitBytes   = 256 << 20
	MaxLineBytes     = 64 << 20
	MaxCommitActions = 4 << 20
	maxPathBytes     = 4096
)

// skippable are actions a reader of the current snapshot may skip:
// change data files, domain metadata and the v2 checkpoint's header.
var skippable = map[string]bool{"cdc": true, "domainMetadata": true, "checkpointMetadata": true}

// known are the actions this package decodes.
var known = map[string]bool{"protocol": true, "metaData": true, "add": true, "remove": true, "txn": true, "commitInfo": true}

// DecodeCommit parses a commit file: newline-delimited JSON, one action
// per non-empty line. Every line must be one object with exactly one
// action; an action this package neither knows nor may skip (sidecar, a
// future one) is ErrUnsupported, anything else malformed ErrCorrupt.
func DecodeCommit(data []byte) ([]Action, error) {
	if len(data) > MaxCommitBytes {
		return nil, fmt.Errorf("%w: commit of %d bytes is over the %d cap", ErrCorrupt, len(data), MaxCommitBytes)
	}
	var out []Action
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(line) > MaxLineBytes {
			return nil, fmt.Errorf("%w: line %d of %d bytes is over the %d cap", ErrCorrupt, n, len(line), MaxLineBytes)
		}
		if len(out) >= MaxCommitActions {
			return nil, fmt.Errorf("%w: more than %d actions in one commit", ErrCorrupt, MaxCommitActions)
		}
		a, err := DecodeAction(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// DecodeAction parses one action object.
func DecodeAction(line []byte) (Action, error) {
	var a Action
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return a, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if len(raw) != 1 {
		return a, fmt.Errorf("%w: an action line has %d members, not one", ErrCorrupt, len(raw))
	}
	for name, body := range raw {
		if skippable[name] {
			a.Other = name
			return a, nil
		}
		if !known[name] {
			return a, fmt.Errorf("%w: action %q", ErrUnsupported, name)
		}
		if string(body) == "null" {
			return a, fmt.Errorf("%w: action %q is null", ErrCorrupt, name)
		}
	}
	if err := json.Unmarshal(line, &a); err != nil {
		return a, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return a, a.check()
}

// check applies the per-action rules a reader depends on.
func (a *Action) check() error {
	switch {
	case a.Add != nil:
		if err := checkPath(a.Add.Path); err != nil {
			return err
		}
		if a.Add.Size < 0 {
			return fmt.Errorf("%w: add %s has size %d", ErrCorrupt, a.Add.Path, a.Add.Size)
		}
	case a.Remove != nil:
		return checkPath(a.Remove.Path)
	case a.Txn != nil:
		if a.Txn.AppID == "" {
			return fmt.Errorf("%w: txn without an appId", ErrCorrupt)
		}
	case a.MetaData != nil:
		st, err := a.MetaData.Schema()
		if err != nil {
			return err
		}
		return checkType(DataType{Struct: st}, 0)
	case a.Protocol != nil:
		if a.Protocol.MinReaderVersion < 1 || a.Protocol.MinWriterVersion < 1 {
			return fmt.Errorf("%w: protocol versions %d/%d", ErrCorrupt, a.Protocol.MinReaderVersion, a.Protocol.MinWriterVersion)
		}
	}
	return nil
}

func checkPath(p string) error {
	if p == "" || len(p) > maxPathBytes {
		return fmt.Errorf("%w: file path of %d bytes", ErrCorrupt, len(p))
	}
	return nil
}

// EncodeCommit renders actions as a commit file.
func EncodeCommit(acts []Action) ([]byte, error) {
	var b bytes.Buffer
	for _, a := range acts {
		line, err := json.Marshal(a)
		if err != nil {
			return nil, err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}
