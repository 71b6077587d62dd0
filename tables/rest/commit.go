package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/auth"
)

// commitRequest is the protocol's CommitTableRequest; requirements and
// updates are decoded with iceberg-go's own wire types.
type commitRequest struct {
	Identifier   *wireIdent         `json:"identifier"`
	Requirements table.Requirements `json:"requirements"`
	Updates      table.Updates      `json:"updates"`
}

type commitResponse struct {
	MetadataLocation string         `json:"metadata-location"`
	Metadata         table.Metadata `json:"metadata"`
}

// decodeCommit reads a CommitTableRequest. Decoding hostile input must not
// take the server down: a panic in a decoder is a bad request.
func decodeCommit(r *http.Request, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = badRequest("malformed commit request: %v", p)
		}
	}()
	return decode(r, v)
}

func (h *handler) commitTable(w http.ResponseWriter, r *http.Request) {
	id, err := pathTable(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req commitRequest
	if err := decodeCommit(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if req.Identifier != nil {
		bodyID, err := req.Identifier.ident()
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if !slices.Equal(bodyID, id) {
			h.fail(w, r, badRequest("identifier %s in the body does not match the path's %s",
				strings.Join(bodyID, "."), strings.Join(id, ".")))
			return
		}
	}
	meta, loc, err := h.commit(r.Context(), id, req.Requirements, req.Updates)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, commitResponse{MetadataLocation: loc, Metadata: meta})
}

// commit is the compare-and-swap: under the table's mutex, check every
// requirement against the current metadata (409 if one fails), check the
// updates apply (400 if not), then let the backing catalog swap the
// metadata location, which it does only if nobody else has meanwhile.
func (h *handler) commit(ctx context.Context, id table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	unlock := h.lockTable(id)
	defer unlock()
	_, _, creating, err := h.checkCommit(ctx, id, reqs, updates)
	if err != nil {
		return nil, "", err
	}
	meta, newLoc, err := h.cat.CommitTable(ctx, id, reqs, updates)
	if err != nil {
		return nil, "", h.commitError(ctx, id, creating, err)
	}
	return meta, newLoc, nil
}

// checkCommit validates a commit against the table's current state and
// returns that state (nil metadata when the commit creates the table).
func (h *handler) checkCommit(ctx context.Context, id table.Identifier, reqs []table.Requirement, updates []table.Update) (base table.Metadata, loc string, creating bool, err error) {
	for _, rq := range reqs {
		if rq == nil {
			return nil, "", false, badRequest("null requirement")
		}
	}
	for _, u := range updates {
		if u == nil {
			return nil, "", false, badRequest("null update")
		}
	}
	if err := checkName("table name", id[len(id)-1]); err != nil {
		return nil, "", false, err
	}
	if err := h.authorize(ctx, auth.Write, nil, id); err != nil {
		return nil, "", false, err
	}
	if err := h.checkUpdates(ctx, id, updates); err != nil {
		return nil, "", false, err
	}
	cur, err := h.cat.LoadTable(ctx, id)
	switch {
	case err == nil:
		base, loc = cur.Metadata(), cur.MetadataLocation()
	case errors.Is(err, catalog.ErrNoSuchTable) && slices.ContainsFunc(reqs, isAssertCreate):
		creating = true
	default:
		return nil, "", false, err
	}
	for _, rq := range reqs {
		if err := validate(rq, base); err != nil {
			return nil, "", false, commitFailed(err)
		}
	}
	// Apply the updates to a copy first, so that an update that cannot
	// apply is the client's error (400) rather than a failed commit.
	dry := base
	if dry == nil {
		if dry, err = table.NewMetadata(iceberg.NewSchema(0), nil, table.UnsortedSortOrder, "", nil); err != nil {
			return nil, "", false, err
		}
	}
	if err := applyUpdates(dry, updates, loc); err != nil {
		return nil, "", false, badRequest("invalid update: %v", err)
	}
	return base, loc, creating, nil
}

func validate(rq table.Requirement, meta table.Metadata) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("requirement %s: %v", rq.GetType(), p)
		}
	}()
	return rq.Validate(meta)
}

func applyUpdates(base table.Metadata, updates []table.Update, loc string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	_, err = table.UpdateTableMetadata(base, updates, loc)
	return err
}

func isAssertCreate(rq table.Requirement) bool {
	return rq != nil && rq.GetType() == "assert-create"
}

// commitError classifies a failed CommitTable of the backing catalog. A
// lost swap (table.ErrCommitFailed) or a requirement that failed against
// state another server process committed in between is a conflict; so is a
// create that lost to a concurrent creator. Anything else is a server
// error, which the client must treat as "unknown outcome".
func (h *handler) commitError(ctx context.Context, id table.Identifier, creating bool, err error) error {
	if errors.Is(err, table.ErrCommitFailed) {
		return commitFailed(err)
	}
	if strings.Contains(strings.ToLower(err.Error()), "requirement failed") {
		return commitFailed(err)
	}
	if errors.Is(err, catalog.ErrNoSuchTable) || errors.Is(err, catalog.ErrNoSuchNamespace) {
		return err
	}
	if creating {
		if ok, cerr := h.cat.CheckTableExists(ctx, id); cerr == nil && ok {
			return commitFailed(fmt.Errorf("table was created concurrently: %w", err))
		}
	}
	return err
}

// commitTransaction serves POST /v1/transactions/commit: one table change
// is an ordinary commit; several need a backing catalog that commits them
// atomically (catalog.TransactionalCatalog).
func (h *handler) commitTransaction(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TableChanges []commitRequest `json:"table-changes"`
	}
	if err := decodeCommit(r, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	if len(req.TableChanges) == 0 {
		h.fail(w, r, badRequest("no table changes"))
		return
	}
	ids := make([]table.Identifier, len(req.TableChanges))
	seen := map[string]bool{}
	for i, c := range req.TableChanges {
		id, err := c.Identifier.ident()
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if seen[identKey(id)] {
			h.fail(w, r, badRequest("table %s changed twice in one transaction", strings.Join(id, ".")))
			return
		}
		seen[identKey(id)] = true
		ids[i] = id
	}
	if len(ids) == 1 {
		c := req.TableChanges[0]
		if _, _, err := h.commit(r.Context(), ids[0], c.Requirements, c.Updates); err != nil {
			h.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	tc, ok := h.cat.(catalog.TransactionalCatalog)
	if !ok {
		h.fail(w, r, &httpError{http.StatusNotAcceptable, "UnsupportedOperationException",
			errors.New("multi-table transactions are not supported by this catalog's backing store")})
		return
	}
	// Lock in a fixed order so that two transactions cannot deadlock.
	order := slices.Clone(ids)
	slices.SortFunc(order, func(a, b table.Identifier) int { return strings.Compare(identKey(a), identKey(b)) })
	for _, id := range order {
		defer h.lockTable(id)()
	}
	commits := make([]table.TableCommit, len(ids))
	for i, c := range req.TableChanges {
		if _, _, _, err := h.checkCommit(r.Context(), ids[i], c.Requirements, c.Updates); err != nil {
			h.fail(w, r, err)
			return
		}
		commits[i] = table.TableCommit{Identifier: ids[i], Requirements: c.Requirements, Updates: c.Updates}
	}
	if err := tc.CommitTransaction(r.Context(), commits); err != nil {
		if errors.Is(err, table.ErrCommitFailed) || strings.Contains(strings.ToLower(err.Error()), "requirement failed") {
			err = commitFailed(err)
		}
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
