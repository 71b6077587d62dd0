package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary/tables"
)

// rawDeltaLog is a Delta log replayed from its JSON commits by plain
// encoding/json, without the project's Delta package: the live files with
// their numRecords, and the latest txn version per appId. It checks the
// protocol's rules on the way: commits dense from 0, no path added twice
// without a remove between, txn versions never going back per appId.
type rawDeltaLog struct {
	Version int64
	Files   map[string]int64 // path (decoded, relative to the root) -> numRecords
	Txns    map[string]int64
}

func readRawDeltaLog(t *testing.T, root string) rawDeltaLog {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "_delta_log"))
	if err != nil {
		t.Fatal(err)
	}
	var commits []string
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, ".json") && len(n) == 25 {
			commits = append(commits, n)
		}
	}
	sort.Strings(commits)
	l := rawDeltaLog{Version: -1, Files: map[string]int64{}, Txns: map[string]int64{}}
	for i, n := range commits {
		if want := fmt.Sprintf("%020d.json", i); n != want {
			t.Fatalf("the Delta log's commits are not dense: %s where %s belongs", n, want)
		}
		raw, err := os.ReadFile(filepath.Join(root, "_delta_log", n))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var a struct {
				Add *struct {
					Path       string `json:"path"`
					Stats      string `json:"stats"`
					DataChange bool   `json:"dataChange"`
				} `json:"add"`
				Remove *struct {
					Path string `json:"path"`
				} `json:"remove"`
				Txn *struct {
					AppID   string `json:"appId"`
					Version int64  `json:"version"`
				} `json:"txn"`
			}
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				t.Fatalf("%s: %q: %v", n, sc.Text(), err)
			}
			switch {
			case a.Add != nil:
				p, err := url.PathUnescape(a.Add.Path)
				if err != nil || strings.HasPrefix(p, "/") || strings.Contains(p, "://") {
					t.Fatalf("%s: add path %q is not relative to the table root", n, a.Add.Path)
				}
				if _, dup := l.Files[p]; dup {
					t.Fatalf("%s: %s added twice without a remove", n, p)
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
					t.Fatalf("%s: add of a file that does not exist: %v", n, err)
				}
				var st struct {
					NumRecords *int64 `json:"numRecords"`
				}
				if err := json.Unmarshal([]byte(a.Add.Stats), &st); err != nil || st.NumRecords == nil {
					t.Fatalf("%s: add %s has stats %q without numRecords (%v)", n, p, a.Add.Stats, err)
				}
				l.Files[p] = *st.NumRecords
			case a.Remove != nil:
				p, _ := url.PathUnescape(a.Remove.Path)
				delete(l.Files, p)
			case a.Txn != nil:
				if v, ok := l.Txns[a.Txn.AppID]; ok && a.Txn.Version < v {
					t.Fatalf("%s: txn %s goes back from %d to %d", n, a.Txn.AppID, v, a.Txn.Version)
				}
				l.Txns[a.Txn.AppID] = a.Txn.Version
			}
		}
		l.Version = int64(i)
	}
	return l
}

// checkDeltaMatchesIceberg: the Delta log under the table's root lists
// exactly the Iceberg snapshot's data files, with the same row count per
// file, and its txn per partition equals the table's mark of it.
func checkDeltaMatchesIceberg(t *testing.T, tbl *table.Table, root, stream string) rawDeltaLog {
	t.Helper()
	l := readRawDeltaLog(t, root)
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ice := map[string]int64{}
	for _, task := range tasks {
		p := strings.TrimPrefix(task.File.FilePath(), "file://")
		rel, err := filepath.Rel(root, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("Iceberg file %s is outside the table root %s", p, root)
		}
		ice[filepath.ToSlash(rel)] = task.File.Count()
	}
	for p, n := range l.Files {
		in, ok := ice[p]
		if !ok {
			t.Fatalf("the Delta log lists %s, the Iceberg snapshot does not", p)
		}
		if in != n {
			t.Fatalf("%s: %d rows by the Delta stats, %d by the Iceberg manifest", p, n, in)
		}
	}
	if len(l.Files) != len(ice) {
		t.Fatalf("the Delta log lists %d files, the Iceberg snapshot %d", len(l.Files), len(ice))
	}
	marks := tables.HighWaters(tbl)
	for p, m := range marks {
		if v := l.Txns[tables.DeltaAppID(stream, p)]; v != m {
			t.Fatalf("partition %d: Delta txn version %d, Iceberg mark %d", p, v, m)
		}
	}
	if len(l.Txns) != len(marks) {
		t.Fatalf("Delta txns %v, Iceberg marks %v", l.Txns, marks)
	}
	return l
}
