package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tributary-io/tributary/uplink/quarantine"

	"github.com/twmb/franz-go/pkg/kgo"
)

const quarantineUsage = `usage:
  tributary quarantine list   [--data DIR]
  tributary quarantine replay [--data DIR] --kafka HOST:PORT FILE...

A node that finds one of its partitions fenced (another node owns it now),
or that takes over or adopts a partition whose WAL still holds records of
an earlier ownership of its own, moves those records to DIR/quarantine
instead of dropping them. list shows each file: stream, partition,
offsets, record count and why the records were quarantined.
replay produces a file's records again (acks=all, idempotent) to the same
stream through the Kafka listener of any edge node, with their keys,
values and headers; they get new offsets there (the new owner may hold some
of them already, so a replay can duplicate, never lose). A replayed file is
renamed to FILE.replayed.
`

func cmdQuarantine(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		fmt.Fprint(stderr, quarantineUsage)
		return 2
	}
	fs := flag.NewFlagSet("quarantine "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./data", "the node's data directory")
	broker := fs.String("kafka", "", "replay: an edge node's Kafka listener host:port")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	dir := filepath.Join(*data, "quarantine")
	if args[0] == "list" {
		files, _ := filepath.Glob(filepath.Join(dir, "*"+quarantine.FileSuffix))
		sort.Strings(files)
		if len(files) == 0 {
			fmt.Fprintf(stdout, "no quarantined records in %s\n", dir)
			return 0
		}
		for _, f := range files {
			recs, reason, err := quarantine.ReadReason(f)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
			if len(recs) == 0 {
				continue
			}
			first, last := recs[0], recs[len(recs)-1]
			fmt.Fprintf(stdout, "%s\n  stream %s partition %d offsets %d-%d (%d records) epoch %d accepted %s .. %s\n",
				f, first.Stream, first.Partition, first.Offset, last.Offset, len(recs), first.Epoch,
				time.UnixMicro(first.Timestamp).UTC().Format(time.RFC3339), time.UnixMicro(last.Timestamp).UTC().Format(time.RFC3339))
			if reason != "" {
				fmt.Fprintf(stdout, "  reason: %s\n", reason)
			}
		}
		return 0
	}
	if *broker == "" || fs.NArg() == 0 {
		fmt.Fprint(stderr, quarantineUsage)
		return 2
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(*broker), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ClientID("tributary-quarantine-replay"),
		kgo.AllowAutoTopicCreation()) // the node creates the stream if its catalog lacks it (as far as its auto-create policy lets it)
	if err != nil {
		fmt.Fprintln(stderr, "tributary quarantine:", err)
		return 1
	}
	defer cl.Close()
	for _, f := range fs.Args() {
		if !strings.HasSuffix(f, quarantine.FileSuffix) {
			f = filepath.Join(dir, f)
		}
		recs, err := quarantine.Read(f)
		if err != nil {
			fmt.Fprintln(stderr, "tributary quarantine:", err)
			return 1
		}
		batch := make([]*kgo.Record, len(recs))
		for i, r := range recs {
			kr := &kgo.Record{Topic: r.Stream, Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
			}
			batch[i] = kr
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err = cl.ProduceSync(ctx, batch...).FirstErr()
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "tributary quarantine: replay %s: %v (the file is kept; replaying it again may duplicate what was produced)\n", f, err)
			return 1
		}
		if err := os.Rename(f, f+".replayed"); err != nil {
			fmt.Fprintln(stderr, "tributary quarantine:", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: %d records replayed\n", f, len(recs))
	}
	return 0
}
