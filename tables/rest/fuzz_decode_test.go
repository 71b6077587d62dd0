package rest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// CommitSeeds are the seeds of FuzzCommitDecode and of the end-to-end
// FuzzCommitRequestServer (in package rest_test): a namespace and a table
// name as they come in the path, and a body.
var CommitSeeds = []struct {
	NS, Table string
	Body      []byte
}{
	{"ns", "t", []byte(`{"requirements":[],"updates":[]}`)},
	{"ns", "t", []byte(`{"identifier":{"namespace":["ns"],"name":"t"},"requirements":[{"type":"assert-ref-snapshot-id","ref":"main","snapshot-id":null}],"updates":[{"action":"set-properties","updates":{"a":"b"}}]}`)},
	{"ns", "t", []byte(`{"requirements":[{"type":"assert-create"}],"updates":[{"action":"assign-uuid","uuid":"9c12d441-03fe-4693-9a96-a0705ddf69c1"}]}`)},
	{"ns\x1fsub", "t2", []byte(`{"requirements":[{"type":"assert-create"}],"updates":[{"action":"upgrade-format-version","format-version":2},{"action":"add-schema","schema":{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"x","type":"long","required":true}]}},{"action":"set-current-schema","schema-id":-1},{"action":"set-location","location":"file:///tmp/x"}]}`)},
	{"ns", "t", []byte(`{"requirements":[{"type":"assert-table-uuid","uuid":"zzz"}],"updates":[{"action":"remove-snapshots","snapshot-ids":[1,2]}]}`)},
	{"ns", "t", []byte(`{"updates":[{"action":"add-spec","spec":{"spec-id":1,"fields":[{"source-id":3,"field-id":1000,"name":"d","transform":"bucket[0]"}]}}]}`)},
	{"ns", "t", []byte(`{"updates":[{"action":"add-snapshot","snapshot":{"snapshot-id":1,"sequence-number":-1,"timestamp-ms":0,"manifest-list":"x","summary":{"operation":"append"}}},{"action":"set-snapshot-ref","ref-name":"main","type":"branch","snapshot-id":1}]}`)},
	{"", "", []byte(`{`)},
	{"..", "t", []byte(`null`)},
	{"a\x1f", "%", []byte(`{"table-changes":[{"identifier":{"namespace":[],"name":""}}]}`)},
	{"nope", "t", []byte(`{"requirements":[{"type":"assert-current-schema-id","current-schema-id":0}],"updates":[]}`)},
}

// FuzzCommitDecode is the in-process target for what FuzzCommitRequestServer
// drives through a whole handler and catalog. It is among `make fuzz`'s
// slow targets (FUZZTIME_SLOW) all the same: this package's test binary
// links Iceberg, Arrow and the SQL catalog, and the fuzz engine's
// per-execution coverage bookkeeping over all of it (the likely cause)
// keeps it far below a million executions in sane time. In process, without a catalog, the
// path names are parsed and the body decoded as a commit and as a
// transaction; decoded requirements are validated, and decoded updates
// dry-run, against one fixed table's metadata (and against none, as for a
// table being created). Nothing panics out of them, and every refusal of
// the decoders and name checks is a 400.
func FuzzCommitDecode(f *testing.F) {
	for _, s := range CommitSeeds {
		f.Add(s.NS, s.Table, s.Body)
	}
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "x", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "s", Type: iceberg.PrimitiveTypes.String})
	meta, err := table.NewMetadata(sc, nil, table.UnsortedSortOrder, "file:///w/ns/t", iceberg.Properties{"a": "b"})
	if err != nil {
		f.Fatal(err)
	}
	empty, err := table.NewMetadata(iceberg.NewSchema(0), nil, table.UnsortedSortOrder, "", nil)
	if err != nil {
		f.Fatal(err)
	}
	bad := func(t *testing.T, what string, err error) {
		if status, _ := classify(err); status != http.StatusBadRequest {
			t.Fatalf("%s: status %d for %v", what, status, err)
		}
	}
	f.Fuzz(func(t *testing.T, ns, tbl string, body []byte) {
		if _, err := parseNamespace(ns); err != nil {
			bad(t, "namespace", err)
		}
		if err := checkName("table name", tbl); err != nil {
			bad(t, "table name", err)
		}
		var commit commitRequest
		if err := decodeCommit(httptest.NewRequest("POST", "/", bytes.NewReader(body)), &commit); err != nil {
			bad(t, "commit body", err)
		} else {
			dryRun(commit, meta, empty)
		}
		var tx struct {
			TableChanges []commitRequest `json:"table-changes"`
		}
		if err := decodeCommit(httptest.NewRequest("POST", "/", bytes.NewReader(body)), &tx); err != nil {
			bad(t, "transaction body", err)
			return
		}
		for _, c := range tx.TableChanges {
			if _, err := c.Identifier.ident(); err != nil {
				bad(t, "transaction identifier", err)
			}
			dryRun(c, meta, empty)
		}
	})
}

// dryRun validates and applies a decoded commit as checkCommit does, against
// an existing table's metadata and against none (a table being created);
// validate and applyUpdates turn panics into errors.
func dryRun(c commitRequest, meta, empty table.Metadata) {
	if c.Identifier != nil {
		_, _ = c.Identifier.ident()
	}
	for _, rq := range c.Requirements {
		if rq != nil {
			_ = validate(rq, meta)
			_ = validate(rq, nil)
		}
	}
	for _, u := range c.Updates {
		if u == nil {
			return
		}
	}
	_ = applyUpdates(meta, c.Updates, "file:///w/ns/t/metadata/v1.metadata.json")
	_ = applyUpdates(empty, c.Updates, "")
}
