package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/tables/delta"
	"github.com/tributary-io/tributary/uplink"
)

const tablesUsage = `usage: tributary tables <list | describe STREAM | scan STREAM | maintain STREAM> [flags]

  list                       every stream table with its row count and partitions
  describe STREAM            schema, partition spec, properties, high-water marks, snapshots,
                             and a Delta log's version and txn marks (per appId) when there is one
  scan STREAM                rows in (partition, offset) order
      --format F             iceberg (default) or delta: read through the Delta log instead
      --limit N              at most N rows, the first (default 20; 0 = all)
      --tail N               the latest N rows instead (by accept time; shown in order)
      --partition P          only partition P
      --from-offset O        with --partition: start at offset O
      --json                 one JSON object per row (value as text when UTF-8, else base64)
                             a dead-letter table (STREAM_dlq) also shows each row's error
  maintain STREAM            one maintenance pass: merge manifests, compact small files,
                             expire snapshots, delete orphans (under the table's lease);
                             a table with a Delta log in both logs, and its old log files
      --dry-run              only say what the pass would do
      --target-file-size N   compacted file size in bytes (default 134217728 = 128MiB)
      --snapshot-max-age D   keep snapshots younger than D (default 1h)
      --retain-snapshots N   keep at least the last N snapshots (default 100)
      --orphan-grace D       keep unreferenced files younger than D (default 24h)

catalog flags (all subcommands):
  --data DIR                 a 'tributary dev' data directory (default ./data)
  --catalog URI              catalog URI (default sqlite://DIR/catalog.db)
  --warehouse URL            warehouse URL (default file://DIR/warehouse)
  --catalog-name NAME        catalog name (default tributary)
`

// parseInterspersed parses flags that may come before or after positional
// arguments, returning the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func cmdTables(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tables", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: to stdout when asked for with -h
	data := fs.String("data", "./data", "")
	catURI := fs.String("catalog", "", "")
	warehouse := fs.String("warehouse", "", "")
	catName := fs.String("catalog-name", "tributary", "")
	limit := fs.Int64("limit", 20, "")
	tail := fs.Int64("tail", 0, "")
	partition := fs.Int("partition", -1, "")
	from := fs.Int64("from-offset", 0, "")
	asJSON := fs.Bool("json", false, "")
	format := fs.String("format", "iceberg", "")
	dryRun := fs.Bool("dry-run", false, "")
	target := fs.Int64("target-file-size", 0, "")
	maxAge := fs.Duration("snapshot-max-age", 0, "")
	retain := fs.Int("retain-snapshots", 0, "")
	grace := fs.Duration("orphan-grace", 0, "")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, tablesUsage) // asked for: not an error
		return 0
	}
	if err != nil {
		fmt.Fprint(stderr, tablesUsage)
		return 2
	}
	if len(pos) == 0 {
		fmt.Fprint(stderr, tablesUsage)
		return 2
	}
	abs, _ := filepath.Abs(*data)
	if *catURI == "" {
		*catURI = "sqlite://" + filepath.Join(abs, "catalog.db")
	}
	if *warehouse == "" {
		*warehouse = "file://" + filepath.Join(abs, "warehouse")
	}
	ctx := context.Background()
	cat, err := tables.Open(ctx, tables.Config{Name: *catName, URI: *catURI, Warehouse: *warehouse})
	if err != nil {
		fmt.Fprintln(stderr, "tributary tables:", err)
		return 1
	}
	defer cat.Close()
	dst, closeDelta, err := deltaStore(ctx, *warehouse)
	if err != nil {
		fmt.Fprintln(stderr, "tributary tables:", err)
		return 1
	}
	defer closeDelta()
	need := func(n int) bool {
		if len(pos) != n {
			fmt.Fprint(stderr, tablesUsage)
			return false
		}
		return true
	}
	switch pos[0] {
	case "list":
		if !need(1) {
			return 2
		}
		err = tablesList(ctx, cat, stdout)
	case "describe":
		if !need(2) {
			return 2
		}
		err = tablesDescribe(ctx, cat, dst, pos[1], stdout)
	case "scan":
		if !need(2) {
			return 2
		}
		if *tail < 0 {
			fmt.Fprintln(stderr, "tributary tables scan: --tail must be 1 or more")
			return 2
		}
		if *format != "iceberg" && *format != "delta" {
			fmt.Fprintf(stderr, "tributary tables scan: --format %q: want iceberg or delta\n", *format)
			return 2
		}
		lim := *limit
		if *tail > 0 {
			lim = -*tail // tablesScan: a negative limit keeps the latest
		}
		var viaDelta delta.Store
		if *format == "delta" {
			viaDelta = dst
		}
		err = tablesScan(ctx, cat, pos[1], tables.ScanOptions{Partition: int32(*partition), FromOffset: *from, Limit: lim}, viaDelta, *asJSON, stdout, stderr)
	case "maintain":
		if !need(2) {
			return 2
		}
		pol := tables.Policy{TargetFileSize: *target, SnapshotMaxAge: *maxAge, RetainSnapshots: *retain, OrphanGrace: *grace}
		err = tablesMaintain(ctx, cat, pos[1], tables.MaintainOptions{Policy: pol, DryRun: *dryRun, DeltaStore: dst}, stdout)
	default:
		fmt.Fprintf(stderr, "tributary tables: unknown subcommand %q\n\n%s", pos[0], tablesUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "tributary tables:", err)
		return 1
	}
	return 0
}

func tablesList(ctx context.Context, cat *tables.Catalog, w io.Writer) error {
	streams, err := cat.ListStreams(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tROWS\tPARTITIONS\tSNAPSHOT\tLOCATION")
	for _, s := range streams {
		t, err := cat.LoadTable(ctx, s)
		if err != nil {
			return err
		}
		rows, snap := "0", "-"
		if cs := t.CurrentSnapshot(); cs != nil {
			snap = strconv.FormatInt(cs.SnapshotID, 10)
			if cs.Summary != nil {
				if v, ok := cs.Summary.Properties["total-records"]; ok {
					rows = v
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s, rows, len(tables.HighWaters(t)), snap, t.Location())
	}
	return tw.Flush()
}

// deltaStore is the store of the warehouse's Delta logs: its folder on
// file://, else the bucket (credentials from the environment).
func deltaStore(ctx context.Context, warehouse string) (delta.Store, func(), error) {
	if dir, ok := strings.CutPrefix(warehouse, "file://"); ok {
		return delta.DirStore{Root: dir}, func() {}, nil
	}
	b, err := uplink.OpenBucket(ctx, warehouse)
	if err != nil {
		return nil, nil, err
	}
	return b.DeltaStore(), func() { b.Close() }, nil
}

// describeDelta prints the Delta log of a stream's table, if it has one:
// its version, checkpoint, files and every txn (appId and version), each
// partition's beside the Iceberg mark.
func describeDelta(ctx context.Context, cat *tables.Catalog, st delta.Store, stream string, marks map[int32]int64, w io.Writer) error {
	root, err := cat.DeltaRoot(stream)
	if err != nil {
		return err
	}
	s, err := delta.NewTable(st, root).Snapshot(ctx)
	if errors.Is(err, delta.ErrNotTable) {
		fmt.Fprintln(w, "\ndelta log: none")
		return nil
	}
	if err != nil {
		fmt.Fprintf(w, "\ndelta log: unreadable: %v\n", err)
		return nil
	}
	fmt.Fprintf(w, "\ndelta log: version %d (checkpoint %d), %d files, %d removes kept\n", s.Version, s.Checkpoint, len(s.Files), len(s.Tombstones))
	fmt.Fprintln(w, "delta txns: appId, version (next offset in the Delta log), the Iceberg mark:")
	apps := make([]string, 0, len(s.Txns))
	for a := range s.Txns {
		apps = append(apps, a)
	}
	sort.Strings(apps)
	for _, a := range apps {
		fmt.Fprintf(w, "  %s: %d", a, s.Txns[a].Version)
		if ps, ok := strings.CutPrefix(a, stream+"/"); ok {
			if p, err := strconv.ParseInt(ps, 10, 32); err == nil {
				h := marks[int32(p)]
				fmt.Fprintf(w, "  iceberg %d", h)
				if h > s.Txns[a].Version {
					fmt.Fprintf(w, "  (%d behind)", h-s.Txns[a].Version)
				}
			}
		}
		fmt.Fprintln(w)
	}
	return nil
}

func tablesDescribe(ctx context.Context, cat *tables.Catalog, dst delta.Store, stream string, w io.Writer) error {
	t, err := cat.LoadTable(ctx, stream)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "stream     %s.%s\nlocation   %s\nmetadata   %s\n\nschema:\n", cat.Name(), stream, t.Location(), t.MetadataLocation())
	for _, f := range t.Schema().Fields() {
		req := "optional"
		if f.Required {
			req = "required"
		}
		fmt.Fprintf(w, "  %2d  %-20s %-40s %s\n", f.ID, f.Name, f.Type, req)
	}
	fmt.Fprintf(w, "\npartition spec: %s\n\npartitions: high-water mark (next offset not in the table), owner and ownership epoch:\n", t.Spec())
	marks, owners := tables.HighWaters(t), tables.Owners(t)
	parts := make([]int32, 0, len(marks))
	for p := range marks {
		parts = append(parts, p)
	}
	for p := range owners {
		if _, ok := marks[p]; !ok {
			parts = append(parts, p)
		}
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, p := range parts {
		fmt.Fprintf(w, "  partition %d: %d", p, marks[p])
		if o, ok := owners[p]; ok {
			fmt.Fprintf(w, "  owner %s epoch %d", o.Node, o.Epoch)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nproperties:")
	props := t.Properties()
	keys := make([]string, 0, len(props))
	for k := range props {
		if !strings.HasPrefix(k, tables.PropHighWater) && k != "schema.name-mapping.default" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s = %s\n", k, props[k])
	}
	snaps := t.Metadata().Snapshots()
	fmt.Fprintf(w, "\nsnapshots: %d", len(snaps))
	if cs := t.CurrentSnapshot(); cs != nil {
		fmt.Fprintf(w, " (current %d at %s)", cs.SnapshotID, time.UnixMilli(cs.TimestampMs).UTC().Format(time.RFC3339))
		if cs.Summary != nil {
			fmt.Fprintf(w, "\n  total-records %s, total-data-files %s", cs.Summary.Properties["total-records"], cs.Summary.Properties["total-data-files"])
		}
	}
	fmt.Fprintln(w)
	if dst != nil {
		return describeDelta(ctx, cat, dst, stream, marks, w)
	}
	return nil
}

// scanRow is one row of a scan: the record and, in a dead-letter table,
// why its payload was not typed.
type scanRow struct {
	*tributary.Record
	Error string
}

// tablesScan prints a stream's rows in (partition, offset) order: the
// first opts.Limit (0 = all), or with a negative limit the latest -Limit
// by accept time.
func tablesScan(ctx context.Context, cat *tables.Catalog, stream string, opts tables.ScanOptions, viaDelta delta.Store, asJSON bool, w, progress io.Writer) error {
	lim := opts.Limit
	opts.Limit = 0 // order first, then limit
	dlq := tables.IsDLQ(stream)
	var rows []scanRow
	if viaDelta != nil {
		drows, _, err := cat.ScanDelta(ctx, viaDelta, stream, opts)
		if err != nil {
			return err
		}
		for _, r := range drows {
			rows = append(rows, scanRow{Record: r.Record, Error: r.Error})
		}
	} else if dlq {
		var err error
		if rows, err = scanDeadLetters(ctx, cat, stream, opts); err != nil {
			return err
		}
	} else {
		recs, err := scanWithProgress(ctx, cat, stream, opts, progress)
		if err != nil {
			return err
		}
		rows = make([]scanRow, len(recs))
		for i, r := range recs {
			rows[i].Record = r
		}
	}
	if lim > 0 && int64(len(rows)) > lim {
		rows = rows[:lim]
	}
	if n := -lim; n > 0 && int64(len(rows)) > n {
		rows = latest(rows, int(n))
	}
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rows {
			m := map[string]any{"partition": r.Partition, "offset": r.Offset,
				"timestamp": time.UnixMicro(r.Timestamp).UTC().Format(time.RFC3339Nano), "topic": r.Topic,
				"source": r.Source, "client_id": r.ClientID, "node": r.Node, "value": textOrBytes(r.Value)}
			if r.Key != nil {
				m["key"] = textOrBytes(r.Key)
			}
			if r.Principal != "" {
				m["principal"] = r.Principal
			}
			if len(r.Headers) > 0 {
				hs := make([][2]any, len(r.Headers))
				for i, h := range r.Headers {
					hs[i] = [2]any{h.Key, textOrBytes(h.Value)}
				}
				m["headers"] = hs
			}
			if dlq {
				m["error"] = r.Error
			}
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "PARTITION\tOFFSET\tTIMESTAMP\tTOPIC\tSOURCE\tCLIENT\tVALUE"
	if dlq {
		head += "\tERROR"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		s := string(r.Value)
		if !utf8.Valid(r.Value) {
			s = "0x" + hex.EncodeToString(r.Value)
		}
		if len(s) > 120 {
			s = s[:117] + "..."
		}
		line := fmt.Sprintf("%d\t%d\t%s\t%s\t%s\t%s\t%s", r.Partition, r.Offset,
			time.UnixMicro(r.Timestamp).UTC().Format("2006-01-02T15:04:05.000000Z"), r.Topic, r.Source, r.ClientID, s)
		if dlq {
			line += "\t" + strings.ReplaceAll(r.Error, "\t", " ")
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "(%d rows)\n", len(rows))
	return nil
}

// latest keeps the n rows accepted last (by timestamp, then offset) of
// rows, in their order.
func latest(rows []scanRow, n int) []scanRow {
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ra, rb := rows[idx[a]], rows[idx[b]]
		if ra.Timestamp != rb.Timestamp {
			return ra.Timestamp > rb.Timestamp
		}
		return ra.Offset > rb.Offset
	})
	keep := idx[:n]
	sort.Ints(keep)
	out := make([]scanRow, n)
	for i, j := range keep {
		out[i] = rows[j]
	}
	return out
}

// scanDeadLetters reads a dead-letter table in (partition, offset) order.
func scanDeadLetters(ctx context.Context, cat *tables.Catalog, stream string, opts tables.ScanOptions) ([]scanRow, error) {
	t, err := cat.LoadTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	var rows []scanRow
	for d, err := range tables.ScanDeadLetters(ctx, t, opts) {
		if err != nil {
			return nil, err
		}
		rows = append(rows, scanRow{Record: d.Record, Error: d.Error})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Partition != rows[j].Partition {
			return rows[i].Partition < rows[j].Partition
		}
		return rows[i].Offset < rows[j].Offset
	})
	return rows, nil
}

func textOrBytes(b []byte) any {
	if utf8.Valid(b) {
		return string(b)
	}
	return b // JSON encodes as base64
}

// tablesMaintain runs one maintenance pass and prints a line per step; on
// a terminal, compaction groups update one line in place.
func tablesMaintain(ctx context.Context, cat *tables.Catalog, stream string, opts tables.MaintainOptions, w io.Writer) error {
	tty := isTerminal(w)
	before, err := cat.Stats(ctx, stream)
	if err != nil {
		return err
	}
	mode := ""
	if opts.DryRun {
		mode = " (dry run: nothing is changed)"
	}
	fmt.Fprintf(w, "maintaining %s%s\n  before: %s\n", stream, mode, statsLine(before))
	start := time.Now()
	inPlace := false
	opts.Progress = func(p tables.Progress) {
		el := time.Since(start).Round(time.Millisecond)
		switch {
		case p.Of > 0 && tty:
			fmt.Fprintf(w, "\r\033[K  %-9s [%d/%d] %s", p.Step, p.Index, p.Of, p.Note)
			inPlace = true
		case p.Of > 0:
			fmt.Fprintf(w, "  %-9s [%d/%d] %s\n", p.Step, p.Index, p.Of, p.Note)
		case p.Done:
			if inPlace {
				fmt.Fprint(w, "\r\033[K")
				inPlace = false
			}
			fmt.Fprintf(w, "  %-9s %s  (%s)\n", p.Step, p.Note, el)
		case tty:
			fmt.Fprintf(w, "\r\033[K  %-9s ...", p.Step)
			inPlace = true
		}
	}
	res, err := cat.Maintain(ctx, stream, opts)
	if inPlace {
		fmt.Fprintln(w)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  after:  %s\n  %d commits, %d conflicts retried, took %s\n", statsLine(res.Stats), res.Commits, res.Conflicts,
		res.Duration.Round(time.Millisecond))
	return nil
}

func statsLine(s tables.TableStats) string {
	return fmt.Sprintf("%d snapshots, %d data manifests, %d data files, %d rows, metadata file %d bytes",
		s.Snapshots, s.DataManifests, s.DataFiles, s.Records, s.MetadataBytes)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// scanWithProgress reads a scan in (partition, offset) order; on a
// terminal it draws a progress bar on progress against the snapshot's
// row count (an upper bound when the scan is filtered).
func scanWithProgress(ctx context.Context, cat *tables.Catalog, stream string, opts tables.ScanOptions, progress io.Writer) ([]*tributary.Record, error) {
	if !isTerminal(progress) {
		return cat.ScanSorted(ctx, stream, opts)
	}
	t, err := cat.LoadTable(ctx, stream)
	if err != nil {
		return nil, err
	}
	var total int64
	if cs := t.CurrentSnapshot(); cs != nil && cs.Summary != nil {
		total, _ = strconv.ParseInt(cs.Summary.Properties["total-records"], 10, 64)
	}
	var out []*tributary.Record
	last := time.Time{}
	draw := func(done bool) {
		if !done && time.Since(last) < 100*time.Millisecond {
			return
		}
		last = time.Now()
		const width = 30
		n := int64(len(out))
		filled := width
		if total > 0 && n < total {
			filled = int(n * width / total)
		}
		fmt.Fprintf(progress, "\rscanning %s [%s%s] %d / %d rows", stream,
			strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, total)
		if done {
			fmt.Fprintln(progress)
		}
	}
	for r, err := range tables.ScanTable(ctx, t, opts) {
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		draw(false)
	}
	draw(true)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}
