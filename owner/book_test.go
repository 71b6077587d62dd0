package owner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tributary-io/tributary/uplink/quarantine"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
	"github.com/tributary-io/tributary/wal"
)

// ingestEnv is one node's WAL and book over a shared catalog; publish and
// produce append as the node's ingest does (Own or Writable, then the WAL).
type ingestEnv struct {
	dir string
	wal *wal.WAL
	cat *tables.Catalog
	in  *Book
}

func openCatalog(t *testing.T, dir string) *tables.Catalog {
	t.Helper()
	cat, err := tables.Open(context.Background(), tables.Config{URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

// newIngestEnv opens node id's WAL in dir and a catalog shared by every
// node of the test (in shared).
func newIngestEnv(t *testing.T, id, dir string, cat *tables.Catalog) *ingestEnv {
	t.Helper()
	w, err := wal.Open(wal.Options{Path: filepath.Join(dir, id, "wal.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &ingestEnv{dir: dir, wal: w, cat: cat, in: New(id, w, cat, slog.New(slog.NewTextHandler(io.Discard, nil)))}
}

func (e *ingestEnv) publish(t *testing.T, stream string) *tributary.Record {
	t.Helper()
	r := &tributary.Record{Stream: stream, Topic: "t", Value: []byte("v"), Source: "mqtt"}
	p, epoch, err := e.in.Own(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	r.Partition, r.Epoch, r.Node = p, epoch, e.in.Node()
	if err := e.wal.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{r}}).Err; err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *ingestEnv) produce(stream string, p int32) (*tributary.Record, error) {
	r := &tributary.Record{Stream: stream, Partition: p, Topic: stream, Value: []byte("k"), Source: "kafka"}
	epoch, err := e.in.Writable(context.Background(), stream, p)
	if err != nil {
		return r, err
	}
	r.Epoch, r.Node = epoch, e.in.Node()
	return r, e.wal.Apply(context.Background(), wal.Op{Kind: wal.OpAppend, Records: []*tributary.Record{r}}).Err
}

// TestBookFencedGetsNewPartition: records carry the partition's epoch;
// once fenced out of its partition, the node's next record goes to a new
// partition of its own.
func TestBookFencedGetsNewPartition(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat := openCatalog(t, dir)
	a := newIngestEnv(t, "a", dir, cat)
	r := a.publish(t, "s.x")
	p := r.Partition
	if r.Epoch != 0 || r.Offset != 0 || r.Node != "a" {
		t.Fatalf("first record %+v", r)
	}
	if _, err := cat.TakeOver(ctx, "s.x", p, "a", "b"); err != nil {
		t.Fatal(err)
	}
	// Until the fence is noticed the node keeps its belief (the uplink's
	// commit would be fenced); then it moves.
	if r := a.publish(t, "s.x"); r.Partition != p {
		t.Fatalf("before the fence: partition %d", r.Partition)
	}
	a.in.Fenced("s.x", p)
	r = a.publish(t, "s.x")
	if r.Partition == p || r.Epoch != 0 || r.Offset != 0 {
		t.Fatalf("after the fence: %+v, old partition %d", r, p)
	}
	if _, err := a.produce("s.x", p); !errors.Is(err, ErrNotOwned) || tributary.ReasonOf(err) != tributary.ReasonFenced {
		t.Fatalf("produce to the lost partition: %v", err)
	}
	if got := a.in.Streams()["s.x"]; got != r.Partition {
		t.Fatalf("Streams says %d", got)
	}
}

// TestBookAdopt: a partition taken over elsewhere (TakeOver through the
// catalog) is adopted lazily at the table's mark with its epoch; one being
// taken over here (claim) is refused until adopt.
func TestBookAdopt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat := openCatalog(t, dir)
	a := newIngestEnv(t, "a", dir, cat)
	b := newIngestEnv(t, "b", dir, cat)
	pa := a.publish(t, "s.x").Partition
	pb := b.publish(t, "s.x").Partition
	if _, err := a.produce("s.x", pb); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("produce to b's partition on a: %v", err)
	}
	// The table's mark of b's partition is 7 (b committed 7 records).
	setMark(t, cat, "s.x", pb, 7)
	if _, err := cat.TakeOver(ctx, "s.x", pb, "b", "a"); err != nil {
		t.Fatal(err)
	}
	r, err := a.produce("s.x", pb)
	if err != nil || r.Offset != 7 || r.Epoch != 1 || r.Node != "a" {
		t.Fatalf("lazy adoption: %+v, %v", r, err)
	}
	if got := a.in.Owned()["s.x"]; len(got) != 2 || got[pa] != 0 || got[pb] != 1 {
		t.Fatalf("owned %v", got)
	}
	// MQTT keeps going to a's own partition.
	if r := a.publish(t, "s.x"); r.Partition != pa {
		t.Fatalf("publish went to %d", r.Partition)
	}

	// A take-over in progress here: refused until adopted.
	c := newIngestEnv(t, "c", dir, cat)
	pc := c.publish(t, "s.x").Partition
	release := a.in.Claim("s.x", pc)
	if _, err := cat.TakeOver(ctx, "s.x", pc, "c", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.produce("s.x", pc); !errors.Is(err, ErrAdopting) {
		t.Fatalf("produce during the take-over: %v", err)
	}
	// The copied records (offsets 0-2, epoch 1), then adopt, then release.
	copied := []*tributary.Record{{Stream: "s.x", Partition: pc, Offset: 0, Epoch: 1}, {Stream: "s.x", Partition: pc, Offset: 1, Epoch: 1}, {Stream: "s.x", Partition: pc, Offset: 2, Epoch: 1}}
	if wr := a.wal.Apply(ctx, wal.Op{Kind: wal.OpAppendAt, Records: copied}); wr.Err != nil {
		t.Fatal(wr.Err)
	}
	if err := a.in.Adopt("s.x", pc, 1, 0); err != nil {
		t.Fatal(err)
	}
	release()
	if r, err := a.produce("s.x", pc); err != nil || r.Offset != 3 || r.Epoch != 1 {
		t.Fatalf("after adopt: %+v, %v", r, err)
	}
}

// setMark commits a high-water mark property as a committer would.
func setMark(t *testing.T, cat *tables.Catalog, stream string, p int32, mark int64) {
	t.Helper()
	tb, err := cat.LoadTable(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	tx := tb.NewTransaction()
	if err := tx.SetProperties(map[string]string{tables.PropHighWater + strconv.Itoa(int(p)): strconv.FormatInt(mark, 10)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestBookRestartWithoutCatalog: after a restart with the catalog
// unreachable, a stream is written to the node's own partition (not one it
// had taken over) at the epoch it last wrote; with the catalog, the table
// decides.
func TestBookRestartWithoutCatalog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat := openCatalog(t, dir)
	b := newIngestEnv(t, "b", dir, cat)
	pb := b.publish(t, "s.x").Partition
	a := newIngestEnv(t, "a", dir, cat)
	pa := a.publish(t, "s.x").Partition
	if _, err := cat.TakeOver(ctx, "s.x", pb, "b", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.produce("s.x", pb); err != nil {
		t.Fatal(err)
	}
	a.wal.Close()

	// Restart of a with an unreachable catalog.
	down := openCatalog(t, t.TempDir())
	down.Close()
	a = newIngestEnv(t, "a", dir, down)
	r := a.publish(t, "s.x")
	if r.Partition != pa || r.Epoch != 0 || r.Offset != 1 {
		t.Fatalf("without catalog: %+v, own partition %d", r, pa)
	}
	if got := a.in.Owned()["s.x"]; got[pb] != 1 {
		t.Fatalf("owned without catalog %v", got)
	}
	a.wal.Close()

	// With the catalog: both partitions, epochs from the table.
	a = newIngestEnv(t, "a", dir, cat)
	if r := a.publish(t, "s.x"); r.Partition != pa {
		t.Fatalf("with catalog: %+v", r)
	}
	if r, err := a.produce("s.x", pb); err != nil || r.Epoch != 1 || r.Offset != 1 {
		t.Fatalf("taken-over partition after restart: %+v, %v", r, err)
	}
}

// TestBookClaimDropsStale: a node fenced out of its partition (by the
// data path, before its uplink dropped the records) takes it back later:
// claim moves its stale records to the quarantine, so that the copied ones
// are stored, not skipped as if already present, and the stale ones are
// not lost.
func TestBookClaimDropsStale(t *testing.T) {
	l := losePartition(t)
	ctx, cat, a, p := l.ctx, l.cat, l.a, l.p
	qdir := filepath.Join(l.dir, "quarantine")
	a.in.UseQuarantine(quarantine.New(qdir))
	release := a.in.Claim("s.x", p)
	defer release()
	if _, ok := a.wal.Partition("s.x", p); ok {
		t.Fatal("claim kept the stale records")
	}
	checkQuarantined(t, qdir, "took partition", l.stale...)
	if e, err := cat.TakeOver(ctx, "s.x", p, "b", "a"); err != nil || e != 2 {
		t.Fatalf("take back: %d, %v", e, err)
	}
	copied := []*tributary.Record{{Stream: "s.x", Partition: p, Offset: 0, Epoch: 2, Value: []byte("b0")}, {Stream: "s.x", Partition: p, Offset: 1, Epoch: 2, Value: []byte("b1")}}
	if wr := a.wal.Apply(ctx, wal.Op{Kind: wal.OpAppendAt, Records: copied}); wr.Err != nil || wr.Skipped != 0 {
		t.Fatalf("copy: skipped %d, %v", wr.Skipped, wr.Err)
	}
	if err := a.in.Adopt("s.x", p, 2, 0); err != nil {
		t.Fatal(err)
	}
	release()
	if r, err := a.produce("s.x", p); err != nil || r.Offset != 2 || r.Epoch != 2 {
		t.Fatalf("after taking it back: %+v, %v", r, err)
	}
}

// TestBookTakeOverRecordsStart: the take-over rule records, with the new
// owner and epoch, where the taker's history starts: the end of the copy
// it takes over from, or the table's mark when the old owner committed
// past it. Offsets there and above are the fenced node's to re-admit.
func TestBookTakeOverRecordsStart(t *testing.T) {
	dir := t.TempDir()
	cat := openCatalog(t, dir)
	a, b := newIngestEnv(t, "a", dir, cat), newIngestEnv(t, "b", dir, cat)
	ctx := context.Background()
	a.publish(t, "s.x")
	pb := b.publish(t, "s.x").Partition
	setMark(t, cat, "s.x", pb, 3)
	epoch, won, err := a.in.TakeOver(ctx, "s.x", pb, "b", 5)
	if err != nil || !won || epoch != 1 {
		t.Fatalf("take over: %d %v %v", epoch, won, err)
	}
	if o, start, ok, err := cat.EpochStart(ctx, "s.x", pb); err != nil || !ok || start != 5 || o != (tables.Ownership{Node: "a", Epoch: 1}) {
		t.Fatalf("after the take-over: %v start %d %v, %v", o, start, ok, err)
	}
	setMark(t, cat, "s.x", pb, 9)
	if epoch, won, err = b.in.TakeOver(ctx, "s.x", pb, "a", 4); err != nil || !won || epoch != 2 {
		t.Fatalf("take back: %d %v %v", epoch, won, err)
	}
	if _, start, ok, _ := cat.EpochStart(ctx, "s.x", pb); !ok || start != 9 {
		t.Fatalf("start %d %v after a take-over below the mark, want the mark 9", start, ok)
	}
}
