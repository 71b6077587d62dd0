package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kgo"
)

// httpReport is a delivery report as a client decodes it.
type httpReport struct {
	ErrorCode    int    `json:"error_code"`
	Message      string `json:"message"`
	ClusterID    string `json:"cluster_id"`
	TopicName    string `json:"topic_name"`
	PartitionID  *int32 `json:"partition_id"`
	Offset       *int64 `json:"offset"`
	Timestamp    string `json:"timestamp"`
	Reason       string `json:"reason"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

// decodeReports reads concatenated reports.
func decodeReports(t *testing.T, b []byte) []httpReport {
	t.Helper()
	var out []httpReport
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var r httpReport
		if err := dec.Decode(&r); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("reports: %v in %q", err, b)
		}
		out = append(out, r)
	}
}

// curlProduce posts body with curl (streamed: chunked transfer encoding)
// and returns the HTTP status and the reports.
func curlProduce(t *testing.T, url, body string, streamed bool) (int, []httpReport) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-s", "-S", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@" + f, "-w", "\n%{http_code}", url}
	if streamed {
		args = append(args, "-H", "Transfer-Encoding: chunked")
	}
	out, err := exec.Command("curl", args...).Output()
	if err != nil {
		t.Fatalf("curl: %v: %s", err, out)
	}
	i := bytes.LastIndexByte(out, '\n')
	code, err := strconv.Atoi(string(out[i+1:]))
	if err != nil {
		t.Fatalf("curl status in %q", out)
	}
	return code, decodeReports(t, out[:i])
}

// httpRead is one long-poll read of the cloud HTTP API.
type httpRead struct {
	Records []struct {
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Key       *data  `json:"key"`
		Value     *data  `json:"value"`
		Source    string `json:"source"`
		Headers   []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"headers"`
	} `json:"records"`
	NextOffset    int64 `json:"next_offset"`
	HighWatermark int64 `json:"high_watermark"`
}

type data struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// bytes decodes a BINARY datum.
func (d *data) bytes(t *testing.T) []byte {
	t.Helper()
	if d == nil {
		return nil
	}
	var s string
	if d.Type != "BINARY" || json.Unmarshal(d.Data, &s) != nil {
		t.Fatalf("datum %s %s: want BINARY", d.Type, d.Data)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// TestHTTPProduceRead: curl and Go clients produce at the edge over
// Confluent REST v3 — one record, a streamed body of 300, a Go client
// that waits for each report before sending the next record on the same
// request (reports come while the body is open), and the JSON bodies of
// Confluent's documentation unmodified; each record lands once in the
// table at the offset its report gave, and the cloud's Kafka, Pulsar and
// HTTP reads return the same bytes at the same offsets. Group offsets
// committed over HTTP are what a Kafka client fetches for the group.
func TestHTTPProduceRead(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const stream = "web.orders"
	var clusters struct {
		Data []struct {
			ClusterID string `json:"cluster_id"`
		} `json:"data"`
	}
	if c := getJSON(t, "http://"+p.HTTP+"/v3/clusters", &clusters); c != 200 || len(clusters.Data) != 1 {
		t.Fatalf("GET /v3/clusters: %d %+v", c, clusters)
	}
	url := fmt.Sprintf("http://%s/v3/clusters/%s/topics/%s/records", p.HTTP, clusters.Data[0].ClusterID, stream)
	want := map[int64][]byte{} // offset -> value bytes
	wantKey := map[int64][]byte{}
	took := func(who string, reps []httpReport, values [][]byte, keys [][]byte) {
		t.Helper()
		if len(reps) != len(values) {
			t.Fatalf("%s: %d reports for %d records", who, len(reps), len(values))
		}
		for i, r := range reps {
			if r.ErrorCode != 200 || r.Offset == nil || r.PartitionID == nil || *r.PartitionID != 0 || r.TopicName != stream {
				t.Fatalf("%s: report %d: %+v", who, i, r)
			}
			if _, dup := want[*r.Offset]; dup {
				t.Fatalf("%s: offset %d reported twice", who, *r.Offset)
			}
			if i > 0 && *r.Offset != *reps[i-1].Offset+1 {
				t.Fatalf("%s: report %d at offset %d after %d: not in order", who, i, *r.Offset, *reps[i-1].Offset)
			}
			want[*r.Offset] = values[i]
			if keys != nil {
				wantKey[*r.Offset] = keys[i]
			}
		}
	}
	// 1. curl, one record: its status is the report's.
	code, reps := curlProduce(t, url, `{"key":{"type":"STRING","data":"order-1"},"value":{"type":"JSON","data":{"id":1,"total":9.5}},"headers":[{"name":"trace","value":"dHJhY2UtMQ=="}]}`, false)
	if code != 200 {
		t.Fatalf("curl single: %d %+v", code, reps)
	}
	took("curl single", reps, [][]byte{[]byte(`{"id":1,"total":9.5}`)}, [][]byte{[]byte("order-1")})
	// curl, 300 concatenated records, chunked.
	var body strings.Builder
	var values, keys [][]byte
	for i := range 300 {
		v := []byte(fmt.Sprintf("bin-%d|\x00\x01\xfe%c", i, byte(i)))
		switch i % 3 {
		case 0:
			fmt.Fprintf(&body, `{"key":{"type":"BINARY","data":%q},"value":{"type":"BINARY","data":%q}}`, base64.StdEncoding.EncodeToString([]byte(fmt.Sprint("k", i))), base64.StdEncoding.EncodeToString(v))
			keys = append(keys, []byte(fmt.Sprint("k", i)))
		case 1:
			v = []byte(fmt.Sprintf("text %d é", i))
			fmt.Fprintf(&body, "{\"value\":{\"type\":\"STRING\",\"data\":%q}}\n", v)
			keys = append(keys, nil)
		case 2:
			v = []byte(fmt.Sprintf(`{"n":%d,"tags":["a","b"]}`, i))
			fmt.Fprintf(&body, "  {\"value\": {\"data\": {\"n\": %d, \"tags\": [\"a\", \"b\"]}}}\n", i)
			keys = append(keys, nil)
		}
		values = append(values, v)
	}
	code, reps = curlProduce(t, url, body.String(), true)
	if code != 200 {
		t.Fatalf("curl streamed: %d", code)
	}
	took("curl streamed", reps, values, keys)
	// A Go client on one streamed request: record k+1 is sent only after
	// the report of record k arrived.
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	req.Header.Set("Content-Type", "application/json")
	resp := make(chan *http.Response, 1)
	go func() {
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(resp)
			return
		}
		resp <- r
	}()
	fmt.Fprintf(pw, `{"value":{"type":"STRING","data":"go-0"}}`)
	r := <-resp
	if r == nil {
		t.FailNow()
	}
	dec := json.NewDecoder(r.Body)
	values = nil
	reps = nil
	for i := range 20 {
		var rep httpReport
		if err := dec.Decode(&rep); err != nil {
			t.Fatalf("go client: report %d: %v", i, err)
		}
		reps = append(reps, rep)
		values = append(values, []byte(fmt.Sprint("go-", i)))
		if i < 19 {
			fmt.Fprintf(pw, `{"value":{"type":"STRING","data":"go-%d"}}`, i+1)
		}
	}
	pw.Close()
	r.Body.Close()
	took("go client", reps, values, nil)
	// 2. Confluent's documented bodies, as they are.
	code, reps = curlProduce(t, url, `{
  "partition_id": 0,
  "headers": [
    {"name": "Header-1", "value": "SGVhZGVyLTE="},
    {"name": "Header-2", "value": "SGVhZGVyLTI="}
  ],
  "key": {"type": "BINARY", "data": "Zm9vYmFy"},
  "value": {"type": "JSON", "data": "Bonjour le monde!"},
  "timestamp": "2021-02-05T19:14:42Z"
}`, false)
	if code != 200 {
		t.Fatalf("confluent body: %d %+v", code, reps)
	}
	took("confluent", reps, [][]byte{[]byte(`"Bonjour le monde!"`)}, [][]byte{[]byte("foobar")})
	code, reps = curlProduce(t, url, `{"value": {"type": "JSON", "data": "Hello World!"}}
{"key": {"type": "STRING", "data": "my-key"}, "value": {"type": "STRING", "data": "plain"}}
{"value": {"type": "BINARY", "data": "SGVsbG8gV29ybGQh"}}
{"key": null, "value": {"data": {"foo": "bar"}}}`, true)
	if code != 200 {
		t.Fatalf("confluent stream: %d", code)
	}
	took("confluent stream", reps, [][]byte{[]byte(`"Hello World!"`), []byte("plain"), []byte("Hello World!"), []byte(`{"foo":"bar"}`)},
		[][]byte{nil, []byte("my-key"), nil, nil})
	n := len(want)

	// In the table once each, at the reported offsets.
	waitRows(t, dir, stream, n)
	rows := tableByPartition(t, dir, stream)[0]
	if len(rows) != n {
		t.Fatalf("table holds %d rows, %d were reported", len(rows), n)
	}
	for _, row := range rows {
		if !bytes.Equal(row.Value, want[row.Offset]) || row.Source != "http" {
			t.Fatalf("offset %d: table has %q (source %s), report said %q", row.Offset, row.Value, row.Source, want[row.Offset])
		}
		if k, ok := wantKey[row.Offset]; ok && !bytes.Equal(row.Key, k) {
			t.Fatalf("offset %d: key %q, want %q", row.Offset, row.Key, k)
		}
	}
	if h := rows[0].Headers; len(h) != 1 || h[0].Key != "trace" || string(h[0].Value) != "trace-1" {
		t.Fatalf("headers of offset 0: %+v", h)
	}
	// Kafka, Pulsar and HTTP read the same bytes at the same offsets.
	kc, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumeTopics(stream), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := 0
	for seen < n && ctx.Err() == nil {
		kc.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			row := rows[r.Offset]
			if !bytes.Equal(r.Value, row.Value) || !bytes.Equal(r.Key, row.Key) || (r.Key == nil) != (row.Key == nil) {
				t.Fatalf("kafka offset %d: %q/%q, table %q/%q", r.Offset, r.Key, r.Value, row.Key, row.Value)
			}
			seen++
		})
	}
	if seen != n {
		t.Fatalf("kafka read %d of %d", seen, n)
	}
	pc := pulsarClient(t, p.Pulsar)
	cons := pulsarSubscribe(t, pc, pulsar.ConsumerOptions{Topic: "persistent://tributary/web/orders", SubscriptionName: "http-check",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	got := pulsarConsumeAll(t, "pulsar", rows, []pulsar.Consumer{cons}, n)
	pulsarCheckOnce(t, "pulsar", got, n)
	off := int64(0)
	for off < int64(n) {
		var rd httpRead
		if c := getJSON(t, fmt.Sprintf("http://%s/v1/streams/%s/partitions/0/records?offset=%d&max_records=64", p.CloudHTTP, stream, off), &rd); c != 200 {
			t.Fatalf("http read at %d: %d", off, c)
		}
		for _, rec := range rd.Records {
			row := rows[rec.Offset]
			if rec.Offset != off || !bytes.Equal(rec.Value.bytes(t), row.Value) || !bytes.Equal(rec.Key.bytes(t), row.Key) || rec.Source != "http" {
				t.Fatalf("http read offset %d (want %d): %+v, table %q/%q", rec.Offset, off, rec, row.Key, row.Value)
			}
			off++
		}
		if rd.NextOffset != off || rd.HighWatermark != int64(n) {
			t.Fatalf("http read: next %d high %d, want %d %d", rd.NextOffset, rd.HighWatermark, off, n)
		}
	}
	var parts struct {
		Partitions []struct {
			Partition int32 `json:"partition"`
			Earliest  int64 `json:"earliest_offset"`
			Latest    int64 `json:"latest_offset"`
		} `json:"partitions"`
	}
	if c := getJSON(t, "http://"+p.CloudHTTP+"/v1/streams/"+stream+"/partitions", &parts); c != 200 || len(parts.Partitions) != 1 ||
		parts.Partitions[0].Earliest != 0 || parts.Partitions[0].Latest != int64(n) {
		t.Fatalf("partitions: %d %+v", c, parts)
	}
	var byTime struct {
		Offset int64 `json:"offset"`
		Found  bool  `json:"found"`
	}
	ts := time.UnixMicro(rows[100].Timestamp).UTC().Format(time.RFC3339Nano)
	if c := getJSON(t, "http://"+p.CloudHTTP+"/v1/streams/"+stream+"/partitions/0/offsets?timestamp="+ts, &byTime); c != 200 || !byTime.Found || rows[byTime.Offset].Timestamp != rows[100].Timestamp || (byTime.Offset > 0 && rows[byTime.Offset-1].Timestamp >= rows[100].Timestamp) {
		t.Fatalf("offset for %s: %d %+v", ts, c, byTime)
	}
	// Group offsets committed over HTTP are the Kafka group's.
	cr, err := http.Post("http://"+p.CloudHTTP+"/v1/groups/web-readers/offsets", "application/json",
		strings.NewReader(`{"offsets":[{"stream":"`+stream+`","partition":0,"offset":123,"metadata":"http"}]}`))
	if err != nil || cr.StatusCode != 200 {
		t.Fatalf("commit: %v %v", err, cr)
	}
	cr.Body.Close()
	gc, err := kgo.NewClient(kgo.SeedBrokers(p.CloudKafka), kgo.ConsumerGroup("web-readers"), kgo.ConsumeTopics(stream), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	fs := gc.PollRecords(ctx, 1)
	if fs.Empty() {
		t.Fatal("kafka group got nothing")
	}
	fs.EachRecord(func(r *kgo.Record) {
		if r.Offset != 123 {
			t.Fatalf("kafka group resumed at %d, HTTP committed 123", r.Offset)
		}
	})
	gc.CommitRecords(ctx, fs.Records()...)
	var goffs struct {
		Offsets []struct {
			Offset int64 `json:"offset"`
		} `json:"offsets"`
	}
	if c := getJSON(t, "http://"+p.CloudHTTP+"/v1/groups/web-readers/offsets", &goffs); c != 200 || len(goffs.Offsets) != 1 || goffs.Offsets[0].Offset != 124 {
		t.Fatalf("group offsets over HTTP after the Kafka commit: %d %+v", c, goffs)
	}
	// The OpenAPI document is served by both sides.
	for _, a := range []string{p.HTTP, p.CloudHTTP} {
		resp, err := http.Get("http://" + a + "/openapi.yaml")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte("/v3/clusters/{cluster_id}/topics/{topic_name}/records")) {
			t.Fatalf("openapi on %s: %d", a, resp.StatusCode)
		}
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ id, event, data string }

// readEvents reads events from r until fn returns false or the stream ends.
func readEvents(r io.Reader, fn func(sseEvent) bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ev sseEvent
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "":
			if ev.event != "" && !fn(ev) {
				return nil
			}
			ev = sseEvent{}
		case strings.HasPrefix(l, "id: "):
			ev.id = l[4:]
		case strings.HasPrefix(l, "event: "):
			ev.event = l[7:]
		case strings.HasPrefix(l, "data: "):
			ev.data = l[6:]
		}
	}
	return sc.Err()
}

// produceHTTP posts n STRING records "prefix-i" and returns their reports.
func produceHTTP(t *testing.T, p *proc, stream, prefix string, n int) []httpReport {
	t.Helper()
	reps, err := postRecords(p, stream, prefix, n)
	if err != nil {
		t.Fatal(err)
	}
	return reps
}

// postRecords is produceHTTP for any goroutine: an error unless every
// record got a 200 report.
func postRecords(p *proc, stream, prefix string, n int) ([]httpReport, error) {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"value":{"type":"STRING","data":"%s-%d"}}`, prefix, i)
	}
	resp, err := http.Post(fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", p.HTTP, stream), "application/json", strings.NewReader(b.String()))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var reps []httpReport
	dec := json.NewDecoder(resp.Body)
	for {
		var r httpReport
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		if r.ErrorCode != 200 {
			return nil, fmt.Errorf("produce: %+v", r)
		}
		reps = append(reps, r)
	}
	if len(reps) != n {
		return nil, fmt.Errorf("%d reports for %d records", len(reps), n)
	}
	return reps, nil
}

// TestHTTPEvents: an SSE reader is cut off mid-stream and resumes from
// Last-Event-ID with no gap or duplicate while records keep coming; a
// long poll at the end of the partition returns as soon as a commit
// lands (the latency is logged).
func TestHTTPEvents(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const stream = "web.clicks"
	produceHTTP(t, p, stream, "a", 200)
	url := fmt.Sprintf("http://%s/v1/streams/%s/partitions/0/records?offset=0&max_records=50&format=string", p.CloudHTTP, stream)
	var offsets []int64
	lastID := ""
	open := func() *http.Response {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("event stream: %v %v", err, resp)
		}
		return resp
	}
	take := func(resp *http.Response, upTo int) {
		t.Helper()
		err := readEvents(resp.Body, func(ev sseEvent) bool {
			var rec struct {
				Offset int64 `json:"offset"`
				Value  data  `json:"value"`
			}
			if ev.event != "record" || json.Unmarshal([]byte(ev.data), &rec) != nil || ev.id != fmt.Sprintf("0:%d", rec.Offset) {
				t.Fatalf("event %+v", ev)
			}
			offsets = append(offsets, rec.Offset)
			lastID = ev.id
			return len(offsets) < upTo
		})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // disconnect mid-stream
	}
	take(open(), 70)
	produceHTTP(t, p, stream, "b", 100) // while the reader is away
	take(open(), 230)
	go func() { // while it tails
		if _, err := postRecords(p, stream, "c", 100); err != nil {
			t.Error(err)
		}
	}()
	take(open(), 400)
	for i, o := range offsets {
		if o != int64(i) {
			t.Fatalf("event %d is offset %d: a gap or a duplicate across the reconnects", i, o)
		}
	}
	// Long poll: returns when the next commit lands.
	start := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		if reps, err := postRecords(p, stream, "d", 1); err != nil || *reps[0].Offset != 400 {
			t.Errorf("produce for the long poll: %v %+v", err, reps)
		}
		start <- time.Now()
	}()
	var rd httpRead
	begin := time.Now()
	if c := getJSON(t, fmt.Sprintf("http://%s/v1/streams/%s/partitions/0/records?offset=400&timeout=20s", p.CloudHTTP, stream), &rd); c != 200 || len(rd.Records) != 1 || rd.Records[0].Offset != 400 {
		t.Fatalf("long poll: %d %+v", c, rd)
	}
	end := time.Now()
	acked := <-start
	t.Logf("long poll returned %s after the record was acknowledged (commit interval 200ms; waited %s in all)", end.Sub(acked).Round(time.Millisecond), end.Sub(begin).Round(time.Millisecond))
	if end.Sub(acked) > 5*time.Second {
		t.Fatalf("long poll took %s after the ack", end.Sub(acked))
	}
	// A long poll that times out answers with no records and the same next offset.
	if c := getJSON(t, fmt.Sprintf("http://%s/v1/streams/%s/partitions/0/records?offset=401&timeout=300ms", p.CloudHTTP, stream), &rd); c != 200 || len(rd.Records) != 0 || rd.NextOffset != 401 {
		t.Fatalf("long poll timeout: %d %+v", c, rd)
	}
}

// TestHTTPBadInput: malformed JSON, a wrong content type, oversize bodies
// and records, unknown streams and clusters, negative and out-of-range
// offsets get clear errors and write nothing; a malformed record in a
// stream ends it after the records before it were accepted; clients that
// never read their reports or events leave the node's memory bounded.
func TestHTTPBadInput(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, dir)
	const stream = "web.bad"
	url := fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", p.HTTP, stream)
	post := func(ct, body string, streamed bool) (int, string) {
		t.Helper()
		var r io.Reader = strings.NewReader(body)
		if streamed {
			r = io.MultiReader(r) // no length: chunked
		}
		req, _ := http.NewRequest(http.MethodPost, url, r)
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	produceHTTP(t, p, stream, "ok", 3) // offsets 0-2
	for _, c := range []struct {
		name, ct, body string
		code           int
		says           string
	}{
		{"malformed JSON", "application/json", `{"value": {"type": "JSON", "data": {"a": }}`, 400, "malformed JSON"},
		{"truncated", "application/json", `{"value": {"type": "STRING", "data": "x"`, 400, "truncated"},
		{"wrong content type", "text/plain", `{"value":{"data":1}}`, 415, "want application/json"},
		{"no content type", "", `{"value":{"data":1}}`, 415, "want application/json"},
		{"unknown type", "application/json", `{"value":{"type":"XML","data":"<a/>"}}`, 400, "value.type"},
		{"schema registry", "application/json", `{"value":{"type":"AVRO","data":{}}}`, 400, "schema registry"},
		{"bad base64", "application/json", `{"value":{"type":"BINARY","data":"!!!"}}`, 400, "value.data"},
		{"bad header", "application/json", `{"headers":[{"name":"","value":"AA=="}],"value":{"data":1}}`, 400, "headers[0].name"},
		{"wrong field type", "application/json", `{"partition_id":"zero","value":{"data":1}}`, 400, "partition_id"},
		{"negative partition", "application/json", `{"partition_id":-3,"value":{"data":1}}`, 400, "partition_id"},
		{"empty body", "application/json", ``, 400, "no record"},
		{"body over the cap", "application/json", `{"value":{"type":"STRING","data":"` + strings.Repeat("x", 5<<20) + `"}}`, 413, "at most"},
		{"not our partition", "application/json", `{"partition_id":7,"value":{"data":1}}`, 503, "fenced"},
	} {
		code, body := post(c.ct, c.body, false)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, code, body, c.code, c.says)
		}
	}
	for _, u := range []string{fmt.Sprintf("http://%s/v3/clusters/other/topics/%s/records", p.HTTP, stream),
		fmt.Sprintf("http://%s/v3/clusters/tributary/topics/no-dot/records", p.HTTP),
		fmt.Sprintf("http://%s/v3/clusters/tributary/topics/factory.telemetry_dlq/records", p.HTTP)} { // a dead-letter table
		resp, err := http.Post(u, "application/json", strings.NewReader(`{"value":{"data":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 400 {
			t.Errorf("POST %s: %d", u, resp.StatusCode)
		}
	}
	// A stream: two good records, a malformed one, one after it (never read).
	code, body := post("application/json", `{"value":{"data":"s1"}}{"value":{"data":"s2"}}{"value":{"type":"JSON","data":}}{"value":{"data":"s3"}}`, true)
	reps := decodeReports(t, []byte(body))
	if code != 200 || len(reps) != 3 || reps[0].ErrorCode != 200 || *reps[0].Offset != 3 || reps[1].ErrorCode != 200 || *reps[1].Offset != 4 || reps[2].ErrorCode != 400 {
		t.Fatalf("stream with a malformed record: %d %s", code, body)
	}
	// A streamed record over max_record_bytes: 413 in its report.
	code, body = post("application/json", `{"value":{"data":"s4"}}{"value":{"type":"STRING","data":"`+strings.Repeat("y", 2<<20)+`"}}`, true)
	reps = decodeReports(t, []byte(body))
	if code != 200 || len(reps) != 2 || reps[0].ErrorCode != 200 || *reps[0].Offset != 5 || reps[1].ErrorCode != 413 {
		t.Fatalf("stream with an oversize record: %d %.300s", code, body)
	}
	// Reads: unknown stream 404, bad partition 400/404, negative offset
	// 400, beyond the end 416, bad parameters 400.
	waitRows(t, dir, stream, 6)
	base := "http://" + p.CloudHTTP + "/v1/streams/"
	for _, c := range []struct {
		path string
		code int
	}{
		{"web.none/partitions/0/records?offset=0", 404},
		{"web.none/partitions", 404},
		{stream + "/partitions/9/records?offset=0", 404},
		{stream + "/partitions/x/records", 400},
		{stream + "/partitions/0/records?offset=-1", 400},
		{stream + "/partitions/0/records?offset=abc", 400},
		{stream + "/partitions/0/records?offset=7", 416},
		{stream + "/partitions/0/records?offset=0&max_records=0", 400},
		{stream + "/partitions/0/records?offset=0&timeout=10m", 400},
		{stream + "/partitions/0/records?offset=0&format=xml", 400},
		{stream + "/partitions/0/offsets?timestamp=yesterday", 400},
		{"bad/partitions", 400},
		{stream + "/partitions/0/records?offset=6", 200},
	} {
		if got := getJSON(t, base+c.path, nil); got != c.code {
			t.Errorf("GET %s: %d, want %d", c.path, got, c.code)
		}
	}
	for _, c := range []struct {
		ct, body string
		code     int
	}{
		{"application/json", `{"offsets":[{"stream":"` + stream + `","partition":0,"offset":-5}]}`, 400},
		{"application/json", `{"offsets":[]}`, 400},
		{"application/json", `{"offsets":[{"stream":"nodot","partition":0,"offset":1}]}`, 400},
		{"application/json", `{"offsets":`, 400},
		{"text/plain", `{}`, 415},
	} {
		resp, err := http.Post("http://"+p.CloudHTTP+"/v1/groups/g/offsets", c.ct, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("commit %s: %d, want %d", c.body, resp.StatusCode, c.code)
		}
	}
	// Only the good records are in the table, once each.
	rows := tableByPartition(t, dir, stream)[0]
	if len(rows) != 6 {
		t.Fatalf("table has %d rows, want 6 (3 + s1 s2 + s4)", len(rows))
	}
	for i, w := range []string{"ok-0", "ok-1", "ok-2", `"s1"`, `"s2"`, `"s4"`} {
		if string(rows[i].Value) != w {
			t.Fatalf("row %d: %q, want %q", i, rows[i].Value, w)
		}
	}

	// Clients that never read: ten event streams over 24 MiB of records
	// and two produce streams pushing 16 MiB each without reading their
	// reports (their records are accepted while the reports fit in the
	// socket buffers, then their bodies are no longer read). The node's
	// memory stays bounded.
	const big = "web.big"
	val := strings.Repeat("z", 512<<10)
	var bb strings.Builder
	for range 48 {
		fmt.Fprintf(&bb, `{"value":{"type":"STRING","data":"%s"}}`, val)
	}
	resp, err := http.Post(fmt.Sprintf("http://%s/v3/clusters/tributary/topics/%s/records", p.HTTP, big), "application/json", io.MultiReader(strings.NewReader(bb.String())))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitRows(t, dir, big, 48)
	rss0, _, _ := readRSS(p.cmd.Process.Pid)
	var conns []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", p.CloudHTTP)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /v1/streams/%s/partitions/0/records?offset=0&max_bytes=16777216 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n", big)
	}
	written := make([]atomic.Int64, 2) // read while the writers go on
	for i := range 2 {
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		go func() {
			fmt.Fprintf(c, "POST /v3/clusters/tributary/topics/%s/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", big)
			rec := fmt.Sprintf(`{"value":{"type":"STRING","data":"%s"}}`, strings.Repeat("w", 64<<10))
			chunk := fmt.Sprintf("%x\r\n%s\r\n", len(rec), rec)
			for range 256 {
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				n, err := io.WriteString(c, chunk)
				written[i].Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(6 * time.Second)
	rss1, _, _ := readRSS(p.cmd.Process.Pid)
	t.Logf("node RSS %d MiB before, %d MiB with 10 event streams and 2 produce streams that do not read; producers wrote %d and %d MiB of 16",
		rss0>>20, rss1>>20, written[0].Load()>>20, written[1].Load()>>20)
	if rss1 > wireMemoryBound {
		t.Fatalf("node RSS %d MiB with the slow clients, bound %d MiB", rss1>>20, wireMemoryBound>>20)
	}
	for _, c := range conns {
		c.Close()
	}
	if code := getJSON(t, base+stream+"/partitions/0/records?offset=0", nil); code != 200 {
		t.Fatalf("the read API after the slow clients: %d", code)
	}
}
