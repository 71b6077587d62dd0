package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/tributary-io/tributary/cloud"
	"github.com/tributary-io/tributary/node"
)

const (
	rulesFile     = "prometheus/tributary-rules.yaml"
	k8sRulesFile  = "k8s/prometheusrule.yaml"
	dashboardFile = "grafana/tributary-dashboard.json"
)

type ruleGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) (ruleGroups, any) {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rg ruleGroups
	if err := yaml.Unmarshal(raw, &rg); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var generic any
	yaml.Unmarshal(raw, &generic)
	return rg, generic
}

// dashboardExprs returns every PromQL expression of the dashboard: panel
// targets (rows' nested panels too) and query variables.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Type    string   `json:"type"`
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
		GridPos struct {
			H, W, X, Y int
		} `json:"gridPos"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: title, uid and panels are required", dashboardFile)
	}
	out := map[string]string{}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d used twice", dashboardFile, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: panel %q has a bad gridPos %+v", dashboardFile, p.Title, p.GridPos)
			}
			if p.Type != "row" {
				if len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
				}
				if p.FieldConfig.Defaults.Unit == "" {
					t.Errorf("%s: panel %q has no unit", dashboardFile, p.Title)
				}
			}
			for i, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q target %d has no expr", dashboardFile, p.Title, i)
				}
				out["panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		switch q := v.Query.(type) {
		case string:
			out["variable "+v.Name] = q
		case map[string]any:
			s, _ := q["query"].(string)
			out["variable "+v.Name] = s
		}
	}
	return out
}

var metricTokenRE = regexp.MustCompile(`\btributary_[a-z0-9_]+\b`)

// prometheusBuiltins are series Prometheus itself makes, which rules may use.
var prometheusBuiltins = map[string]bool{"up": true}

var otherMetricRE = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(up)\{`)

// referenced returns the metric names in a PromQL expression (histogram
// series suffixes stripped when the family is a histogram).
func referenced(expr string) []string {
	var out []string
	for _, m := range metricTokenRE.FindAllString(expr, -1) {
		out = append(out, m)
	}
	for _, m := range otherMetricRE.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	return out
}

// exportedFamilies runs an edge node (with the cloud Kafka server, as in
// `dev`) in this process, gives it traffic so that every labelled family
// has a series — an MQTT publish committed to a table, a maintenance pass,
// a Kafka consumer group commit — and returns the metric families of its
// /metrics with their types.
func exportedFamilies(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	cfg := node.Config{NodeID: "metrics-1", DataDir: dir, HTTPAddr: "127.0.0.1:0"}
	cfg.MQTT.Addr = "127.0.0.1:0"
	cfg.Uplink.CommitInterval = 50 * time.Millisecond
	cfg.Maintenance.Interval = time.Second
	ctx := context.Background()
	n, err := node.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	// The cloud Kafka server over the node's catalog, as `dev` runs it.
	var cc cloud.Config
	cc.DataDir = dir
	kafkaAddr, pulsarAddr, maintain := "127.0.0.1:0", "", false
	cc.Kafka.Addr, cc.Pulsar.Addr, cc.Maintenance.Enabled = &kafkaAddr, &pulsarAddr, &maintain
	cc.ApplyDefaults()
	cc.Catalog.Name, cc.Catalog.URI, cc.Catalog.Warehouse = n.Config().Catalog.Name, n.Config().Catalog.URI, n.Config().Catalog.Warehouse
	cc.Catalog.Addr = ""
	cs, err := cloud.OpenOn(n.Catalog(), cc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(ctx)
	for _, c := range cs.Collectors() {
		n.AddCollector(c)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", n.MQTTAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cl := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {}})
	if _, err := cl.Connect(ctx, &paho.Connect{ClientID: "metrics", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Publish(ctx, &paho.Publish{Topic: "metrics/test", QoS: 1, Payload: []byte(`{"v":1}`)}); err != nil {
		t.Fatal(err)
	}
	cl.Disconnect(&paho.Disconnect{})
	var stream string
	waitUntil(t, 30*time.Second, "the publish committed and a maintenance pass", func() bool {
		st := n.Status()
		if len(st.Streams) == 0 || st.Uplink.RecordsCommitted == 0 {
			return false
		}
		stream = st.Streams[0].Stream
		return len(n.Maintainer().Stats()) > 0
	})
	// A consumer group with a committed offset, for the lag family.
	kc, err := kgo.NewClient(kgo.SeedBrokers(cs.KafkaAddr()), kgo.ConsumerGroup("metrics-test"), kgo.ConsumeTopics(stream),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for got := 0; got == 0; {
		fs := kc.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("no record consumed from %s: %v", stream, fs.Errors())
		}
		got = fs.NumRecords()
	}
	if err := kc.CommitUncommittedOffsets(pctx); err != nil {
		t.Fatal(err)
	}

	families := map[string]string{}
	waitUntil(t, 10*time.Second, "every labelled family in /metrics", func() bool {
		families = scrape(t, "http://"+n.HTTPAddr()+"/metrics")
		for _, f := range []string{"tributary_consumer_group_lag", "tributary_freshness_seconds", "tributary_table_snapshots", "tributary_ingest_messages_total"} {
			if families[f] == "" {
				return false
			}
		}
		return true
	})
	return families
}

func waitUntil(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrape reads the # TYPE lines of a Prometheus text exposition.
func scrape(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// known reports whether name is an exported series: a family, or a
// histogram's _bucket/_sum/_count.
func known(families map[string]string, name string) bool {
	if families[name] != "" || prometheusBuiltins[name] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && (families[base] == "histogram" || families[base] == "summary" && suf != "_bucket") {
			return true
		}
	}
	return false
}

// TestMonitoring: the alert rules, the Kubernetes PrometheusRule and the
// Grafana dashboard parse, every rule says what to do, the PrometheusRule
// holds the same groups as the rules file, and every metric they name is
// exported by a running node's /metrics (histograms through their series).
func TestMonitoring(t *testing.T) {
	rg, generic := readRules(t)
	exprs := map[string]string{}
	alerts := map[string]bool{}
	for _, g := range rg.Groups {
		for _, r := range g.Rules {
			where := rulesFile + " " + r.Alert
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("%s (group %s): alert and expr are required", where, g.Name)
			}
			if alerts[r.Alert] {
				t.Errorf("%s: alert defined twice", where)
			}
			alerts[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", where, s)
			}
			for _, a := range []string{"summary", "description", "action"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: annotation %s is required", where, a)
				}
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			exprs["rule "+r.Alert] = r.Expr
		}
	}
	if len(alerts) < 5 {
		t.Fatalf("%s: only %d alerts", rulesFile, len(alerts))
	}

	var pr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec any `yaml:"spec"`
	}
	docs := yamlDocs(t, k8sRulesFile)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", k8sRulesFile, len(docs))
	}
	if err := docs[0].Decode(&pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" {
		t.Errorf("%s: %s %s %q, want a named monitoring.coreos.com/v1 PrometheusRule", k8sRulesFile, pr.APIVersion, pr.Kind, pr.Metadata.Name)
	}
	if !reflect.DeepEqual(pr.Spec, generic) {
		t.Errorf("%s: spec differs from %s (regenerate it from the rules file)", k8sRulesFile, rulesFile)
	}

	for k, v := range dashboardExprs(t) {
		exprs[k] = v
	}
	families := exportedFamilies(t)
	used := map[string]bool{}
	var where []string
	for w := range exprs {
		where = append(where, w)
	}
	sort.Strings(where)
	for _, w := range where {
		names := referenced(exprs[w])
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", w, exprs[w])
		}
		for _, name := range names {
			used[name] = true
			if !known(families, name) {
				t.Errorf("%s: %s is not exported (expr %q)", w, name, exprs[w])
			}
		}
	}
	t.Logf("%d expressions reference %d metric names; the node exports %d families", len(exprs), len(used), len(families))
}
