// Package console is the operator's console that every edge node and the
// cloud server serve on their HTTP port: a live dashboard page (overview
// charts, streams, cluster, consumers, health banners) and the JSON model
// it polls.
//
// # Invariants
//
//   - Nothing is fetched from outside the host at view time: the page, its
//     script, styles and charts (drawn by the page itself as SVG) are
//     embedded in the binary.
//   - The console never imports the protocol packages: the host fills a
//     Snapshot (see Source), so an edge node and the cloud server feed the
//     same page.
//   - History is bounded: one sample per Interval, Window/Interval samples
//     kept in a ring (15 minutes by default), whatever the number of page
//     views.
//
// # Outline
//
// New makes a console; Run samples the host every Interval until its
// context ends (charts are built from consecutive samples: counters become
// rates, histograms become percentiles of what was observed in between);
// Handler serves
//
//	GET /                the page
//	GET /console/app.js  its script, /console/app.css its styles
//	GET /console/api     the Model as JSON (documented on Model)
package console

import (
	"context"
	"embed"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

// Source returns the host's current snapshot. It is called once per
// sample and once per API request, so it must be cheap (no catalog round
// trips: hosts cache what is slow to read).
type Source func() Snapshot

// Options configure a Console.
type Options struct {
	Source Source
	// Interval between samples (default 2s); Window how long the charts
	// reach back (default 15 minutes).
	Interval, Window time.Duration
	// Now is the clock (tests).
	Now func() time.Time
}

// Console samples a host and serves its dashboard.
type Console struct {
	opt Options

	mu   sync.Mutex
	hist *history
	sp   sampler
}

// New makes a console; call Run to start sampling.
func New(o Options) *Console {
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.Window <= 0 {
		o.Window = 15 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Console{opt: o, hist: newHistory(int(o.Window / o.Interval))}
}

// Run samples the host every interval until ctx ends.
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(c.opt.Interval)
	defer t.Stop()
	c.Sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.Sample()
		}
	}
}

// Sample takes one sample now.
func (c *Console) Sample() {
	s := c.opt.Source()
	now := c.opt.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.sp.sample(&s, now)
	c.hist.add(r)
}

// Model is the console's current model: the host's snapshot now, the
// charts of the history and the health banners.
func (c *Console) Model() Model {
	s := c.opt.Source()
	now := c.opt.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	m := Model{Node: s.Node, Role: s.Role, Now: now.UTC(), Listeners: s.Listeners,
		IntervalMS: c.opt.Interval.Milliseconds(), WindowSeconds: c.opt.Window.Seconds(),
		Health: health(&s, c.hist, now), Charts: c.hist.charts(), Streams: streamViews(s.Streams),
		Cluster: clusterView(s.Cluster), Consumers: consumersView(s.Consumers)}
	if !s.Started.IsZero() {
		m.UptimeSeconds = now.Sub(s.Started).Seconds()
	}
	m.Overview = overview(&s, c.hist.last())
	return m
}

func overview(s *Snapshot, last *row) Overview {
	o := Overview{Clients: s.Clients, Refusals: []Count{}}
	if last != nil {
		for k, v := range last.v {
			if len(k) > 6 && k[:6] == "proto:" {
				o.IngestPerSecond += v
			}
		}
		o.IngestPerSecond = round3(o.IngestPerSecond)
		o.CommittedPerSecond = round3(last.v["uplink:rows"])
	}
	if w := s.WAL; w != nil {
		o.WALBytes, o.WALBudgetBytes, o.WALRecords = w.Bytes, w.Budget, w.Records
		o.OldestUnuploadedSec = round3(w.OldestAge.Seconds())
		if w.Budget > 0 {
			o.WALFillPercent = round3(100 * float64(w.Bytes) / float64(w.Budget))
		}
	}
	if u := s.Uplink; u != nil {
		age := round3(u.LastCommitAge.Seconds())
		o.LastCommitAgeSeconds = &age
		o.RowsCommitted, o.BytesUploaded, o.UplinkLastError = u.RecordsCommitted, u.BytesUploaded, u.LastError
		o.RecordsReadmitted = u.Readmitted
		switch {
		case len(u.Failing) > 0:
			o.UplinkState = "failing"
		case u.Commits == 0:
			o.UplinkState = "idle"
		default:
			o.UplinkState = "ok"
		}
	}
	for reason, n := range s.Refusals {
		o.Refusals = append(o.Refusals, Count{Label: reason, Value: n})
	}
	sort.Slice(o.Refusals, func(i, j int) bool { return o.Refusals[i].Label < o.Refusals[j].Label })
	return o
}

// Handler serves the page, its assets and the JSON model.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	page := func(name, ctype string) http.HandlerFunc {
		b, err := assets.ReadFile("assets/" + name)
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ctype)
			w.Header().Set("Cache-Control", "no-cache")
			// The page loads nothing from elsewhere; say so to the browser.
			w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
			w.Write(b)
		}
	}
	mux.HandleFunc("GET /{$}", page("index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /console/app.js", page("app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /console/app.css", page("app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /console/api", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(c.Model())
	})
	return mux
}

// Register mounts the console's handler on mux (GET / and /console/…)
// behind guard (who may see it: auth.Authority.AdminOnly).
func (c *Console) Register(mux *http.ServeMux, guard func(http.Handler) http.Handler) {
	h := guard(c.Handler())
	mux.Handle("GET /{$}", h)
	mux.Handle("GET /console/", h)
}
