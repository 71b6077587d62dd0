package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary-io/tributary/grpcapi/pb"
	"github.com/tributary-io/tributary/grpcapi/pb/pbconnect"
)

// h2c is an HTTP client that speaks unencrypted HTTP/2 only, as a gRPC
// client without TLS does.
func h2c() *http.Client {
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// grpcResult is one record's answer with its request's id.
type grpcResult struct {
	req uint64
	*pb.ProduceResult
}

// grpcProduce sends values on one Produce call of c, one record per
// request and each answer read before the next request when lockstep,
// else in requests of 50 records all sent first; it returns every
// record's result in order.
func grpcProduce(t *testing.T, c pbconnect.ProduceServiceClient, stream string, values [][]byte, lockstep bool) []grpcResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := c.Produce(ctx)
	var out []grpcResult
	answers := 0
	recv := func() {
		r, err := st.Receive()
		if err != nil {
			t.Fatalf("produce receive %d: %v", answers, err)
		}
		if r.Id != uint64(answers) || r.Error != nil {
			t.Fatalf("answer %d: %v", answers, r)
		}
		answers++
		for _, res := range r.Results {
			out = append(out, grpcResult{r.Id, res})
		}
	}
	per := 50
	if lockstep {
		per = 1
	}
	requests := 0
	for i := 0; i < len(values); i += per {
		req := &pb.ProduceRequest{Id: uint64(requests)}
		if i == 0 {
			req.Stream = stream
		}
		for j := i; j < min(i+per, len(values)); j++ {
			req.Records = append(req.Records, &pb.ProduceRecord{Value: values[j], Key: []byte(fmt.Sprint("k", j)),
				Headers: []*pb.Header{{Key: "i", Value: []byte(fmt.Sprint(j))}}})
		}
		if err := st.Send(req); err != nil {
			t.Fatalf("produce send %d: %v", i, err)
		}
		requests++
		if lockstep {
			recv()
		}
	}
	if err := st.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	for answers < requests {
		recv()
	}
	if r, err := st.Receive(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of the call: %v %v (want a clean end after the last answer)", r, err)
	}
	st.CloseResponse()
	if len(out) != len(values) {
		t.Fatalf("%d results for %d records", len(out), len(values))
	}
	return out
}

// TestGRPC: a client generated from grpcapi/pb/streams.proto speaking
// gRPC over HTTP/2 (h2c) and a Connect JSON client produce at the edge on
// http_addr, each record answered in order with its offset once durable;
// the cloud's gRPC Fetch (both protocols) reads the same bytes at the same
// offsets as the table and the cloud Kafka server, and tails new commits;
// bad input is answered with the field and writes nothing.
func TestGRPC(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const stream = "rpc.events"
	edge := "http://" + p.HTTP
	grpcProd := pbconnect.NewProduceServiceClient(h2c(), edge, connect.WithGRPC())
	jsonProd := pbconnect.NewProduceServiceClient(h2c(), edge, connect.WithProtoJSON())
	var values [][]byte
	for i := range 300 {
		values = append(values, []byte(fmt.Sprintf("grpc-%d|\x00\xff%c", i, byte(i))))
	}
	got := grpcProduce(t, grpcProd, stream, values[:200], false)
	got = append(got, grpcProduce(t, jsonProd, stream, values[200:250], true)...)
	got = append(got, grpcProduce(t, grpcProd, stream, values[250:], true)...)
	for i, r := range got {
		if r.Error != nil || r.Offset != int64(i) || r.Partition != 0 || r.TimestampUs == 0 {
			t.Fatalf("answer %d: %v", i, r)
		}
	}
	waitRows(t, dir, stream, len(values))
	rows := tableByPartition(t, dir, stream)[0]
	for i, row := range rows {
		if !bytes.Equal(row.Value, values[i]) || string(row.Key) != fmt.Sprint("k", i%200) && string(row.Key) != fmt.Sprint("k", i-200) && string(row.Key) != fmt.Sprint("k", i-250) ||
			row.Source != "grpc" || len(row.Headers) != 1 {
			t.Fatalf("row %d: %q %q %s %v", i, row.Key, row.Value, row.Source, row.Headers)
		}
	}
	// Fetch over gRPC and Connect JSON: the table's bytes at its offsets.
	cloud := "http://" + p.CloudHTTP
	for name, c := range map[string]pbconnect.ReadServiceClient{
		"grpc": pbconnect.NewReadServiceClient(h2c(), cloud, connect.WithGRPC()),
		"json": pbconnect.NewReadServiceClient(h2c(), cloud, connect.WithProtoJSON()),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		st, err := c.Fetch(ctx, connect.NewRequest(&pb.FetchRequest{Stream: stream, Offset: 0, MaxRecords: 64}))
		if err != nil {
			t.Fatal(err)
		}
		next := int64(0)
		for st.Receive() {
			for _, r := range st.Msg().Records {
				row := rows[r.Offset]
				if r.Offset != next || !bytes.Equal(r.Value, row.Value) || !bytes.Equal(r.Key, row.Key) || r.TimestampUs != row.Timestamp {
					t.Fatalf("%s fetch offset %d (want %d): %q, table %q", name, r.Offset, next, r.Value, row.Value)
				}
				next++
			}
		}
		if err := st.Err(); err != nil || next != int64(len(rows)) {
			t.Fatalf("%s fetch: %v after %d of %d", name, err, next, len(rows))
		}
		cancel()
	}
	// The cloud Kafka server has the same bytes at the same offsets.
	kc, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumeTopics(stream), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kctx, kcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer kcancel()
	for seen := 0; seen < len(rows) && kctx.Err() == nil; {
		kc.PollFetches(kctx).EachRecord(func(r *kgo.Record) {
			if !bytes.Equal(r.Value, values[r.Offset]) {
				t.Fatalf("kafka offset %d: %q", r.Offset, r.Value)
			}
			seen++
		})
	}
	// Follow: a Fetch at the end gets the next commit.
	rc := pbconnect.NewReadServiceClient(h2c(), cloud, connect.WithGRPC())
	fctx, fcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer fcancel()
	fst, err := rc.Fetch(fctx, connect.NewRequest(&pb.FetchRequest{Stream: stream, Offset: -2, Follow: true}))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st := grpcProd.Produce(ctx)
		st.Send(&pb.ProduceRequest{Stream: stream, Records: []*pb.ProduceRecord{{Value: []byte("tail")}}})
		st.CloseRequest()
		st.Receive()
		st.CloseResponse()
	}()
	if !fst.Receive() || len(fst.Msg().Records) != 1 || fst.Msg().Records[0].Offset != 300 || string(fst.Msg().Records[0].Value) != "tail" {
		t.Fatalf("follow: %v %v", fst.Err(), fst.Msg())
	}
	fcancel()

	// Bad input: each refused request or record is answered with the
	// field; the call goes on; nothing of it is written.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := grpcProd.Produce(ctx)
	neg := int32(-1)
	other := int32(5)
	one := func(v []byte) []*pb.ProduceRecord { return []*pb.ProduceRecord{{Value: v}} }
	bad := []*pb.ProduceRequest{
		{Records: one([]byte("no stream"))},
		{Stream: "nodot", Records: one([]byte("x"))},
		{Stream: stream, Partition: &neg, Records: one([]byte("x"))},
		{Stream: stream},
		{Stream: stream, Records: []*pb.ProduceRecord{{Value: []byte("good")}, {Value: bytes.Repeat([]byte("x"), 1<<20+1)}}},
		{Stream: stream, Partition: &other, Records: one([]byte("x"))},
		{Stream: stream, Records: one(bytes.Repeat([]byte("y"), 9<<20))}, // over the request cap: ends the call
	}
	for i, r := range bad {
		r.Id = uint64(i)
		if err := st.Send(r); err != nil {
			break
		}
	}
	st.CloseRequest()
	var answers []*pb.ProduceResponse
	var end error
	for {
		r, err := st.Receive()
		if err != nil {
			end = err
			break
		}
		answers = append(answers, r)
	}
	st.CloseResponse()
	code := func(e *pb.Error) string {
		if e == nil {
			return ""
		}
		return e.Code
	}
	if len(answers) != 6 || connect.CodeOf(end) != connect.CodeResourceExhausted {
		t.Fatalf("answers to bad input: %v, end %v", answers, end)
	}
	for i, want := range []string{"invalid_argument", "invalid_argument", "invalid_argument"} {
		if len(answers[i].Results) != 1 || code(answers[i].Results[0].Error) != want {
			t.Errorf("answer %d: %v, want %s", i, answers[i], want)
		}
	}
	if code(answers[3].Error) != "invalid_argument" || len(answers[3].Results) != 0 {
		t.Errorf("request without records: %v", answers[3])
	}
	if r := answers[4].Results; len(r) != 2 || r[0].Error != nil || r[0].Offset != 301 || code(r[1].Error) != "invalid_argument" {
		t.Errorf("good and oversize record: %v", answers[4])
	}
	if r := answers[5].Results; len(r) != 1 || code(r[0].Error) != "unavailable" {
		t.Errorf("a partition this node does not write: %v", answers[5])
	}
	waitRows(t, dir, stream, 302)
	if rows := tableByPartition(t, dir, stream)[0]; len(rows) != 302 || string(rows[301].Value) != "good" {
		t.Fatalf("table after the bad input: %d rows", len(rows))
	}
	for _, c := range []struct {
		req  *pb.FetchRequest
		code connect.Code
	}{
		{&pb.FetchRequest{Stream: "rpc.none"}, connect.CodeNotFound},
		{&pb.FetchRequest{Stream: "bad"}, connect.CodeInvalidArgument},
		{&pb.FetchRequest{Stream: stream, Offset: -7}, connect.CodeInvalidArgument},
		{&pb.FetchRequest{Stream: stream, Offset: 100000}, connect.CodeOutOfRange},
		{&pb.FetchRequest{Stream: stream, Partition: 3}, connect.CodeNotFound},
	} {
		fs, err := rc.Fetch(ctx, connect.NewRequest(c.req))
		if err == nil {
			for fs.Receive() {
			}
			err = fs.Err()
		}
		if connect.CodeOf(err) != c.code {
			t.Errorf("fetch %v: %v, want %v", c.req, err, c.code)
		}
	}
}

// TestGRPCHTTPOverTLS: with TLS on every listener, gRPC negotiates HTTP/2
// by ALPN on both HTTP ports (Produce at the edge, Fetch in the cloud) and
// HTTP produce and reads work over https.
func TestGRPCHTTPOverTLS(t *testing.T) {
	dir := t.TempDir()
	p, _ := startSecureDev(t, dir)
	const stream = "tls.rpc"
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: p.TLS.Clone(), ForceAttemptHTTP2: true}}
	got := grpcProduce(t, pbconnect.NewProduceServiceClient(c, "https://"+p.HTTP, connect.WithGRPC()), stream, [][]byte{[]byte("a"), []byte("b")}, false)
	if got[1].Error != nil || got[1].Offset != 1 {
		t.Fatalf("produce over TLS: %v", got)
	}
	resp, err := c.Post("https://"+p.HTTP+"/v3/clusters/tributary/topics/"+stream+"/records", "application/json",
		bytes.NewReader([]byte(`{"value":{"type":"STRING","data":"c"}}`)))
	if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("https produce: %v %v", err, resp)
	}
	resp.Body.Close()
	waitRows(t, dir, stream, 3)
	rc := pbconnect.NewReadServiceClient(c, "https://"+p.CloudHTTP, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rc.Fetch(ctx, connect.NewRequest(&pb.FetchRequest{Stream: stream}))
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for st.Receive() {
		for _, r := range st.Msg().Records {
			vals = append(vals, string(r.Value))
		}
	}
	if st.Err() != nil || fmt.Sprint(vals) != "[a b c]" {
		t.Fatalf("fetch over TLS: %v %v", st.Err(), vals)
	}
}

// TestGRPCSlowReaders: ten following Fetch calls over 24 MiB of records
// that never receive hold the node's memory within bounds (HTTP/2 flow
// control stops each at one response), and the server still answers.
func TestGRPCSlowReaders(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const big = "rpc.big"
	c := pbconnect.NewProduceServiceClient(h2c(), "http://"+p.HTTP, connect.WithGRPC())
	var vals [][]byte
	for range 48 {
		vals = append(vals, bytes.Repeat([]byte("z"), 512<<10))
	}
	grpcProduce(t, c, big, vals, true)
	waitRows(t, dir, big, 48)
	rss0, _, _ := readRSS(p.cmd.Process.Pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc := pbconnect.NewReadServiceClient(h2c(), "http://"+p.CloudHTTP, connect.WithGRPC())
	for range 10 {
		st, err := rc.Fetch(ctx, connect.NewRequest(&pb.FetchRequest{Stream: big, MaxBytes: 4 << 20, Follow: true}))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
	}
	time.Sleep(3 * time.Second)
	rss1, _, _ := readRSS(p.cmd.Process.Pid)
	t.Logf("node RSS %d MiB before, %d MiB with 10 Fetch calls that do not receive", rss0>>20, rss1>>20)
	if rss1 > wireMemoryBound {
		t.Fatalf("node RSS %d MiB with the slow readers, bound %d MiB", rss1>>20, wireMemoryBound>>20)
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	st, err := rc.Fetch(fctx, connect.NewRequest(&pb.FetchRequest{Stream: big, Offset: 47}))
	if err != nil || !st.Receive() || st.Msg().Records[0].Offset != 47 {
		t.Fatalf("a fetch next to the slow readers: %v %v", err, st.Err())
	}
}
