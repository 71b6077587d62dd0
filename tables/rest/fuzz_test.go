package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/rest"
)

// dryCatalog is the SQL catalog with its writes stubbed: the fuzzer
// exercises decoding, requirement validation, the dry-run of updates and
// metadata construction without mutating the catalog (nor writing metadata
// wherever a fuzzed location points).
type dryCatalog struct{ catalog.Catalog }

func (dryCatalog) CreateNamespace(context.Context, table.Identifier, iceberg.Properties) error {
	return nil
}

func (dryCatalog) CreateTable(_ context.Context, _ table.Identifier, sc *iceberg.Schema, opts ...catalog.CreateTableOpt) (*table.Table, error) {
	cfg := catalog.NewCreateTableCfg()
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := table.NewMetadata(sc, cfg.PartitionSpec, cfg.SortOrder, "file:///nonexistent", cfg.Properties); err != nil {
		return nil, fmt.Errorf("%w: %v", iceberg.ErrInvalidArgument, err)
	}
	return nil, catalog.ErrTableAlreadyExists
}

func (d dryCatalog) CommitTable(ctx context.Context, id table.Identifier, _ []table.Requirement, _ []table.Update) (table.Metadata, string, error) {
	t, err := d.LoadTable(ctx, id)
	if err != nil {
		return nil, "", err
	}
	return t.Metadata(), t.MetadataLocation(), nil
}

// FuzzCommitRequestServer is the slow end-to-end target (`make fuzz` runs
// it for FUZZTIME_SLOW; FuzzCommitDecode the in-process one): it sends
// arbitrary bodies to the commit and transaction
// endpoints, and arbitrary namespace / table names through the path: the
// server never panics and never answers 5xx; anything but a success is a
// 4xx with the spec's error body.
func FuzzCommitRequestServer(f *testing.F) {
	dir := f.TempDir()
	c, err := tables.Open(context.Background(), tables.Config{
		URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Warehouse: "file://" + filepath.Join(dir, "warehouse"),
	})
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	if _, err := c.EnsureTable(context.Background(), "ns.t"); err != nil {
		f.Fatal(err)
	}
	if err := c.Iceberg().CreateNamespace(context.Background(), table.Identifier{"ns", "sub"}, nil); err != nil {
		f.Fatal(err)
	}
	h := rest.NewHandler(dryCatalog{c.Iceberg()}, rest.Options{Logger: quietLogger(), Warehouse: c.Warehouse()})

	for _, s := range rest.CommitSeeds {
		f.Add(s.NS, s.Table, s.Body)
	}

	f.Fuzz(func(t *testing.T, ns, tbl string, body []byte) {
		nsPath := "/v1/namespaces/" + url.PathEscape(ns)
		tblPath := nsPath + "/tables/" + url.PathEscape(tbl)
		for _, rq := range []struct {
			method, path string
			body         []byte
		}{
			{"POST", tblPath, body},
			{"POST", "/v1/transactions/commit", body},
			{"POST", nsPath + "/tables", body},
			{"POST", "/v1/namespaces", body},
			{"GET", tblPath, nil},
			{"GET", nsPath, nil},
			{"GET", "/v1/namespaces?parent=" + url.QueryEscape(ns), nil},
		} {
			req := httptest.NewRequest(rq.method, rq.path, bytes.NewReader(rq.body))
			w := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(w, req)
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("%s %s %q took %v: %d %s", rq.method, rq.path, rq.body, d, w.Code, w.Body.Bytes())
			}
			if w.Code >= 200 && w.Code < 300 {
				continue
			}
			if w.Code < 400 || w.Code >= 500 {
				t.Fatalf("%s %s %q: status %d: %s", rq.method, rq.path, rq.body, w.Code, w.Body.Bytes())
			}
			var em struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &em); err != nil || em.Error.Code != w.Code || em.Error.Type == "" {
				t.Fatalf("%s %s: status %d with a malformed error body: %s", rq.method, rq.path, w.Code, w.Body.Bytes())
			}
			if w.Code == http.StatusNotFound && em.Error.Type == "NotFoundException" && rq.method == "POST" && rq.path == tblPath {
				t.Fatalf("commit path %s not routed", rq.path)
			}
		}
	})
}
