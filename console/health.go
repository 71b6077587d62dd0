package console

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Health rules. Each rule looks at the current snapshot (and the history
// for "recently"), and when it fires says what is wrong and what an
// operator should do about it. Rules never fire on a healthy, idle node.
const (
	budgetWarnFraction = 0.8
	uplinkFailingFor   = time.Minute
	certWarnBefore     = 14 * 24 * time.Hour
	certCriticalBefore = 2 * 24 * time.Hour
	// federationBehind: a mirror this far behind its table (or refused)
	// gets a banner; mirrors follow within seconds when healthy.
	federationBehind = 30 * time.Second
)

func health(s *Snapshot, h *history, now time.Time) []Alert {
	alerts := []Alert{}
	add := func(a Alert) { alerts = append(alerts, a) }
	if w := s.WAL; w != nil && w.Budget > 0 {
		fill := float64(w.Bytes) / float64(w.Budget)
		refusing := recentIncrease(h, "cum:budget_refusals", float64(w.BudgetRefusals), now.Add(-time.Minute))
		switch {
		case fill >= 1 || refusing:
			add(Alert{ID: "wal_budget", Severity: "critical",
				Title: fmt.Sprintf("WAL disk budget full (%.0f %% of %s): publishes are being refused", fill*100, humanBytes(w.Budget)),
				Detail: fmt.Sprintf("%s in %d records wait for upload; MQTT QoS 1/2 publishes get reason 0x97 (quota exceeded), Kafka producers get a retriable error, QoS 0 messages are dropped.",
					humanBytes(w.Bytes), w.Records),
				Action: "Fix the uplink first (see its banner or the Uplink figures): the WAL drains as soon as table commits succeed. " +
					"If the disk has room, raise wal.max_bytes (flag --wal-budget) and restart; nothing accepted is lost."})
		case fill >= budgetWarnFraction:
			add(Alert{ID: "wal_budget", Severity: "warning",
				Title:  fmt.Sprintf("WAL disk budget %.0f %% full", fill*100),
				Detail: fmt.Sprintf("%s of %s used; at 100 %% the node refuses publishes.", humanBytes(w.Bytes), humanBytes(w.Budget)),
				Action: "Check that uploads and table commits succeed (Uplink figures, log lines with component=uplink). " +
					"If ingest simply outruns the uplink, raise uplink.max_batch_bytes or wal.max_bytes."})
		}
	}
	if u := s.Uplink; u != nil && len(u.Failing) > 0 && u.LastCommitAge >= uplinkFailingFor {
		detail := fmt.Sprintf("No table commit for %s; failing streams: %s.", humanDuration(u.LastCommitAge), strings.Join(u.Failing, ", "))
		if u.LastError != "" {
			detail += " Last error: " + u.LastError
		}
		add(Alert{ID: "uplink_failing", Severity: "critical", Title: "Uplink to the tables failing for over a minute",
			Detail: detail,
			Action: "Check that the object store and the catalog are reachable from this node (network, credentials, bucket permissions, disk of a file:// warehouse). " +
				"Records stay in the WAL until a commit succeeds, up to the WAL budget."})
	}
	for _, f := range s.Federation {
		if f.LastError == "" && f.Lag < federationBehind {
			continue
		}
		detail := fmt.Sprintf("%d mirrors current, %d behind; the oldest commit a mirror lacks is %s old.", f.Current, f.Behind, humanDuration(f.Lag))
		if f.LastError != "" {
			detail += " Last error: " + f.LastError
		}
		add(Alert{ID: "federation_" + f.Catalog, Severity: "warning", Title: fmt.Sprintf("Mirrors in catalog %s are behind", f.Catalog),
			Detail: detail,
			Action: "Check that " + f.URI + " is reachable from the cloud server and accepts the federation entry's credential, token or signature " +
				"(its errors name the key). The streams themselves are unaffected; the mirrors catch up once it answers."})
	}
	if c := s.Cluster; c != nil {
		if c.Degraded {
			add(Alert{ID: "replica_missing", Severity: "critical", Title: "A replica is missing: records are acknowledged with fewer copies",
				Detail: fmt.Sprintf("Replication factor %d; %d records are not yet on every replica.", max(c.ReplicationFactor, 1), c.LagRecords),
				Action: "Bring the missing peer back (see Cluster: members not alive) or add a node; check peer links (cluster.peer_addr, firewall). " +
					"Under replication_policy: refuse the node refuses publishes instead."})
		}
		if l := c.Lease; l != nil && !l.MayWrite {
			add(Alert{ID: "lease_lost", Severity: "critical", Title: "Refusing writes: no catalog lease and no majority of the site",
				Detail: fmt.Sprintf("The owner lease was last renewed %s ago (%s) and only %d of the site's %d members are reachable, so a peer may take this node's partitions over. Publishes are refused as for a partition this node does not own; nothing accepted is lost.",
					humanDuration(now.Sub(l.RenewedAt)), l.Error, l.Alive, l.SiteSize),
				Action: "Restore this node's network to the catalog (catalog.uri) or to its peers (cluster.join, gossip and peer ports). Writes resume by themselves."})
		} else if l != nil && !l.Valid {
			add(Alert{ID: "lease_lapsed", Severity: "warning", Title: "Catalog lease lapsed: writes continue on the majority's word",
				Detail: fmt.Sprintf("The owner lease was last renewed %s ago (%s); %d of the site's %d members are alive, so no peer takes this node's partitions over.",
					humanDuration(now.Sub(l.RenewedAt)), l.Error, l.Alive, l.SiteSize),
				Action: "Check that the catalog (catalog.uri) is reachable; records wait in the WAL until it is."})
		}
		var down []string
		for _, m := range c.Members {
			if !m.Self && (m.State == "dead" || m.State == "suspect") {
				down = append(down, m.ID+" ("+m.State+")")
			}
		}
		if len(down) > 0 {
			sort.Strings(down)
			add(Alert{ID: "member_down", Severity: "warning", Title: "Cluster member not responding: " + strings.Join(down, ", "),
				Detail: "Its partitions are taken over by a replica holder once it is declared dead.",
				Action: "Check the node's process and network (gossip port). A node that left on purpose should be shut down gracefully so it leaves the cluster."})
		}
	}
	var fenced []string
	for _, st := range s.Streams {
		for _, p := range st.Partitions {
			if p.Fenced {
				fenced = append(fenced, fmt.Sprintf("%s/%d", st.Name, p.ID))
			}
		}
	}
	if u := s.Uplink; len(fenced) > 0 || u != nil && recentIncrease(h, "cum:fenced", float64(u.Fenced), time.Time{}) {
		detail := "Another node took over a partition this node wrote; its unuploaded records here were dropped (the new owner uploads its replica copy)."
		if len(fenced) > 0 {
			detail = "Fenced: " + strings.Join(fenced, ", ") + ". " + detail
		}
		add(Alert{ID: "partition_fenced", Severity: "warning", Title: "A partition was fenced", Detail: detail,
			Action: "Usually the sign of a node declared dead while it was still running (network partition, long pause). " +
				"Check gossip connectivity and the clock; the stream continues on a new partition."})
	}
	if u := s.Uplink; u != nil && u.Readmitted > 0 && (recentIncrease(h, "cum:readmitted", float64(u.Readmitted), time.Time{}) || sinceStart(h)) {
		add(Alert{ID: "records_readmitted", Severity: "warning",
			Title: fmt.Sprintf("%d records of fenced partitions re-admitted", u.Readmitted),
			Detail: "Another node took over a partition this node wrote while this node held acknowledged records that had reached no one else. " +
				"They were moved, with new offsets, into this node's own partition of the stream and are uploaded from there; nothing went to the quarantine.",
			Action: "Nothing to replay. A take-over of a node that was still running is the sign of a network cut or a long pause: check peer links and gossip. " +
				"The log line \"re-admitted\" names the new partition and offsets."})
	}
	for _, st := range s.Streams {
		if m := st.Maintenance; m != nil && m.LastError != "" {
			add(Alert{ID: "maintenance_failing:" + st.Name, Severity: "warning", Title: "Table maintenance failing on " + st.Name,
				Detail: m.LastError,
				Action: "Snapshots and small files pile up until it succeeds, slowing commits. Check catalog and object-store access for the maintainer."})
		}
	}
	for _, c := range s.Certificates {
		left := c.NotAfter.Sub(now)
		if left > certWarnBefore {
			continue
		}
		sev := "warning"
		if left < certCriticalBefore {
			sev = "critical"
		}
		title := fmt.Sprintf("Certificate %s expires in %s", c.Name, humanDuration(left))
		if left <= 0 {
			title = "Certificate " + c.Name + " has expired"
		}
		add(Alert{ID: "cert_expiry:" + c.Name, Severity: sev, Title: title,
			Detail: "Expires " + c.NotAfter.UTC().Format(time.RFC1123) + ". Clients will refuse the connection afterwards.",
			Action: "Renew the certificate and replace the files; the node reloads them on restart."})
	}
	sort.SliceStable(alerts, func(i, j int) bool { return alerts[i].Severity == "critical" && alerts[j].Severity != "critical" })
	return alerts
}

// recentIncrease reports whether the cumulative series key grew over the
// history window since from (compared with the oldest sample since then
// that has it).
func recentIncrease(h *history, key string, cur float64, from time.Time) bool {
	if h == nil {
		return false
	}
	found, oldest := false, 0.0
	h.each(func(r *row) {
		if v, ok := r.v[key]; ok && !found && r.t >= from.UnixMilli() {
			found, oldest = true, v
		}
	})
	return found && cur > oldest
}

// sinceStart reports whether the history still holds every sample since
// the console started (a cumulative count above 0 then grew within it).
func sinceStart(h *history) bool {
	return h == nil || h.count < len(h.rows)
}

func humanBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func humanDuration(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%d days", int(d.Hours()/24))
	case d >= time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	case d >= time.Minute:
		return fmt.Sprintf("%.0f min", d.Minutes())
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}
