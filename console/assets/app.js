// Tributary operator console. Polls /console/api once a second and draws
// everything itself (SVG charts): nothing is loaded from anywhere else.
'use strict';

(function () {
  const errors = [];
  function pageError(msg) {
    errors.push(String(msg));
    const box = document.getElementById('page-errors');
    if (box) {
      box.hidden = false;
      box.textContent = 'Page error: ' + errors.join(' · ');
    }
  }
  window.addEventListener('error', (e) => pageError(e.message));
  window.addEventListener('unhandledrejection', (e) => pageError(e.reason));

  // ---- small DOM helpers -------------------------------------------------
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e.setAttribute(k, v);
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined || k === false) continue;
      e.appendChild(typeof k === 'object' ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  const SVG = 'http://www.w3.org/2000/svg';
  function sv(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function table(headers, rows, numeric) {
    const num = new Set(numeric || []);
    return el('div', { class: 'scroll' }, el('table', {},
      el('thead', {}, el('tr', {}, headers.map((h, i) => el('th', { class: num.has(i) ? 'num' : null, text: h })))),
      el('tbody', {}, rows)));
  }
  function td(v, cls) { return el('td', { class: cls, text: v }); }

  // ---- formatting --------------------------------------------------------
  function fmtNum(v, digits) {
    if (v === null || v === undefined || isNaN(v)) return '–';
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + ' G';
    if (a >= 1e6) return (v / 1e6).toFixed(1) + ' M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + ' k';
    if (a >= 100 || Number.isInteger(v)) return Math.round(v).toLocaleString('en-US');
    return v.toFixed(digits === undefined ? (a >= 10 ? 1 : 2) : digits);
  }
  function fmtBytes(b) {
    if (!b) return '0 B';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(b >= 100 ? 0 : 1) : b) + ' ' + u[i];
  }
  function fmtDur(s) {
    if (s === null || s === undefined) return '–';
    if (s < 1) return Math.round(s * 1000) + ' ms';
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
    if (s < 172800) return (s / 3600).toFixed(1) + ' h';
    return Math.round(s / 86400) + ' days';
  }
  function fmtTime(iso) {
    const d = new Date(iso);
    return isNaN(d) ? '' : d.toLocaleTimeString('en-GB', { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
  }
  function ago(iso, now) {
    const d = new Date(iso);
    if (isNaN(d) || d.getFullYear() < 2000) return '–';
    return fmtDur(Math.max(0, (now - d) / 1000)) + ' ago';
  }

  // ---- charts ------------------------------------------------------------
  const palette = ['#1f6feb', '#e8590c', '#2f9e44', '#9c36b5', '#c2255c', '#0c8599', '#5c940d', '#f08c00', '#495057'];
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function tickLabel(v) {
    if (v === 0) return '0';
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
    if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + 'k';
    if (a >= 10) return String(Math.round(v));
    if (a >= 1) return v.toFixed(1).replace(/\.0$/, '');
    return v.toPrecision(2);
  }
  function drawChart(card, c, windowMs) {
    const box = card.querySelector('.chart');
    const W = Math.max(260, Math.round(box.clientWidth || 400));
    const H = window.innerWidth <= 640 ? 150 : 170;
    const padL = 44, padR = 10, padT = 8, padB = 20;
    const svg = sv('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img',
      'aria-label': c.title, 'data-chart': c.id });
    // The x axis spans the data (at least 2 minutes, at most the window),
    // so that a node that just started does not draw a sliver at the edge.
    const tEnd = c.t.length ? c.t[c.t.length - 1] : Date.now();
    const span = c.t.length ? tEnd - c.t[0] : 0;
    windowMs = Math.min(windowMs, Math.max(120000, Math.ceil(span / 60000) * 60000));
    const tStart = tEnd - windowMs;
    let maxV = 0, points = 0;
    for (const s of c.series) for (const v of s.v) if (v !== null && v > maxV) maxV = v;
    const yMax = niceMax(Math.max(maxV, c.min_top || 0));
    const x = (t) => padL + (W - padL - padR) * (t - tStart) / windowMs;
    const y = (v) => padT + (H - padT - padB) * (1 - v / yMax);
    // The plot area has a background of its own (tests find charts in
    // screenshots by it).
    svg.appendChild(sv('rect', { x: padL, y: padT, width: W - padL - padR, height: H - padT - padB, class: 'plot' }));
    for (let i = 0; i <= 4; i++) {
      const v = yMax * i / 4, yy = y(v);
      svg.appendChild(sv('line', { x1: padL, x2: W - padR, y1: yy, y2: yy, class: 'grid' }));
      svg.appendChild(sv('text', { x: padL - 6, y: yy + 3, 'text-anchor': 'end', class: 'axis' }, tickLabel(v)));
    }
    const minutes = windowMs / 60000;
    const step = minutes > 10 ? 5 : minutes > 4 ? 2 : 1;
    for (let m = 0; m <= minutes; m += step) {
      const xx = x(tEnd - m * 60000);
      svg.appendChild(sv('text', { x: xx, y: H - 5, 'text-anchor': m === 0 ? 'end' : 'middle', class: 'axis' },
        m === 0 ? 'now' : '−' + m + ' min'));
    }
    c.series.forEach((s, i) => {
      const color = palette[i % palette.length];
      let d = '', pen = false, last = null, n = 0;
      s.v.forEach((v, j) => {
        if (v === null) { pen = false; return; }
        const xx = x(c.t[j]).toFixed(1), yy = y(v).toFixed(1);
        d += (pen ? 'L' : 'M') + xx + ' ' + yy;
        pen = true; last = [xx, yy]; n++;
      });
      points += n;
      if (n === 0) return;
      svg.appendChild(sv('path', { d, fill: 'none', stroke: color, 'stroke-width': 2, 'stroke-linejoin': 'round',
        'data-series': s.key, 'data-points': n }));
      if (n === 1 && last) svg.appendChild(sv('circle', { cx: last[0], cy: last[1], r: 3, fill: color }));
    });
    if (points === 0) {
      svg.appendChild(sv('text', { x: (padL + W) / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' }, 'no data yet'));
    }
    svg.setAttribute('data-points', points);
    box.replaceChildren(svg);
    const legend = card.querySelector('.legend');
    legend.replaceChildren(...c.series.map((s, i) => {
      const span = el('span', {}, s.label);
      span.style.setProperty('--c', palette[i % palette.length]);
      let lastV = null;
      for (let j = s.v.length - 1; j >= 0; j--) if (s.v[j] !== null) { lastV = s.v[j]; break; }
      if (lastV !== null) span.appendChild(el('b', { class: 'now', text: ' ' + fmtNum(lastV) + ' ' + c.unit }));
      return span;
    }));
  }
  function renderCharts(m) {
    const root = document.getElementById('charts');
    const windowMs = m.window_seconds * 1000;
    for (const c of m.charts) {
      // A chart with no series at all on this host (no Kafka, no
      // histogram) is left out rather than drawn empty.
      let card = root.querySelector(`[data-card="${c.id}"]`);
      if (!c.series.length) { if (card) card.remove(); continue; }
      if (!card) {
        card = el('div', { class: 'card', 'data-card': c.id },
          el('h3', {}, c.title, el('span', { class: 'unit', text: c.unit })),
          el('div', { class: 'chart' }), el('div', { class: 'legend' }));
        root.appendChild(card);
      }
      drawChart(card, c, windowMs);
    }
    // Keep the defined order.
    for (const c of m.charts) {
      const card = root.querySelector(`[data-card="${c.id}"]`);
      if (card) root.appendChild(card);
    }
  }

  // ---- views -------------------------------------------------------------
  function tile(label, value, unit, sub, cls, fill) {
    const t = el('div', { class: 'tile ' + (cls || '') },
      el('div', { class: 'label', text: label }),
      el('div', { class: 'value' }, value, unit ? el('small', { text: unit }) : null),
      sub ? el('div', { class: 'sub', text: sub }) : null);
    if (fill !== undefined) {
      const bar = el('div', { class: 'bar ' + (cls || '') }, el('span'));
      bar.firstChild.style.width = Math.min(100, Math.max(0, fill)) + '%';
      t.appendChild(bar);
    }
    return t;
  }
  const protoName = { mqtt: 'MQTT', kafka: 'Kafka', pulsar: 'Pulsar' };
  function renderTiles(m) {
    const o = m.overview, tiles = [], ingests = m.role !== 'cloud';
    if (ingests) {
      tiles.push(tile('Ingest', fmtNum(o.ingest_per_second), 'msg/s', 'committed ' + fmtNum(o.committed_per_second) + ' rows/s'));
    } else {
      const rows = m.streams.reduce((a, s) => a + s.rows, 0), bytes = m.streams.reduce((a, s) => a + s.data_bytes, 0);
      tiles.push(tile('Streams', fmtNum(m.streams.length), null, fmtNum(rows) + ' rows · ' + fmtBytes(bytes)));
    }
    if (o.wal_budget_bytes > 0 || o.wal_bytes > 0) {
      const pct = o.wal_fill_percent;
      const cls = pct >= 95 ? 'bad' : pct >= 80 ? 'warn' : '';
      tiles.push(tile('WAL buffered', fmtBytes(o.wal_bytes), null,
        (o.wal_budget_bytes ? pct.toFixed(1) + ' % of ' + fmtBytes(o.wal_budget_bytes) + ' budget · ' : '') + fmtNum(o.wal_records) + ' records',
        cls, o.wal_budget_bytes ? pct : undefined));
      tiles.push(tile('Oldest not uploaded', o.wal_records ? fmtDur(o.oldest_unuploaded_seconds) : 'none', null,
        o.wal_records ? 'waiting in the WAL' : 'WAL is empty', o.oldest_unuploaded_seconds > 60 ? 'warn' : ''));
    }
    if (o.uplink_state) {
      const names = { ok: 'Healthy', failing: 'Failing', idle: 'Idle' };
      tiles.push(tile('Uplink to tables', names[o.uplink_state] || o.uplink_state, null,
        'last commit ' + (o.last_commit_age_seconds !== undefined ? fmtDur(o.last_commit_age_seconds) + ' ago' : '–'),
        o.uplink_state === 'failing' ? 'bad' : o.uplink_state === 'ok' ? 'good' : ''));
      tiles.push(tile('Rows committed', fmtNum(o.rows_committed), null, fmtBytes(o.bytes_uploaded) + ' uploaded'));
      if (o.records_readmitted) tiles.push(tile('Re-admitted after a fence', fmtNum(o.records_readmitted), null,
        'held only here; moved to this node\'s partition with new offsets', 'warn'));
    }
    const clients = Object.entries(o.clients || {}).sort();
    if (clients.length) {
      tiles.push(tile('Connected clients', fmtNum(clients.reduce((a, [, n]) => a + n, 0)), null,
        clients.map(([p, n]) => fmtNum(n) + ' ' + (protoName[p] || p)).join(' · ')));
    }
    const refused = o.refusals.reduce((a, r) => a + r.value, 0);
    if (ingests) tiles.push(tile('Refused', fmtNum(refused), null,
      refused ? o.refusals.filter((r) => r.value).map((r) => r.label + ' ' + fmtNum(r.value)).join(' · ') : 'nothing refused',
      refused ? 'warn' : ''));
    if (m.consumers) {
      const lag = m.consumers.kafka_groups.reduce((a, g) => a + g.total_lag, 0);
      tiles.push(tile('Kafka consumer groups', fmtNum(m.consumers.kafka_groups.length), null, 'total lag ' + fmtNum(lag) + ' messages'));
      const subs = m.consumers.pulsar_subscriptions;
      if (subs) tiles.push(tile('Pulsar subscriptions', fmtNum(subs.length), null,
        'backlog ' + fmtNum(subs.reduce((a, s) => a + s.backlog, 0)) + ' messages'));
    }
    document.getElementById('tiles').replaceChildren(...tiles);
  }
  function renderHealth(m) {
    document.getElementById('health').replaceChildren(...m.health.map((a) =>
      el('div', { class: 'banner ' + a.severity, id: 'health-' + a.id.replace(/[^a-z0-9_-]/gi, '_'), 'data-alert': a.id, role: 'alert' },
        el('div', { class: 'title', text: (a.severity === 'critical' ? 'Action needed: ' : 'Attention: ') + a.title }),
        a.detail ? el('div', { class: 'detail', text: a.detail }) : null,
        el('div', { class: 'action' }, el('b', { text: 'What to do: ' }), a.action))));
  }
  function payloadCell(r) {
    const c = el('td', { class: 'payload' + (r.encoding === 'hex' ? ' hex' : '') });
    c.textContent = (r.encoding === 'hex' ? '0x' : '') + r.value + (r.truncated ? ' …' : '');
    c.title = r.size + ' bytes' + (r.encoding === 'hex' ? ', binary (shown as hex)' : '');
    return c;
  }
  function renderStreams(m, now) {
    document.getElementById('streams-count').textContent = m.streams.length || '';
    const root = document.getElementById('streams');
    if (!m.streams.length) { root.replaceChildren(el('div', { class: 'card none', text: 'No streams yet: publish a message to create one.' })); return; }
    root.replaceChildren(...m.streams.map((s) => {
      const parts = table(['Partition', 'Owner', 'Epoch', 'Next offset', 'Committed', 'In WAL', 'WAL size'],
        s.partitions.map((p) => el('tr', {}, td(p.id, 'num'), el('td', {}, p.owner || '–', p.fenced ? el('span', { class: 'badge bad', text: 'fenced' }) : null),
          td(p.epoch, 'num'), td(fmtNum(p.next_offset), 'num'), td(p.committed >= 0 ? fmtNum(p.committed) : '–', 'num'),
          td(fmtNum(p.uncommitted), 'num'), td(fmtBytes(p.wal_bytes), 'num'))), [0, 2, 3, 4, 5, 6]);
      const recent = s.recent.length ? table(['Offset', 'Partition', 'Accepted', 'Topic', 'Source', 'Client', 'Payload'],
        s.recent.map((r) => el('tr', { class: 'row', 'data-offset': r.offset }, td(fmtNum(r.offset), 'num'), td(r.partition, 'num'),
          td(fmtTime(r.timestamp), 'mono'), td(r.topic), td(protoName[r.source] || r.source), td(r.client_id || '–'), payloadCell(r))), [0, 1])
        : el('div', { class: 'none', text: 'No message since this node started.' });
      const dlq = s.name.endsWith('_dlq');
      const dead = s.dead_letters && s.dead_letters.length ? table(['Offset', 'Partition', 'Committed', 'Reason'],
        s.dead_letters.map((d) => el('tr', { class: 'row dead', 'data-offset': d.offset }, td(fmtNum(d.offset), 'num'), td(d.partition, 'num'),
          td(fmtTime(d.at), 'mono'), td(d.error, 'reason'))), [0, 1])
        : el('div', { class: 'none', text: 'No dead letter since this node started; earlier ones: tributary tables scan ' + s.name + '.' });
      const mt = s.maintenance;
      const maint = mt ? el('span', { class: 'kv' }, 'maintenance ',
        mt.last_error ? el('span', { class: 'badge bad', text: 'failing' }) : el('span', { class: 'badge ok', text: mt.last_pass ? 'ok' : 'on' }),
        ' last pass ', el('b', { text: mt.last_pass ? ago(mt.last_pass, now) : 'not yet' }),
        mt.lease_holder ? ' · lease ' + mt.lease_holder : '') : el('span', { class: 'kv', text: 'maintenance off on this node' });
      const schema = s.schema && s.schema.length ? el('details', {}, el('summary', { text: 'Schema (' + s.schema.length + ' columns)' }),
        table(['Column', 'Type', ''], s.schema.map((c) => el('tr', {}, td(c.name, 'mono'), td(c.type, 'mono'), td(c.required ? 'required' : 'optional'))))) : null;
      return el('div', { class: 'card stream', 'data-stream': s.name },
        el('div', { class: 'stream-head' }, el('h3', { text: s.name }),
          el('span', { class: 'kv' }, el('b', { text: fmtNum(s.rows) }), ' rows'),
          el('span', { class: 'kv' }, el('b', { text: fmtNum(s.data_files) }), ' data files', s.data_bytes ? ' (' + fmtBytes(s.data_bytes) + ')' : ''),
          el('span', { class: 'kv' }, el('b', { text: fmtNum(s.snapshots) }), ' snapshots'),
          s.metadata_bytes ? el('span', { class: 'kv' }, 'metadata ', el('b', { text: fmtBytes(s.metadata_bytes) })) : null, maint),
        el('div', { class: 'sub-h', text: 'Partitions' }), parts,
        dlq ? el('div', { class: 'sub-h', text: 'Latest dead letters, with why' }) : el('div', { class: 'sub-h', text: 'Latest messages' }),
        dlq ? dead : recent, schema);
    }));
  }
  function stateBadge(st) {
    const cls = { alive: 'ok', suspect: 'warn', dead: 'bad', left: '' }[st];
    return el('span', { class: 'badge ' + (cls || ''), text: st });
  }
  function renderCluster(m, now) {
    const c = m.cluster, root = document.getElementById('cluster');
    document.querySelector('#tabs a[data-view="cluster"]').hidden = !c;
    if (!c) { root.replaceChildren(el('div', { class: 'card none', text: 'This host is not part of a cluster.' })); return; }
    const head = el('div', { class: 'stream-head' }, el('h3', { text: c.gossip ? 'Cluster' : 'Single node (no gossip configured)' }),
      el('span', { class: 'kv' }, 'replication factor ', el('b', { text: c.replication_factor })),
      el('span', { class: 'kv' }, 'replication ', c.degraded ? el('span', { class: 'badge bad', text: 'degraded' }) : el('span', { class: 'badge ok', text: 'complete' })),
      el('span', { class: 'kv' }, el('b', { text: fmtNum(c.lag_records) }), ' records not yet on every replica'));
    const members = table(['Member', 'State', 'Since', 'Partitions', 'WAL', 'Uplink', 'Replicates to'],
      c.members.map((mb) => el('tr', { 'data-member': mb.id }, el('td', {}, mb.id, mb.self ? el('span', { class: 'badge', text: 'this node' }) : null),
        el('td', {}, stateBadge(mb.state)), td(ago(mb.since, now)), td(mb.partitions, 'num'),
        td(fmtBytes(mb.wal_bytes) + (mb.wal_budget ? ' of ' + fmtBytes(mb.wal_budget) : ''), 'num'),
        el('td', {}, mb.uplink_ok ? el('span', { class: 'badge ok', text: 'ok' }) : el('span', { class: 'badge bad', text: 'failing' })),
        td((mb.replicates_to || []).join(', ') || '–'))), [3, 4]);
    const kids = [head, el('div', { class: 'sub-h', text: 'Members' }), members];
    if (c.forwarding && c.forwarding.length) {
      kids.push(el('div', { class: 'sub-h', text: 'Forwarding of MQTT publishes to subscribers on peers' }),
        table(['Peer', 'Forwarded', 'Dropped (queue full or peer gone)'], c.forwarding.map((q) => el('tr', {}, td(q.peer), td(fmtNum(q.forwarded), 'num'),
          el('td', { class: 'num' }, q.dropped ? el('span', { class: 'badge warn', text: fmtNum(q.dropped) }) : '0'))), [1, 2]));
    }
    root.replaceChildren(el('div', { class: 'card' }, kids));
  }
  function renderConsumers(m) {
    const c = m.consumers, tab = document.getElementById('tab-consumers');
    tab.hidden = !c;
    if (!c) return;
    const groups = c.kafka_groups.length ? c.kafka_groups.map((g) => el('div', { class: 'card stream', 'data-group': g.id },
      el('div', { class: 'stream-head' }, el('h3', { text: g.id }), g.state ? el('span', { class: 'badge', text: g.state }) : null,
        g.members.length ? el('span', { class: 'kv' }, el('b', { text: g.members.length }), ' members') : null,
        el('span', { class: 'kv' }, 'total lag ', el('b', { text: fmtNum(g.total_lag) }), ' messages')),
      g.members.length ? el('div', { class: 'kv', text: 'Members: ' + g.members.join(', ') }) : null,
      table(['Topic', 'Partition', 'Committed offset', 'End offset', 'Lag'], g.partitions.map((l) =>
        el('tr', {}, td(l.topic), td(l.partition, 'num'), td(fmtNum(l.committed), 'num'), td(fmtNum(l.end), 'num'), td(fmtNum(l.lag), 'num'))), [1, 2, 3, 4])))
      : [el('div', { class: 'card none', text: 'No Kafka consumer group has committed offsets yet.' })];
    const subs = !c.pulsar_subscriptions ? [el('div', { class: 'card none', text: 'This server does not report Pulsar subscriptions yet.' })]
      : c.pulsar_subscriptions.length ? [el('div', { class: 'card' }, table(['Topic', 'Subscription', 'Type', 'Consumers', 'Backlog'],
      c.pulsar_subscriptions.map((s) => el('tr', {}, td(s.topic), td(s.name), td(s.type || '–'), td(s.consumers, 'num'), td(fmtNum(s.backlog), 'num'))), [3, 4]))]
      : [el('div', { class: 'card none', text: 'No Pulsar subscription yet.' })];
    document.getElementById('consumers').replaceChildren(el('h3', { text: 'Kafka consumer groups' }), ...groups,
      el('h3', { text: 'Pulsar subscriptions' }), ...subs);
  }

  // ---- tabs and polling ----------------------------------------------------
  function showView() {
    const v = (location.hash || '#overview').slice(1);
    for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.view === v);
    for (const s of document.querySelectorAll('.view')) s.classList.toggle('active', s.id === 'view-' + v);
  }
  window.addEventListener('hashchange', () => { showView(); if (lastModel) render(lastModel); });
  let lastModel = null, lastOK = 0;
  function render(m) {
    const now = new Date(m.now);
    document.getElementById('node').textContent = m.node || '(unnamed)';
    document.getElementById('role').textContent = { edge: 'edge node', cloud: 'cloud server', dev: 'dev' }[m.role] || m.role;
    document.title = (m.health.length ? '⚠ ' : '') + (m.node || 'Tributary') + ' · Tributary console';
    renderHealth(m);
    renderTiles(m);
    renderCharts(m);
    renderStreams(m, now);
    renderCluster(m, now);
    renderConsumers(m);
    document.body.dataset.loaded = 'true';
  }
  async function poll() {
    try {
      // location.origin, never a relative URL: a page opened as
      // http://user:password@host/ resolves relative URLs with the
      // credentials in them, which fetch refuses (a blank page).
      const r = await fetch(location.origin + '/console/api', { cache: 'no-store' });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      lastModel = await r.json();
      lastOK = Date.now();
      try {
        render(lastModel);
      } catch (e) {
        pageError(e && e.stack || e);
      }
      document.getElementById('live-dot').className = 'dot on';
      document.getElementById('updated').textContent = 'live · up ' + fmtDur(lastModel.uptime_seconds);
    } catch (e) {
      document.getElementById('live-dot').className = 'dot off';
      const upd = document.getElementById('updated');
      upd.textContent = 'connection lost' + (lastOK ? ' ' + fmtDur((Date.now() - lastOK) / 1000) + ' ago' : '');
      upd.title = String(e && e.message || e);
    }
  }
  let resizeTimer = 0;
  window.addEventListener('resize', () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => lastModel && renderCharts(lastModel), 150); });
  showView();
  poll();
  setInterval(poll, 1000);
})();
