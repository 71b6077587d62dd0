package cloudwrite

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/tables"
)

// testAppender is an Appender over a writer of e whose only stream
// "f.t" has cloud partition 3 (epoch 7).
func testAppender(e *env, mod func(*Config)) *Appender {
	return NewAppender(e.writer("s1", mod), func(_ context.Context, stream string) ([]Partition, error) {
		if stream != "f.t" && stream != "f.t"+tables.DLQSuffix {
			return nil, fmt.Errorf("%s: %w", stream, tributary.ErrUnknownStream)
		}
		return []Partition{{Partition: 3, Epoch: 7}}, nil
	})
}

func recs(stream string, n int) []*tributary.Record {
	out := make([]*tributary.Record, n)
	for i := range out {
		out[i] = &tributary.Record{Stream: stream, Value: []byte(fmt.Sprint("v", i)), Source: "http"}
	}
	return out
}

// The write contract over the cloud write path: the appender's partition
// and stamps, refusals that store nothing and never call done.
func TestAppenderContract(t *testing.T) {
	e := newEnv(t, "")
	a := testAppender(e, nil)
	ctx := context.Background()
	rs := recs("f.t", 5)
	if err := a.Append(ctx, &tributary.Write{Records: rs}); err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Partition != 3 || r.Epoch != 7 || r.Offset != int64(i) || r.Node != "s1" || r.Timestamp == 0 {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if err := a.Append(ctx, tributary.WriteTo(3, recs("f.t", 2)...)); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		w    *tributary.Write
		want error
	}{
		"edge partition": {tributary.WriteTo(0, recs("f.t", 1)...), tributary.ErrFenced},
		"unknown stream": {&tributary.Write{Records: recs("f.u", 1)}, tributary.ErrUnknownStream},
		"dead letters":   {&tributary.Write{Records: recs("f.t"+tables.DLQSuffix, 1)}, tributary.ErrUnknownStream},
		"two streams":    {&tributary.Write{Records: append(recs("f.t", 1), recs("f.u", 1)...)}, nil},
		"empty":          {&tributary.Write{}, nil},
	} {
		called := make(chan struct{}, 1)
		tk, err := a.Submit(ctx, c.w, tributary.Durable, func(error) { called <- struct{}{} })
		if err == nil || c.want != nil && !errors.Is(err, c.want) || tk == nil {
			t.Fatalf("%s: %v (ticket %v), want %v", name, err, tk, c.want)
		}
		select {
		case <-called:
			t.Fatalf("%s: done called for a refusal", name)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if tributary.ReasonOf(fmt.Errorf("x: %w", ErrNotWritten)) != tributary.ReasonUnavailable {
		t.Fatal("a write not put is not a retriable unavailable")
	}
	end, _, err := e.st.End(ctx, "f.t", 3)
	if err != nil || end != 7 {
		t.Fatalf("partition end %d, %v: refusals stored something", end, err)
	}
}

// A write After one that was not sequenced is refused with
// ErrPredecessorFailed, in a later object and in the same one.
func TestAppenderAfter(t *testing.T) {
	e := newEnv(t, "")
	fail := make(chan bool, 10)
	a := testAppender(e, func(c *Config) {
		c.FlushInterval = time.Hour
		c.afterPut = func(string) error {
			if <-fail {
				return errors.New("killed")
			}
			return nil
		}
	})
	ctx := context.Background()
	wait := func(t tributary.Ticket, err error, ch chan error) error {
		if err != nil {
			return err
		}
		return <-ch
	}
	// Same object: the whole object fails, both refused.
	c1, c2 := make(chan error, 1), make(chan error, 1)
	t1, err1 := a.Submit(ctx, &tributary.Write{Records: recs("f.t", 1)}, tributary.Durable, func(err error) { c1 <- err })
	t2, err2 := a.Submit(ctx, &tributary.Write{Records: recs("f.t", 1), After: t1}, tributary.Durable, func(err error) { c2 <- err })
	fail <- true
	a.w.Flush()
	if e1, e2 := wait(t1, err1, c1), wait(t2, err2, c2); e1 == nil || e2 == nil {
		t.Fatalf("failed object: %v, %v", e1, e2)
	}
	// A later object: the follower of the failed write is refused, its
	// object sequences the rest.
	c3, c4 := make(chan error, 1), make(chan error, 1)
	t3, err3 := a.Submit(ctx, &tributary.Write{Records: recs("f.t", 1), After: t2}, tributary.Durable, func(err error) { c3 <- err })
	t4, err4 := a.Submit(ctx, &tributary.Write{Records: recs("f.t", 2), After: t3}, tributary.Durable, func(err error) { c4 <- err })
	fail <- false
	a.w.Flush()
	if e3, e4 := wait(t3, err3, c3), wait(t4, err4, c4); !errors.Is(e3, tributary.ErrPredecessorFailed) || !errors.Is(e4, tributary.ErrPredecessorFailed) {
		t.Fatalf("followers of a failed write: %v, %v", e3, e4)
	}
	rs := recs("f.t", 2)
	c5 := make(chan error, 1)
	_, err5 := a.Submit(ctx, &tributary.Write{Records: rs}, tributary.Durable, func(err error) { c5 <- err })
	fail <- false
	a.w.Flush()
	if err := wait(nil, err5, c5); err != nil || rs[0].Offset != 0 {
		t.Fatalf("after the refusals: %v, offset %d", err, rs[0].Offset)
	}
}

// A named producer's resend through the Appender: the records get the
// original offsets (-1 for one older than the last write).
func TestAppenderDedup(t *testing.T) {
	e := newEnv(t, "")
	a := testAppender(e, nil)
	ctx := context.Background()
	write := func(first, last int64, n int) []*tributary.Record {
		rs := recs("f.t", n)
		if err := a.Append(ctx, &tributary.Write{Records: rs, Dedup: &tributary.Dedup{Producer: "p", First: first, Last: last}}); err != nil {
			t.Fatal(err)
		}
		return rs
	}
	write(0, 0, 1)
	write(1, 1, 2)
	if rs := write(1, 1, 2); rs[0].Offset != 1 || rs[1].Offset != 2 {
		t.Fatalf("resend at %d, %d", rs[0].Offset, rs[1].Offset)
	}
	if rs := write(0, 0, 1); rs[0].Offset != -1 {
		t.Fatalf("older resend at %d", rs[0].Offset)
	}
	if _, err := a.Submit(ctx, &tributary.Write{Records: recs("f.t", 1), Dedup: &tributary.Dedup{Producer: "p", First: 2, Last: 1}},
		tributary.Durable, func(error) {}); err == nil {
		t.Fatal("sequence ids backwards accepted")
	}
	if end, _, _ := e.st.End(ctx, "f.t", 3); end != 3 {
		t.Fatalf("end %d", end)
	}
}
