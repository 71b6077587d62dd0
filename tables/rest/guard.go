package rest

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/tables"
)

// What a client of the catalog may not do, whatever its token:
//
//   - Write a table property under ReservedPrefix ("tributary."): those are
//     the edge nodes' high-water marks, partition owners and epochs, and the
//     maintenance lease; a forged mark would make an uplink release records
//     that never reached the table, a forged owner would fence the node.
//     Only requests bearing Options.NodeToken may set or remove them (the
//     nodes' own commits), and, with an Authority that is not open,
//     authenticated principals with Admin on that table, or with Write on
//     it for the nodes' own keys (nodeProperty; edge nodes with their own
//     credentials; see auth.go); everybody else gets 403 —
//     readers, anonymous clients, the static Token. Without a NodeToken or
//     such principals, no request may (edge nodes then commit to the
//     backing catalog directly).
//   - Choose where a table lives. Every table's location is
//     <warehouse>/<namespace levels joined by ".">/<name> (for a stream,
//     exactly tables.Catalog.TableLocation), so no table can be placed over
//     the node's data directory, another table's folder or outside the
//     warehouse; maintenance deletes only inside a table's own folder. A
//     create or commit naming another location is refused with 403, and a
//     namespace may not carry a "location" property.
//   - Name a file outside the table's folder: a set-statistics or
//     set-partition-statistics path, or an add-snapshot's manifest list
//     (maintenance deletes what expired snapshots point at; it also
//     refuses any delete outside the folder, see tables/confine.go).
//   - Name a namespace level or table "." / ".." or with "/" or "." in it,
//     which would make two identifiers share a folder.

// ReservedPrefix starts the table properties only edge nodes may write.
const ReservedPrefix = "tributary."

func forbidden(format string, args ...any) error {
	return &httpError{http.StatusForbidden, "ForbiddenException", fmt.Errorf(format, args...)}
}

type ctxKey int

func bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

func tokenIs(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// checkName refuses a namespace level or table name that could make two
// identifiers share a folder in the warehouse.
func checkName(kind, l string) error {
	if l == "" || l == "." || l == ".." || strings.ContainsAny(l, "/\\.") || strings.Contains(l, NamespaceSeparator) {
		return badRequest("%s %q: names may not be empty or contain '.', '/', '\\' or the namespace separator", kind, l)
	}
	return nil
}

// tableLocation is the one location a table may have.
func (h *handler) tableLocation(id table.Identifier) string {
	ns, name := id[:len(id)-1], id[len(id)-1]
	return strings.TrimRight(h.opts.Warehouse, "/") + "/" + strings.Join(ns, ".") + "/" + name
}

// checkLocation refuses a client-chosen location other than the table's.
func (h *handler) checkLocation(id table.Identifier, loc string) error {
	if loc == "" || strings.TrimRight(loc, "/") == h.tableLocation(id) {
		return nil
	}
	return forbidden("table %s must live at %s, not %s (locations are fixed by the warehouse layout)",
		strings.Join(id, "."), h.tableLocation(id), loc)
}

// checkPath refuses a file a commit names (a statistics file, a
// snapshot's manifest list) outside the table's own folder: maintenance
// deletes what expired snapshots point at.
func (h *handler) checkPath(id table.Identifier, what, p string) error {
	if tables.InFolder(h.tableLocation(id), p) {
		return nil
	}
	return forbidden("table %s: %s %q is outside the table's folder %s", strings.Join(id, "."), what, p, h.tableLocation(id))
}

// checkProperties refuses reserved keys of table id unless the request
// may write them.
func (h *handler) checkProperties(ctx context.Context, id table.Identifier, what string, keys []string) error {
	for _, k := range keys {
		if !strings.HasPrefix(k, ReservedPrefix) {
			continue
		}
		switch h.mayWriteReserved(ctx, id) {
		case reservedNone:
			return forbidden("%s %q: properties under %q are written by edge nodes only", what, k, ReservedPrefix)
		case reservedNode:
			if !nodeProperty(k) {
				return forbidden("%s %q: only admins set this property (edge nodes write their marks, owners, epochs and the maintenance lease)", what, k)
			}
		}
	}
	return nil
}

// nodeProperty tells whether k is one of the reserved properties an edge
// node writes in its own commits (marks, partition owners and epochs,
// partition allocation, the maintenance lease, MQTT routes); the others
// (the maintenance policy, anything new) are an admin's.
func nodeProperty(k string) bool {
	for _, p := range []string{tables.PropHighWater, tables.PropOwner, tables.PropEpoch, tables.PropNodePartition, tables.PropMQTTRoutes} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	switch k {
	case tables.PropNextPartition, tables.PropGranularity, tables.PropMaintainHolder, tables.PropMaintainUntil:
		return true
	}
	return false
}

// checkUpdates applies the rules above to a commit's updates.
func (h *handler) checkUpdates(ctx context.Context, id table.Identifier, updates []table.Update) error {
	for _, u := range updates {
		switch u.Action() {
		case table.UpdateSetProperties, table.UpdateRemoveProperties, table.UpdateSetLocation,
			table.UpdateSetStatistics, table.UpdateSetPartitionStatistics, table.UpdateAddSnapshot:
		default:
			continue
		}
		raw, err := json.Marshal(u)
		if err != nil {
			return badRequest("update %s: %v", u.Action(), err)
		}
		var f struct {
			Updates  map[string]string `json:"updates"`
			Removals []string          `json:"removals"`
			Location string            `json:"location"`
			Stats    struct {
				Path string `json:"statistics-path"`
			} `json:"statistics"`
			PartStats struct {
				Path string `json:"statistics-path"`
			} `json:"partition-statistics"`
			Snapshot struct {
				ManifestList string `json:"manifest-list"`
			} `json:"snapshot"`
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			return badRequest("update %s: %v", u.Action(), err)
		}
		switch u.Action() {
		case table.UpdateSetProperties:
			keys := make([]string, 0, len(f.Updates))
			for k := range f.Updates {
				keys = append(keys, k)
			}
			if err := h.checkProperties(ctx, id, "set property", keys); err != nil {
				return err
			}
		case table.UpdateRemoveProperties:
			if err := h.checkProperties(ctx, id, "remove property", f.Removals); err != nil {
				return err
			}
		case table.UpdateSetLocation:
			if f.Location == "" {
				return badRequest("set-location without a location")
			}
			if err := h.checkLocation(id, f.Location); err != nil {
				return err
			}
		case table.UpdateSetStatistics:
			if err := h.checkPath(id, "statistics-path", f.Stats.Path); err != nil {
				return err
			}
		case table.UpdateSetPartitionStatistics:
			if err := h.checkPath(id, "partition statistics-path", f.PartStats.Path); err != nil {
				return err
			}
		case table.UpdateAddSnapshot:
			if err := h.checkPath(id, "manifest-list", f.Snapshot.ManifestList); err != nil {
				return err
			}
		}
	}
	return nil
}
