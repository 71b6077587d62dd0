package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/httpapi/wire"
	"github.com/tributary-io/tributary/offsets"
)

// Caps of a group offsets commit.
const (
	maxCommitOffsets   = 1000
	maxCommitBodyBytes = 1 << 20
	maxOffsetMetadata  = 4096
	maxGroupNameLen    = 255
)

// serveGroupOffsets answers GET /v1/groups/{group}/offsets[?stream=]:
// the group's committed offsets of the streams the principal may consume
// (those committed by Kafka consumers too: they are one table).
func (rd *Reader) serveGroupOffsets(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if err := checkGroup(group); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	stream := r.URL.Query().Get("stream")
	if stream != "" {
		if _, _, err := tributary.ParseStream(stream); err != nil {
			writeError(w, http.StatusBadRequest, "stream: "+err.Error(), "")
			return
		}
	}
	p, ok := authorize(w, r, rd.cfg.Auth, auth.Consume, stream, group)
	if !ok {
		return
	}
	stored, err := rd.offsets.Fetch(r.Context(), group)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "fetch offsets: "+err.Error(), "catalog")
		return
	}
	out := wire.GroupOffsets{Group: group, Offsets: []wire.GroupOffset{}}
	for _, o := range stored {
		if (stream != "" && o.Topic != stream) || !rd.cfg.Auth.Allowed(auth.Request{Client: auth.Client{Protocol: protocol, Remote: r.RemoteAddr},
			Principal: p, Action: auth.Consume, Stream: o.Topic, Group: group}) {
			continue
		}
		out.Offsets = append(out.Offsets, wire.GroupOffset{Stream: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata})
	}
	writeJSON(w, http.StatusOK, out)
}

// serveCommit stores POST /v1/groups/{group}/offsets {"offsets": [...]}
// in one transaction (all or none), where Kafka's OffsetCommit stores
// them. It does not take part in a Kafka group's generations: an HTTP
// commit to a group whose Kafka members also commit is last-writer-wins.
func (rd *Reader) serveCommit(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if err := checkGroup(group); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	if !jsonContent(r) {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: want application/json", r.Header.Get("Content-Type")), "")
		return
	}
	var req wire.GroupOffsets
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCommitBodyBytes))
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: at most %d bytes", maxCommitBodyBytes), "")
			return
		}
		writeError(w, http.StatusBadRequest, "body: "+err.Error(), "")
		return
	}
	if len(req.Offsets) == 0 || len(req.Offsets) > maxCommitOffsets {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("offsets: %d entries, want 1 to %d", len(req.Offsets), maxCommitOffsets), "")
		return
	}
	offs := make([]offsets.Offset, 0, len(req.Offsets))
	checked := map[string]bool{}
	for i, o := range req.Offsets {
		field := fmt.Sprintf("offsets[%d]", i)
		if _, _, err := tributary.ParseStream(o.Stream); err != nil {
			writeError(w, http.StatusBadRequest, field+".stream: "+err.Error(), "")
			return
		}
		if o.Partition < 0 || o.Offset < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: partition %d, offset %d: both must be >= 0", field, o.Partition, o.Offset), "")
			return
		}
		if len(o.Metadata) > maxOffsetMetadata {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s.metadata: at most %d bytes", field, maxOffsetMetadata), "")
			return
		}
		if !checked[o.Stream] {
			if _, ok := authorize(w, r, rd.cfg.Auth, auth.Consume, o.Stream, group); !ok {
				return
			}
			checked[o.Stream] = true
		}
		offs = append(offs, offsets.Offset{Topic: o.Stream, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata})
	}
	if _, err := rd.offsets.Commit(r.Context(), group, offs, rd.cfg.MaxGroupOffsets); err != nil {
		if errors.Is(err, offsets.ErrTooMany) {
			writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf("group %s would hold more than %d offsets (kafka.max_group_offsets)", group, rd.cfg.MaxGroupOffsets), "max_group_offsets")
			return
		}
		writeError(w, http.StatusServiceUnavailable, "commit offsets: "+err.Error(), "catalog")
		return
	}
	writeJSON(w, http.StatusOK, wire.GroupOffsets{Group: group, Offsets: req.Offsets})
}

func checkGroup(g string) error {
	if g == "" || len(g) > maxGroupNameLen {
		return fmt.Errorf("group: %d bytes, want 1 to %d", len(g), maxGroupNameLen)
	}
	return nil
}
