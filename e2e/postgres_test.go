package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/internal/testkit"
)

// startPostgres runs a throwaway PostgreSQL server (testkit.Postgres) and
// returns its DSN.
func startPostgres(t *testing.T) string { return testkit.Postgres(t) }

func pgEdgeConfig(t *testing.T, dir, dsn string) string {
	t.Helper()
	return edgeConfig(t, dir, "pg-edge", fmt.Sprintf(`catalog:
  uri: %[2]s
  warehouse: file://%[1]s/warehouse
catalog_addr: 127.0.0.1:0
`, dir, dsn))
}

func readTablePostgres(t *testing.T, dsn, stream string) []*tributary.Record {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cat, err := sqlcat.NewCatalog("tributary", db, sqlcat.Postgres, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns, name, _ := strings.Cut(stream, ".")
	tbl, err := cat.LoadTable(context.Background(), table.Identifier{ns, name})
	if err != nil {
		t.Fatal(err)
	}
	return scanAll(t, tbl)
}

// TestPostgresCatalog: the round trip and kill -9 rounds with the catalog
// on a real PostgreSQL server; the node also serves that catalog over REST.
func TestPostgresCatalog(t *testing.T) {
	dsn := startPostgres(t)
	t.Run("round-trip", func(t *testing.T) {
		dir := t.TempDir()
		cfg := pgEdgeConfig(t, dir, dsn)
		roundTrip(t, func() *proc { return startEdge(t, dir, cfg) },
			func() []*tributary.Record { return readTablePostgres(t, dsn, "factory.telemetry") })
	})
	t.Run("rest", func(t *testing.T) {
		// The node serves its Postgres-backed catalog over the Iceberg REST
		// protocol; iceberg-go's REST client reads the rows through it.
		dir := t.TempDir()
		cfg := pgEdgeConfig(t, dir, createDatabase(t, dsn, "restcat"))
		p := startEdge(t, dir, cfg)
		ctx := context.Background()
		cl, err := mqttClient(ctx, p.MQTT, "pg-rest")
		if err != nil {
			t.Fatal(err)
		}
		l := newLedger()
		if _, err := publishN(ctx, cl, l, "pg-rest", 0, 50); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "rows committed", func() bool { return walDrained(t, p) })
		rows := readTableREST(t, p.Catalog, "factory.telemetry")
		checkRows(t, l, rows)
		if len(rows) != 50 {
			t.Fatalf("%d rows through REST over Postgres, want 50", len(rows))
		}
		p.stop()
	})
	t.Run("consume", func(t *testing.T) {
		// The cloud Kafka server keeps committed group offsets in the
		// Postgres catalog database: a consumer group that comes back
		// (after a restart of the node) continues after its commit.
		dir := t.TempDir()
		db := createDatabase(t, dsn, "consumecat")
		cfg := pgEdgeConfig(t, dir, db)
		raw, _ := os.ReadFile(cfg)
		os.WriteFile(cfg, append(raw, []byte("cloud_kafka_addr: 127.0.0.1:0\n")...), 0o644)
		p := startEdge(t, dir, cfg)
		ctx := context.Background()
		cl, err := mqttClient(ctx, p.MQTT, "pg-consume")
		if err != nil {
			t.Fatal(err)
		}
		l := newLedger()
		if _, err := publishN(ctx, cl, l, "pg-consume", 0, 40); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "rows committed", func() bool { return walDrained(t, p) })
		consume := func(addr string, n int) []int64 {
			t.Helper()
			kc, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("g-pg"), kgo.ConsumeTopics("factory.telemetry"),
				kgo.DisableAutoCommit())
			if err != nil {
				t.Fatal(err)
			}
			defer kc.Close()
			var offs []int64
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for len(offs) < n && pctx.Err() == nil {
				fs := kc.PollFetches(pctx)
				fs.EachRecord(func(r *kgo.Record) { offs = append(offs, r.Offset) })
			}
			if err := kc.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatal(err)
			}
			return offs
		}
		first := consume(p.CloudKafka, 40)
		if len(first) != 40 || first[0] != 0 || first[39] != 39 {
			t.Fatalf("first consumer read offsets %v", first)
		}
		p.stop()
		p = startEdge(t, dir, cfg)
		cl, err = mqttClient(ctx, p.MQTT, "pg-consume")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := publishN(ctx, cl, l, "pg-consume", 40, 10); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "rows committed", func() bool { return walDrained(t, p) })
		// The group is 10 records behind: /metrics says so.
		if v, _ := scrapeMetrics(t, p); v["tributary_consumer_group_lag"] != 10 {
			t.Fatalf("tributary_consumer_group_lag = %v, want 10", v["tributary_consumer_group_lag"])
		}
		second := consume(p.CloudKafka, 10)
		if len(second) != 10 || second[0] != 40 {
			t.Fatalf("after restart the group read offsets %v, want 40..49", second)
		}
		sdb, err := sql.Open("pgx", db)
		if err != nil {
			t.Fatal(err)
		}
		defer sdb.Close()
		var committed int64
		if err := sdb.QueryRow(`SELECT committed_offset FROM tributary_group_offsets WHERE group_id = 'g-pg'`).Scan(&committed); err != nil || committed != 50 {
			t.Fatalf("committed offset in Postgres: %d %v, want 50", committed, err)
		}
		p.stop()
	})
	t.Run("crash", func(t *testing.T) {
		dir := t.TempDir()
		dsn2 := createDatabase(t, dsn, "crash") // a fresh catalog
		cfg := pgEdgeConfig(t, dir, dsn2)
		crashRounds(t, 3, func() *proc { return startEdge(t, dir, cfg) },
			func() []*tributary.Record { return readTablePostgres(t, dsn2, "factory.telemetry") })
	})
}

// createDatabase creates a database on the server of dsn and returns its DSN.
func createDatabase(t *testing.T, dsn, name string) string {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(dsn, "/postgres?", "/"+name+"?", 1)
}
