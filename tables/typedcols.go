package tables

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables/typed"
)

// Typed columns: a stream in infer mode has, after the envelope, one
// column per payload field (package typed has the rules), added by schema
// evolution the first time a batch carries the field; in schema mode, one
// per field its JSON Schema declares, added before the first batch that
// finds the table without it.
//
// Invariants:
//
//   - Columns land before the files that carry them. Shape commits the
//     batch's new columns (an Iceberg AddColumn of optional columns, in the
//     reload-check-commit loop evolveTable uses) before any data file of the
//     batch is written, and the files are written with the table's schema
//     as committed: their field ids are the table's. Nodes that add
//     different fields at once conflict on the schema; the loser reloads,
//     finds the winner's columns, and adds only what is still missing. A
//     field added as another type by a concurrent node makes this batch's
//     payloads conflict: they go to the dead-letter table, nothing is lost.
//   - Ids are never reused. Typed columns get ids after the table's last
//     column id (after the envelope's, which end at 15); a column is never
//     dropped or retyped by Tributary, so a file written with an older
//     schema stays readable (its missing columns read as null).
//   - Compaction keeps what was written. It re-derives the typed columns
//     from value with the table's current columns for the rows that had a
//     typed value, and leaves the others (dead letters) null: a typed row's
//     values are a function of its bytes and the columns (typed.Check),
//     and columns are only ever added.
//   - Nothing is lost. A payload that is not typed still has its envelope
//     row (typed columns null) and a dead-letter row (dlq.go).

// typedRoot returns the typed columns of sch: every top-level column that
// is not the envelope's, of a type typed knows (others are left null).
func typedRoot(sch *iceberg.Schema) *typed.Type {
	root := &typed.Type{Kind: typed.Struct}
	for _, f := range sch.Fields() {
		if isEnvelope(f.Name) {
			continue
		}
		if t := typedOf(f.Type); t != nil {
			root.Fields = append(root.Fields, &typed.Field{Name: f.Name, Type: t})
		}
	}
	return root
}

func isEnvelope(name string) bool {
	for _, n := range envelopeNames {
		if n == name {
			return true
		}
	}
	return false
}

// typedOf maps an Iceberg column type to typed's, or nil.
func typedOf(t iceberg.Type) *typed.Type {
	switch t := t.(type) {
	case *iceberg.StructType:
		st := &typed.Type{Kind: typed.Struct}
		for _, f := range t.FieldList {
			if ft := typedOf(f.Type); ft != nil {
				st.Fields = append(st.Fields, &typed.Field{Name: f.Name, Type: ft})
			}
		}
		return st
	case *iceberg.ListType:
		if e := typedOf(t.Element); e != nil {
			return &typed.Type{Kind: typed.List, Elem: e}
		}
		return nil
	}
	switch {
	case t.Equals(iceberg.PrimitiveTypes.Bool):
		return &typed.Type{Kind: typed.Bool}
	case t.Equals(iceberg.PrimitiveTypes.Int64):
		return &typed.Type{Kind: typed.Long}
	case t.Equals(iceberg.PrimitiveTypes.Float64):
		return &typed.Type{Kind: typed.Double}
	case t.Equals(iceberg.PrimitiveTypes.String):
		return &typed.Type{Kind: typed.String}
	case t.Equals(iceberg.PrimitiveTypes.TimestampTz):
		return &typed.Type{Kind: typed.Timestamp}
	}
	return nil
}

// icebergOf maps a typed type to an Iceberg one; nested ids are
// placeholders (AddColumn assigns the table's).
func icebergOf(t *typed.Type, next *int) iceberg.Type {
	*next++
	switch t.Kind {
	case typed.Struct:
		st := &iceberg.StructType{}
		for _, f := range t.Fields {
			id := *next
			st.FieldList = append(st.FieldList, iceberg.NestedField{ID: id, Name: f.Name, Type: icebergOf(f.Type, next)})
		}
		return st
	case typed.List:
		id := *next
		return &iceberg.ListType{ElementID: id, Element: icebergOf(t.Elem, next), ElementRequired: false}
	case typed.Bool:
		return iceberg.PrimitiveTypes.Bool
	case typed.Long:
		return iceberg.PrimitiveTypes.Int64
	case typed.Double:
		return iceberg.PrimitiveTypes.Float64
	case typed.Timestamp:
		return iceberg.PrimitiveTypes.TimestampTz
	}
	return iceberg.PrimitiveTypes.String
}

// Shaped is a batch of records with their payloads decoded against the
// table's typed columns: what the uplink writes to the stream table and to
// its dead-letter table.
type Shaped struct {
	// Schema is the table's schema the batch's files are written with.
	Schema *iceberg.Schema
	// Added is the number of fields this batch added to the table's
	// columns (a new struct counts once).
	Added int
	// EvolveError says why the table refused the columns the batch
	// needed, or the event-time spec ("" = it did not): payloads that
	// needed a refused column are dead letters.
	EvolveError string
	plan        *pqPlan // the Parquet schema of the batch's files
	base        int64   // offset of vals[0]
	vals        []typed.Value
	errs        []string // per record: why its payload is not typed ("" = typed)
	// strict: a member without a column is an error (infer); otherwise
	// it stays in value only (schema: undeclared members).
	strict bool
	// eventTimes are the records' event times (unix micros; noEventTime
	// for none), when the table has an event_time column; byEventTime
	// says its partition spec uses it.
	eventTimes  []int64
	byEventTime bool
}

// noEventTime marks a record without an event time.
const noEventTime = math.MinInt64

// Err is why the payload of the record at offset off is not typed, or "".
func (s *Shaped) Err(off int64) string {
	if s == nil || off < s.base || off-s.base >= int64(len(s.errs)) {
		return ""
	}
	return s.errs[off-s.base]
}

// DeadLetters returns recs' records whose payloads are not typed, with why.
func (s *Shaped) DeadLetters(recs []*tributary.Record) []DeadLetter {
	var out []DeadLetter
	for _, r := range recs {
		if e := s.Err(r.Offset); e != "" {
			out = append(out, DeadLetter{Record: r, Error: e, SchemaVersion: int32(s.Schema.ID)})
		}
	}
	return out
}

// Shape decodes the payloads of recs (consecutive offsets of one
// partition) for a stream in a typed mode, adds the columns their new
// fields need to the table (see the invariants above) and decides for
// each payload whether it is typed.
func (c *Catalog) Shape(ctx context.Context, stream string, pol typed.Policy, recs []*tributary.Record) (*Shaped, error) {
	if len(recs) == 0 {
		return nil, fmt.Errorf("shape %s: no records", stream)
	}
	// The table as the uplink's Marks just reloaded it.
	t, err := c.lastLoaded(ctx, stream)
	if err != nil {
		return nil, err
	}
	sh := decodeFor(pol, recs)
	var plan func(sch *iceberg.Schema) []typed.Addition
	switch pol.Mode {
	case typed.Declared:
		// The table gets the declared columns it lacks (Diff's additions:
		// its refusals are config check's to report, and a payload that
		// does not fit a column the table keeps is a dead letter).
		plan = func(sch *iceberg.Schema) []typed.Addition {
			adds, _ := typed.Diff(typedRoot(sch), pol.Columns)
			return adds
		}
	default:
		opts := inferOptions(pol)
		plan = func(sch *iceberg.Schema) []typed.Addition {
			s := typed.NewSchema(typedRoot(sch), opts)
			for i, v := range sh.vals {
				if sh.errs[i] == "" {
					_ = s.Extend(v) // a conflict is decided by Check, against the committed schema
				}
			}
			return s.Additions()
		}
	}
	if pol.EventTime != "" {
		columns := plan
		plan = func(sch *iceberg.Schema) []typed.Addition {
			adds := columns(sch)
			if _, ok := sch.FindFieldByName(ColEventTime); !ok {
				adds = append(adds, typed.Addition{Path: []string{ColEventTime}, Type: &typed.Type{Kind: typed.Timestamp}})
			}
			return adds
		}
	}
	t, added, err := c.evolveTyped(ctx, stream, t, sh, plan)
	if err != nil {
		return nil, err
	}
	sh.Added = added
	if pol.PartitionByEventTime {
		if t, err = c.partitionByEventTime(ctx, stream, t, sh); err != nil {
			return nil, err
		}
	}
	if err := sh.settle(t, pol); err != nil {
		return nil, fmt.Errorf("shape %s: %w", stream, err)
	}
	return sh, nil
}

// decodeFor decodes the payloads of recs for policy pol: in schema mode
// a payload must also satisfy the declared schema.
func decodeFor(pol typed.Policy, recs []*tributary.Record) *Shaped {
	sh := decodeBatch(recs)
	if pol.Mode == typed.Declared {
		for i, v := range sh.vals {
			if sh.errs[i] == "" {
				if err := typed.Validate(v, pol.Columns); err != nil {
					sh.errs[i], sh.vals[i] = err.Error(), typed.Value{}
				}
			}
		}
	} else {
		sh.strict = true
	}
	return sh
}

func inferOptions(pol typed.Policy) typed.Options {
	return typed.Options{Timestamps: pol.Timestamps, MaxColumns: pol.MaxColumns, Longs: pol.Longs, Reserved: envelopeNames}
}

// settle decides, against t's schema and spec (the table the batch's
// files are written to), which payloads are typed, their event times and
// how the files are cut.
func (sh *Shaped) settle(t *table.Table, pol typed.Policy) error {
	if err := sh.check(t.Schema()); err != nil {
		return err
	}
	if _, ok := t.Schema().FindFieldByName(ColEventTime); ok && pol.EventTime != "" {
		sh.eventTimes = make([]int64, len(sh.vals))
		for i, v := range sh.vals {
			sh.eventTimes[i] = noEventTime
			if sh.errs[i] == "" {
				if us, ok := typed.ParseTime(member(v, pol.EventTime)); ok {
					sh.eventTimes[i] = us
				}
			}
		}
	}
	sh.byEventTime = PartitionSource(t.Spec()) != FieldTimestamp
	return nil
}

// Preshape is Shape that changes nothing, for the uplink's continuous
// encoding (uplink/preencode.go): it shapes recs (consecutive offsets of
// one partition) against the stream's table as last loaded and returns the
// Shaped of recs[:n], the longest prefix whose every payload is typed under
// that table's schema and spec as they are: no column to add (infer), no
// declared column missing (schema), no event_time column or event-time
// spec still to make, no dead letter. sh is nil when n is 0 (the first
// record needs the table to change, or is a dead letter).
//
// A pass's Shape of a batch that starts with recs[:n] decides the same for
// these records (typed, with the same values and event times: functions
// of their payloads, the policy and the schema) whenever its Schema is
// the same (SameSchema): the proof the uplink checks before it uses a
// file pre-encoded from this Shaped.
func (c *Catalog) Preshape(ctx context.Context, stream string, pol typed.Policy, recs []*tributary.Record) (sh *Shaped, n int, err error) {
	if len(recs) == 0 {
		return nil, 0, nil
	}
	t, err := c.lastLoaded(ctx, stream)
	if err != nil {
		return nil, 0, err
	}
	sch := t.Schema()
	if et, ok := sch.FindFieldByName(ColEventTime); pol.EventTime != "" && !ok ||
		pol.PartitionByEventTime && (!ok || PartitionSource(t.Spec()) != et.ID) {
		return nil, 0, nil
	}
	sh = decodeFor(pol, recs)
	n = len(recs)
	if pol.Mode == typed.Declared {
		if adds, _ := typed.Diff(typedRoot(sch), pol.Columns); len(adds) > 0 {
			return nil, 0, nil
		}
	} else {
		// Stop before the first payload that would add a column: the
		// schema s grows only by additions (its fields are the table's
		// until then, so nothing is widened either). Check (strict, in
		// settle) refuses such a payload too today; this keeps the rule
		// whatever Check lets through.
		s := typed.NewSchema(typedRoot(sch), inferOptions(pol))
		for i, v := range sh.vals {
			if sh.errs[i] != "" {
				n = i
				break
			}
			cols := s.Columns()
			if s.Extend(v) != nil || s.Columns() != cols {
				n = i
				break
			}
		}
	}
	if err := sh.settle(t, pol); err != nil {
		return nil, 0, fmt.Errorf("preshape %s: %w", stream, err)
	}
	for i := range n {
		if sh.errs[i] != "" {
			n = i
			break
		}
	}
	if n == 0 {
		return nil, 0, nil
	}
	sh.vals, sh.errs = sh.vals[:n], sh.errs[:n]
	if sh.eventTimes != nil {
		sh.eventTimes = sh.eventTimes[:n]
	}
	return sh, n, nil
}

// SameSchema says whether a and b are the same schema: the same id and the
// same fields (names, types, field ids), so files written with either have
// the same Parquet schema.
func SameSchema(a, b *iceberg.Schema) bool {
	return a != nil && b != nil && a.ID == b.ID && a.Equals(b)
}

// Typed says whether the record at offset off has typed columns (its
// payload is typed), and its event time (noEventTime: none).
func (sh *Shaped) Typed(off int64) (ok bool, eventTime int64) {
	if off < sh.base || off-sh.base >= int64(len(sh.errs)) {
		return false, noEventTime
	}
	return sh.errs[off-sh.base] == "", sh.eventTime(off)
}

// Bucket is the partition bucket of g that r falls in as CutRuns cuts the
// files: of its ingest timestamp, or of its event time when the table is
// partitioned by it (records without one have their own). r must be one
// of sh's records.
func (sh *Shaped) Bucket(g Granularity, r *tributary.Record) int64 {
	if !sh.byEventTime || sh.eventTimes == nil {
		return int64(g.Bucket(r.Timestamp))
	}
	if us := sh.eventTimes[r.Offset-sh.base]; us != noEventTime {
		return int64(g.Bucket(us))
	}
	return noEventTime
}

// partitionByEventTime makes t's partition spec the day or hour (its
// granularity) of the event_time column, replacing the ingest timestamp's,
// unless it is already; evolveTable's loop. Files written before keep their
// old spec (Iceberg partition evolution). A spec update the table refuses
// (not a conflict) leaves the spec as it is, said in sh.EvolveError: the
// line goes on.
func (c *Catalog) partitionByEventTime(ctx context.Context, stream string, t *table.Table, sh *Shaped) (*table.Table, error) {
	var lastErr error
	for attempt := 1; attempt <= MaxCommitAttempts; attempt++ {
		et, ok := t.Schema().FindFieldByName(ColEventTime)
		if !ok || PartitionSource(t.Spec()) == et.ID {
			return t, nil
		}
		g, err := GranularityOf(t.Spec())
		if err != nil {
			sh.EvolveError = fmt.Sprintf("partition %s by event time: %v", stream, err)
			return t, nil
		}
		tx := t.NewTransaction()
		us := tx.UpdateSpec(true)
		spec := t.Spec()
		for _, pf := range spec.Fields() {
			us.RemoveField(pf.Name)
		}
		var tr iceberg.Transform = iceberg.DayTransform{}
		if g == GranularityHour {
			tr = iceberg.HourTransform{}
		}
		us.AddField(ColEventTime, tr, ColEventTime+"_"+g.String())
		if err := us.Commit(); err != nil {
			sh.EvolveError = fmt.Sprintf("partition %s by event time: %v", stream, err)
			return t, nil
		}
		nt, err := tx.Commit(ctx)
		if err == nil {
			c.remember(stream, nt)
			t = nt
			continue
		}
		lastErr = err
		if err := retryPause(ctx, attempt); err != nil {
			return nil, fmt.Errorf("partition %s by event time: %w", stream, err)
		}
		if t, err = c.LoadTable(ctx, stream); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("partition %s by event time: giving up after %d attempts: %w", stream, MaxCommitAttempts, lastErr)
}

// CutRuns cuts recs (a run of the records sh was made from) as the
// table's files must be cut: at the buckets of g of the ingest timestamp
// (CutRuns), or of the event time when the table is partitioned by it
// (records without one apart).
func (sh *Shaped) CutRuns(g Granularity, recs []*tributary.Record) [][]*tributary.Record {
	return cutRuns(recs, func(r *tributary.Record) int64 { return sh.Bucket(g, r) })
}

// decodeBatch decodes the payloads of recs.
func decodeBatch(recs []*tributary.Record) *Shaped {
	sh := &Shaped{base: recs[0].Offset, vals: make([]typed.Value, len(recs)), errs: make([]string, len(recs))}
	for i, r := range recs {
		v, err := typed.Parse(r.Value)
		if err != nil {
			sh.errs[i] = err.Error()
			continue
		}
		sh.vals[i] = v
	}
	return sh
}

// check decides, for each decoded payload, whether it fits the typed
// columns of sch, and makes sch the schema the batch is written with.
func (sh *Shaped) check(sch *iceberg.Schema) error {
	root := typedRoot(sch)
	for i := range sh.vals {
		if sh.errs[i] == "" {
			if err := typed.Check(sh.vals[i], root, envelopeNames, sh.strict); err != nil {
				sh.errs[i] = err.Error()
				if sh.EvolveError != "" {
					sh.errs[i] += " (" + sh.EvolveError + ")"
				}
				sh.vals[i] = typed.Value{}
			}
		}
	}
	sh.Schema = sch
	var err error
	sh.plan, err = newPlan(sch)
	return err
}

// SchemaChanges compares a stream's table with the columns a schema file
// declares: the fields the node will add, and the changes it cannot make
// (typed.Diff). A stream without a table has only additions.
func (c *Catalog) SchemaChanges(ctx context.Context, stream string, declared *typed.Type) ([]typed.Addition, []string, error) {
	t, err := c.LoadTable(ctx, stream)
	if errors.Is(err, ErrNoSuchStream) {
		adds, _ := typed.Diff(&typed.Type{Kind: typed.Struct}, declared)
		return adds, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	adds, refused := typed.Diff(typedRoot(t.Schema()), declared)
	return adds, refused, nil
}

// markTyped records in typedRows the offsets of recs (decoded from b, in
// its row order) whose row in b has a value in a typed column, and in
// eventTimes their event_time values.
func markTyped(b arrow.RecordBatch, recs []*tributary.Record, typedRows map[int64]bool, eventTimes map[int64]int64) {
	for ci, f := range b.Schema().Fields() {
		if f.Name == ColEventTime {
			if col, ok := b.Column(ci).(*array.Timestamp); ok {
				for i, r := range recs {
					if col.IsValid(i) {
						eventTimes[r.Offset] = int64(col.Value(i))
					}
				}
			}
			continue
		}
		if isEnvelope(f.Name) {
			continue
		}
		col := b.Column(ci)
		for i, r := range recs {
			if col.IsValid(i) {
				typedRows[r.Offset] = true
			}
		}
	}
}

// hasTyped reports whether sch has columns beyond the envelope (typed
// columns or event_time).
func hasTyped(sch *iceberg.Schema) bool {
	for _, f := range sch.Fields() {
		if !isEnvelope(f.Name) || f.Name == ColEventTime {
			return true
		}
	}
	return false
}

// evolveTyped adds to t the columns plan finds missing from the table's
// typed columns (inferred from sh's payloads, or declared) and returns the
// table as committed and how many fields were added. It is evolveTable's
// loop: on a conflict it reloads and plans again.
func (c *Catalog) evolveTyped(ctx context.Context, stream string, t *table.Table, sh *Shaped, plan func(sch *iceberg.Schema) []typed.Addition) (*table.Table, int, error) {
	added := 0
	var lastErr error
	for attempt := 1; attempt <= MaxCommitAttempts; attempt++ {
		adds := plan(t.Schema())
		if len(adds) == 0 {
			return t, added, nil
		}
		tx := t.NewTransaction()
		var uopts []table.UpdateSchemaOption
		if nm := t.Metadata().NameMapping(); nm != nil {
			uopts = append(uopts, table.WithNameMapping(nm))
		}
		us := tx.UpdateSchema(true, false, uopts...)
		for _, a := range adds {
			next := 0
			us.AddColumn(a.Path, icebergOf(a.Type, &next), "inferred from payloads", false, nil)
		}
		if err := us.Commit(); err != nil {
			// The update itself is refused (not a conflict): the batch is
			// written with the columns the table has, and the payloads
			// that needed the new ones are dead letters. The line goes on.
			sh.EvolveError = fmt.Sprintf("add columns to %s: %v", stream, err)
			return t, added, nil
		}
		nt, err := tx.Commit(ctx)
		if err == nil {
			c.remember(stream, nt)
			t, added = nt, added+len(adds)
			continue // plan again on what was committed: nothing is left to add
		}
		lastErr = err
		if err := retryPause(ctx, attempt); err != nil {
			return nil, 0, fmt.Errorf("add columns to %s: %w", stream, err)
		}
		if t, err = c.LoadTable(ctx, stream); err != nil {
			return nil, 0, err
		}
	}
	return nil, 0, fmt.Errorf("add columns to %s: giving up after %d attempts: %w", stream, MaxCommitAttempts, lastErr)
}

// eventTime is the event time of the record at offset off, or noEventTime.
func (sh *Shaped) eventTime(off int64) int64 {
	if sh.eventTimes == nil {
		return noEventTime
	}
	return sh.eventTimes[off-sh.base]
}

// member returns the value of obj's member name (Null if absent).
func member(obj typed.Value, name string) typed.Value {
	for _, m := range obj.Members {
		if m.Name == name {
			return m.Value
		}
	}
	return typed.Value{}
}
