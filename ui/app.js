// The oxray dashboard: a single page over the head's HTTP API. It polls what it shows every
// few seconds, charts the nodes' use over the last hour, follows running jobs' logs over the
// log-tail WebSocket and shows any log of a node (a worker's, an actor's, a task's, a job
// driver's) in its log viewer. Every piece of cluster data is inserted as text, never as HTML.
"use strict";

const REFRESH_MS = 2000;
const PAGE_SIZE = 50;
const main = document.getElementById("main");
let timer = null;
let socket = null;

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  if (response.status === 401 || response.status === 403) throw new Unauthorized(await response.text());
  if (!response.ok) throw new Error(`${response.status}: ${reason(await response.text())}`);
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
}

// An error reply's message: Ray's envelope carries it in `msg`, other replies are plain text.
function reason(body) {
  try {
    return JSON.parse(body).msg || body;
  } catch {
    return body;
  }
}

// What `promise` gives, or the error it failed with; a lost sign-in still leads to the login.
async function orError(promise) {
  try {
    return await promise;
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    return e;
  }
}

// h("td", {class: "mono"}, "text", child...) builds an element; strings become text nodes.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (value !== false && value != null) el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child == null) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const badge = (state) => h("span", { class: `badge s-${state}` }, state);
const short = (id) => (id ? id.slice(0, 12) : "");

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function amount(name, value) {
  return name === "memory" || name.endsWith("_memory") ? bytes(value) : String(+value.toFixed(2));
}

function duration(ms) {
  if (ms == null || ms < 0) return "";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

const time = (ms) => (ms ? new Date(ms).toLocaleString() : "");

function resourceList(resources) {
  return Object.entries(resources || {})
    .filter(([k]) => !k.startsWith("node:"))
    .map(([k, v]) => `${k} ${amount(k, v)}`)
    .join(", ");
}

function table(headers, rows, empty) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), h("tbody", {}, rows));
}

function panel(title, ...content) {
  return h("section", { class: "panel" }, title ? h("h2", {}, title) : null, ...content);
}

function pager(offset, shown, total, move) {
  const last = Math.min(total, offset + shown);
  return h("div", { class: "pager" },
    h("button", { onclick: () => move(-PAGE_SIZE), disabled: offset === 0 }, "Newer"),
    h("span", {}, total ? `${offset + 1}–${last} of ${total}, newest first` : ""),
    h("button", { onclick: () => move(PAGE_SIZE), disabled: last >= total }, "Older"));
}

// Ray's state API: `filters` are [key, value] pairs, all of which a row must equal.
async function stateList(kind, filters = []) {
  const query = new URLSearchParams({ detail: "True", limit: "10000" });
  for (const [key, value] of filters) {
    query.append("filter_keys", key);
    query.append("filter_predicates", "=");
    query.append("filter_values", value);
  }
  return (await api(`/api/v0/${kind}?${query}`)).data.result;
}

const nodeLink = (id) => (id ? h("a", { href: `#/nodes/${id}` }, short(id)) : "");
// A submission by its submission id; a driver of its own by its job id.
const jobKey = (j) => j.submission_id || j.job_id;
const jobLink = (id) => (id ? h("a", { href: `#/jobs/${id}` }, id) : "");
const actorLink = (id) => (id ? h("a", { href: `#/actors/${id}` }, short(id)) : "");
const taskLink = (id) => h("a", { href: `#/tasks/${id}` }, short(id));
// A link to the log viewer for the log that `query` names (the query of /api/v0/logs/file).
const logLink = (query, text) => h("a", { href: `#/logs?${new URLSearchParams(query)}` }, text);
// Links to the stdout and the stderr of the worker, actor or task that `query` names.
const outErr = (query) => [logLink(query, "stdout"), " / ", logLink({ ...query, suffix: "err" }, "stderr")];
const newestFirst = (key) => (a, b) => (b[key] || 0) - (a[key] || 0);

// "2 ALIVE · 1 DEAD" as badges with their counts.
function stateCounts(counts, id) {
  const entries = Object.entries(counts).filter(([, n]) => n > 0);
  if (!entries.length) return h("p", { class: "muted", id }, "None yet.");
  return h("div", { class: "counts", id }, entries.map(([state, n]) => h("span", { class: "count" }, badge(state), ` ${n}`)));
}

function countBy(rows, key) {
  const counts = {};
  for (const row of rows) counts[row[key]] = (counts[row[key]] || 0) + 1;
  return counts;
}

function warnings(list) {
  if (!list || !list.length) return null;
  return h("div", { class: "warnings", id: "state-warnings" }, list.map((w) => h("p", {}, w)));
}

// Charts of the nodes' use over the last hour (/api/ui/usage), drawn as inline SVG. The head
// keeps one reading per node every step (5 s). A page's chart board outlives its refreshes:
// the page puts the same element back, and a chart is drawn again only when its readings
// changed, so charts neither flicker nor lose the point the mouse is on.

const SVG_NS = "http://www.w3.org/2000/svg";
const CHART = { width: 380, height: 150, left: 58, right: 12, top: 10, bottom: 24 };
const PALETTE = ["#3056d3", "#1a7f4b", "#b7791f", "#8e44ad", "#c0362c", "#0e8a9b", "#d53f8c", "#718096"];
// The spans a chart's time axis can have, in minutes (the shortest that holds the readings),
// and how many seconds apart its ticks are for each.
const SPANS = [[1, 15], [2, 30], [5, 60], [10, 120], [15, 300], [30, 300], [60, 600]];
// Steps a node's latest reading stands in for when it has none newer: its readings fall a
// step or so apart, and this long after its last one it counts as gone.
const CARRY_STEPS = 2;

// svg("path", {d: "M0,0"}) builds an SVG element; strings become text nodes.
function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) if (value != null) el.setAttribute(key, value);
  for (const child of children.flat(Infinity)) {
    if (child != null) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Replaces the children of `el` with `nodes`, flattened, leaving out nulls.
const refill = (el, ...nodes) => el.replaceChildren(...nodes.flat(Infinity).filter((n) => n != null));

const sum = (xs) => xs.reduce((a, b) => a + b, 0);
const mean = (xs) => (xs.length ? sum(xs) / xs.length : null);
const total = (xs) => (xs.length ? sum(xs) : null);
const percent = (v) => `${+(100 * v).toFixed(v > 0 && v < 0.1 ? 1 : 0)}%`;
const whole = (v) => String(Math.round(v));
const shortBytes = (n) => bytes(n).replace(".0 ", " ");
const ago = (ms) => (ms < 1000 ? "now" : `${duration(ms)} ago`);
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// One sample per reading of a node; a gap of more than the carried steps breaks its lines.
function nodeSamples(readings, step) {
  const samples = [];
  for (const r of readings) {
    const last = samples.at(-1);
    if (last && r.time_ms - last.time > (CARRY_STEPS + 1) * step) samples.push({ time: last.time + step, readings: [] });
    samples.push({ time: r.time_ms, readings: [r] });
  }
  return samples;
}

// The cluster's samples: every node's readings on the step grid (times rounded down to a
// step), one sample a step from the oldest to the newest.
function clusterSamples(nodes, step) {
  const grids = Object.values(nodes).map((list) => new Map(list.map((r) => [Math.floor(r.time_ms / step) * step, r])));
  const times = grids.flatMap((grid) => [...grid.keys()]);
  if (!times.length) return [];
  const [first, last] = times.reduce(([lo, hi], t) => [Math.min(lo, t), Math.max(hi, t)], [Infinity, -Infinity]);
  const samples = [];
  for (let t = first; t <= last; t += step) {
    samples.push({ time: t, readings: grids.map((grid) => carried(grid, t, step)).filter(Boolean) });
  }
  return samples;
}

// A node's reading at grid time `t`, or its latest of the steps before.
function carried(grid, t, step) {
  for (let k = 0; k <= CARRY_STEPS; k++) {
    const r = grid.get(t - k * step);
    if (r) return r;
  }
  return null;
}

const gpusOf = (sample) => sample.readings.flatMap((r) => r.gpus || []);
const field = (key, reduce) => (sample) => reduce(sample.readings.map((r) => r[key]));
const line = (name, value, color = PALETTE[0]) => ({ name, value, color });
const peakOf = (samples, value) => samples.reduce((top, s) => Math.max(top, value(s) ?? 0), 0);

// The smallest power of two at least `n` bytes (a MiB at least).
const bytesCeil = (n) => 2 ** Math.max(20, Math.ceil(Math.log2(Math.max(n, 1))));

// A round count at least `n`: 2 to 10 in twos, then 1, 2 or 5 times a power of ten.
function countCeil(n) {
  if (n <= 10) return Math.max(2, 2 * Math.ceil(n / 2));
  const scale = 10 ** Math.floor(Math.log10(n));
  return [1, 2, 5, 10].map((m) => m * scale).find((m) => m >= n);
}

// What a chart shows: `lines` of `value(sample)` (null where there is none), its y axis from 0
// to `max(peak)`, and for a used amount the `total` it is used of.
function usageSpecs(samples, { cluster, storeCapacity }) {
  const specs = [
    { id: "cpu", title: "CPU", note: cluster ? `mean of ${plural(samples.at(-1).readings.length, "node")}` : "of the node's CPUs",
      format: percent, max: () => 1, lines: [line("busy", field("cpu_fraction", mean))] },
    { id: "memory", title: "Memory", note: cluster ? "all nodes" : null, format: shortBytes,
      total: field("memory_total", total), max: () => peakOf(samples, field("memory_total", total)) || 1,
      lines: [line("used", field("memory_used", total))] },
    { id: "object-store", title: "Object store", note: storeCapacity ? `of ${shortBytes(storeCapacity)}` : null, format: shortBytes,
      max: (peak) => (peak <= storeCapacity ? storeCapacity : bytesCeil(peak)),
      lines: [line("in memory", field("object_store_used", total)), line("spilled", field("object_store_spilled", total), PALETTE[2])] },
    { id: "running", title: "Tasks and actors running", note: cluster ? "all nodes" : null, format: whole, max: countCeil,
      lines: [line("running", field("workers_leased", total))] },
  ];
  if (samples.some((s) => gpusOf(s).length)) specs.push(...(cluster ? clusterGpuSpecs(samples) : nodeGpuSpecs(samples)));
  return specs;
}

function clusterGpuSpecs(samples) {
  const count = gpusOf(samples.at(-1)).length;
  const memoryTotal = (s) => total(gpusOf(s).map((g) => g.memory_total));
  return [
    { id: "gpu", title: "GPU", note: `mean of ${plural(count, "GPU")}`, format: percent, max: () => 1,
      lines: [line("busy", (s) => mean(gpusOf(s).map((g) => g.utilization)))] },
    { id: "gpu-memory", title: "GPU memory", note: "all GPUs", format: shortBytes, total: memoryTotal,
      max: () => peakOf(samples, memoryTotal) || 1, lines: [line("used", (s) => total(gpusOf(s).map((g) => g.memory_used)))] },
  ];
}

// A node's GPUs: a line each.
function nodeGpuSpecs(samples) {
  const indexes = [...new Set(samples.flatMap((s) => gpusOf(s).map((g) => g.index)))].sort((a, b) => a - b);
  const of = (index, key) => (s) => gpusOf(s).find((g) => g.index === index)?.[key] ?? null;
  const lines = (key) => indexes.map((index, i) => line(`GPU ${index}`, of(index, key), PALETTE[i % PALETTE.length]));
  const memoryMax = samples.reduce((top, s) => Math.max(top, ...gpusOf(s).map((g) => g.memory_total)), 0);
  return [
    { id: "gpu", title: "GPU", note: "per GPU", format: percent, max: () => 1, lines: lines("utilization") },
    { id: "gpu-memory", title: "GPU memory", note: memoryMax ? `of ${shortBytes(memoryMax)} each` : null, format: shortBytes,
      max: (peak) => Math.max(memoryMax, peak) || 1, lines: lines("memory_used") },
  ];
}

// The page's chart board: `key` names what it charts; another key starts a new one.
let board = null;

// The board of `key` showing `usage` (a reply of /api/ui/usage, or why there is none).
function usagePanel(key, usage, options) {
  if (board?.key !== key) {
    const body = h("div", { class: "charts" });
    board = { key, body, el: panel("Use over the last hour", body), charts: new Map(), signature: null };
    board.el.id = "usage";
  }
  if (usage instanceof Error) showOnBoard(h("p", { class: "error" }, `Use not available: ${usage.message}`));
  else drawBoard(usage, options);
  return board.el;
}

function showOnBoard(...nodes) {
  board.charts.clear();
  board.signature = null;
  board.body.replaceChildren(...nodes);
}

function drawBoard(usage, options) {
  const signature = JSON.stringify([options, Object.entries(usage.nodes).map(([id, list]) => [id, list.length, list.at(-1)?.time_ms])]);
  if (signature === board.signature) return;
  const step = usage.step_ms;
  const samples = options.cluster ? clusterSamples(usage.nodes, step) : nodeSamples(Object.values(usage.nodes)[0] || [], step);
  if (!samples.length) return showOnBoard(h("p", { class: "muted", id: "usage-empty" }, "No readings yet: nodes report their use every few seconds."));
  const now = samples.at(-1).time;
  const minutes = SPANS.find(([m]) => m * 60_000 >= now - samples[0].time) || SPANS.at(-1);
  const view = { now, span: minutes[0] * 60_000, tick: minutes[1] * 1000 };
  const charts = usageSpecs(samples, options).map((spec) => {
    const chart = board.charts.get(spec.id) || newChart(spec.id);
    drawChart(chart, spec, samples, view);
    return [spec.id, chart];
  });
  board.charts = new Map(charts);
  board.signature = signature;
  const els = charts.map(([, chart]) => chart.el);
  if (els.length !== board.body.children.length || els.some((el, i) => board.body.children[i] !== el)) board.body.replaceChildren(...els);
}

function newChart(id) {
  const chart = {
    title: h("h3", {}),
    note: h("span", { class: "muted" }),
    value: h("div", { class: "chart-value" }),
    svg: svg("svg", { class: "chart-svg", viewBox: `0 0 ${CHART.width} ${CHART.height}`, role: "img" }),
    hover: null,
  };
  chart.el = h("div", { class: "chart", "data-chart": id }, h("div", { class: "chart-head" }, chart.title, chart.note), chart.value, chart.svg);
  chart.svg.addEventListener("mousemove", (event) => hoverAt(chart, event));
  chart.svg.addEventListener("mouseleave", () => { chart.hover = null; readout(chart); });
  return chart;
}

// Plot coordinates of a time and a value.
function scales(view, max) {
  const { width, height, left, right, top, bottom } = CHART;
  return {
    x: (t) => left + ((t - (view.now - view.span)) / view.span) * (width - left - right),
    y: (v) => top + (1 - Math.min(v, max) / max) * (height - top - bottom),
  };
}

function drawChart(chart, spec, samples, view) {
  const peak = Math.max(...spec.lines.map((l) => peakOf(samples, l.value)));
  const max = spec.max(peak) || 1;
  const { x, y } = scales(view, max);
  chart.title.textContent = spec.title;
  chart.note.textContent = spec.note || "";
  chart.svg.setAttribute("aria-label", spec.title);
  Object.assign(chart, { spec, samples, view, x, y });
  chart.marks = svg("g", { class: "marks" });
  refill(chart.svg,
    valueAxis(spec.format, max, y), timeAxis(view, x, y(0)),
    spec.lines.map((l, i) => plotLine(samples, l, x, y, i === 0)), chart.marks);
  readout(chart);
}

function valueAxis(format, max, y) {
  return svg("g", { class: "axis" }, [0, max / 2, max].map((v) => [
    svg("line", { class: "grid-line", x1: CHART.left, x2: CHART.width - CHART.right, y1: y(v), y2: y(v) }),
    svg("text", { x: CHART.left - 6, y: y(v) + 3.5, "text-anchor": "end" }, format(v)),
  ]));
}

function timeAxis(view, x, base) {
  const ticks = [];
  for (let back = 0; back <= view.span; back += view.tick) ticks.push(back);
  return svg("g", { class: "axis" }, ticks.map((back) => [
    svg("line", { class: "tick", x1: x(view.now - back), x2: x(view.now - back), y1: base, y2: base + 4 }),
    svg("text", { x: x(view.now - back), y: base + 16, "text-anchor": back ? "middle" : "end" },
      back ? `${back < 60_000 ? `${back / 1000}s` : `${back / 60_000}m`} ago` : "now"),
  ]));
}

// A line's runs of [x, y] points (a gap in its values starts another run).
function runs(samples, value, x, y) {
  const out = [];
  let run = null;
  for (const s of samples) {
    const v = value(s);
    if (v == null) run = null;
    else {
      if (!run) out.push((run = []));
      run.push([x(s.time), y(v)]);
    }
  }
  return out;
}

const xy = ([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`;

// A line, a dot where it has a single point, and, for the first line, the area under it.
function plotLine(samples, l, x, y, filled) {
  const parts = runs(samples, l.value, x, y);
  const base = y(0);
  const area = parts.map((run) => `M${xy([run[0][0], base])}L${run.map(xy).join("L")}L${xy([run.at(-1)[0], base])}Z`).join("");
  return [
    filled ? svg("path", { class: "area", d: area, fill: l.color }) : null,
    svg("path", { class: "line", d: parts.map((run) => `M${run.map(xy).join("L")}`).join(""), stroke: l.color, "data-line": l.name }),
    parts.filter((run) => run.length === 1).map(([[cx, cy]]) => svg("circle", { class: "dot", cx, cy, r: 2.5, fill: l.color })),
  ];
}

// The sample nearest the mouse, shown in the readout and marked on the chart.
function hoverAt(chart, event) {
  if (!chart.samples) return;
  const point = new DOMPoint(event.clientX, event.clientY).matrixTransform(chart.svg.getScreenCTM().inverse());
  const nearest = chart.samples.reduce((best, s) => (Math.abs(chart.x(s.time) - point.x) < Math.abs(chart.x(best.time) - point.x) ? s : best));
  chart.hover = nearest.time;
  readout(chart);
}

// The chart's values: the newest, or those of the sample under the mouse.
function readout(chart) {
  const { spec, samples } = chart;
  const hovered = chart.hover == null ? null : samples.find((s) => s.time === chart.hover);
  const sample = hovered || samples.at(-1);
  const values = spec.lines.map((l) => {
    const v = l.value(sample);
    const text = v == null ? "–" : spec.format(v);
    if (spec.lines.length === 1) return text;
    return h("span", { class: "reading" }, h("span", { class: "swatch", style: `background:${l.color}` }), text, h("small", {}, ` ${l.name}`));
  });
  const of = spec.total?.(sample);
  refill(chart.value, values, of == null ? null : h("small", {}, ` of ${spec.format(of)}`),
    hovered ? h("small", { class: "when" }, ` · ${ago(chart.view.now - sample.time)}`) : null);
  refill(chart.marks, hovered ? hoverMarks(chart, sample) : []);
}

function hoverMarks(chart, sample) {
  const x = chart.x(sample.time);
  return [
    svg("line", { class: "rule", x1: x, x2: x, y1: CHART.top, y2: chart.y(0) }),
    chart.spec.lines.map((l) => {
      const v = l.value(sample);
      return v == null ? null : svg("circle", { cx: x, cy: chart.y(v), r: 3.5, fill: l.color, class: "hover-dot" });
    }),
  ];
}

// Pages. Each returns the nodes to show; the router re-runs it every REFRESH_MS.

async function overview() {
  const [status, jobs, events, usage] = await Promise.all([
    api("/api/cluster_status"),
    api(`/api/ui/jobs?limit=10`),
    api("/api/ui/events?limit=20"),
    orError(api("/api/ui/usage")),
  ]);
  const cluster = status.data.cluster_status;
  const counts = jobs.by_status;
  const meters = Object.entries(cluster.resources_total).map(([name, total]) => {
    const used = cluster.resources_used[name] || 0;
    const share = total > 0 ? Math.min(100, (100 * used) / total) : 0;
    return h("div", { class: "resource" },
      h("div", { class: "row" }, h("span", {}, name), h("span", { class: "muted" }, `${amount(name, used)} / ${amount(name, total)}`)),
      h("div", { class: "bar-meter" }, h("div", { style: `width:${share}%` })));
  });
  return [
    h("h1", {}, "Cluster overview"),
    h("div", { class: "grid" },
      panel("Nodes", h("div", { class: "stat", id: "nodes-alive" }, cluster.alive.length, h("small", {}, "alive")),
        h("div", { class: "muted" }, `${cluster.dead.length} dead`)),
      panel("Jobs", h("div", { class: "stat" }, jobs.total, h("small", {}, "total")),
        h("div", { class: "muted" }, ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"]
          .map((s) => `${counts[s] || 0} ${s.toLowerCase()}`).join(" · ")))),
    usagePanel("cluster", usage, { cluster: true, storeCapacity: cluster.resources_total.object_store_memory }),
    h("div", { class: "grid" },
      panel("Resources (used / total)", meters.length ? meters : h("p", { class: "muted" }, "No alive nodes.")),
      panel("Recent events", table(["Time", "Event"], events.map((e) =>
        h("tr", {}, h("td", { class: "muted" }, time(e.time_ms)), h("td", { class: `event-${e.severity}` }, e.message))),
      "Nothing has happened yet."))),
    panel("Latest jobs", jobTable(jobs.jobs)),
  ];
}

async function nodes() {
  const reply = await api("/api/v0/nodes?detail=True&limit=10000");
  const rows = reply.data.result.result;
  const now = Date.now();
  return [
    h("h1", {}, `Nodes (${rows.filter((n) => n.state === "ALIVE").length} alive, ${rows.filter((n) => n.state === "DEAD").length} dead)`),
    panel(null, table(["Node", "Address", "State", "Resources", "Labels", "Uptime"], rows.map((n) =>
      h("tr", { "data-node-id": n.node_id },
        h("td", { class: "mono" }, h("a", { href: `#/nodes/${n.node_id}` }, short(n.node_id)), n.is_head_node ? " (head)" : "", h("div", { class: "muted" }, n.node_name)),
        h("td", { class: "mono" }, n.node_ip),
        h("td", {}, badge(n.state), n.state_message ? h("div", { class: "muted" }, n.state_message) : null),
        h("td", {}, resourceList(n.resources_total)),
        h("td", { class: "mono" }, Object.entries(n.labels).filter(([k]) => k !== "ray.io/node_id").map(([k, v]) => `${k}=${v}`).join(", ")),
        h("td", {}, n.state === "ALIVE" ? duration(now - n.start_time_ms) : `ended ${time(n.end_time_ms)}`))),
    "No node has joined yet.")),
  ];
}

async function node(id) {
  const path = `/api/ui/nodes/${encodeURIComponent(id)}`;
  const [detail, log, workers, files, usage] = await Promise.all([
    api(path),
    orError(api(`${path}/log`)),
    orError(stateList("workers", [["node_id", id]])),
    orError(api(`/api/v0/logs?${new URLSearchParams({ node_id: id, glob: "*" })}`)),
    orError(api(`/api/ui/usage?${new URLSearchParams({ node_id: id })}`)),
  ]);
  const n = detail.node;
  return [
    h("h1", {}, `Node ${short(n.node_id)} `, badge(n.state)),
    panel("Details", nodeDetails(n)),
    usagePanel(`node ${id}`, usage, { cluster: false, storeCapacity: n.resources_total.object_store_memory }),
    panel("Workers", nodeWorkers(n, workers)),
    panel("Job drivers", jobDrivers(detail.workers)),
    panel("Log files", nodeLogFiles(id, files)),
    panel("Agent log (latest)", h("pre", { class: "log", id: "node-log" }, log instanceof Error ? `(log not available: ${log.message})` : log)),
  ];
}

function nodeDetails(n) {
  return h("dl", { class: "kv" },
    h("dt", {}, "Node id"), h("dd", { class: "mono", id: "node-id" }, n.node_id),
    h("dt", {}, "Name"), h("dd", {}, n.node_name),
    h("dt", {}, "Address"), h("dd", { class: "mono" }, n.node_ip),
    h("dt", {}, "Role"), h("dd", {}, n.is_head_node ? "head node" : "worker node"),
    h("dt", {}, "Resources (free / total)"), h("dd", {}, Object.entries(n.resources_total).filter(([k]) => !k.startsWith("node:"))
      .map(([k, v]) => `${k} ${amount(k, n.resources_available[k] || 0)} / ${amount(k, v)}`).join(", ")),
    h("dt", {}, "Labels"), h("dd", { class: "mono" }, Object.entries(n.labels).map(([k, v]) => `${k}=${v}`).join(", ")),
    h("dt", {}, "Started"), h("dd", {}, time(n.start_time_ms)),
    n.state_message ? [h("dt", {}, "State"), h("dd", {}, n.state_message)] : null);
}

// A worker's state: alive, or how it exited (Ray's exit types).
const workerState = (w) => badge(w.is_alive ? "ALIVE" : w.exit_type || "DEAD");

// The node's worker processes, alive first, then the newest that ended. Its agent keeps
// their record: a dead node's went with it.
function nodeWorkers(n, list) {
  if (list instanceof Error) return h("p", { class: "error", id: "node-workers" }, `Workers not available: ${list.message}`);
  const rows = list.result.sort((a, b) => b.is_alive - a.is_alive || (b.start_time_ms || 0) - (a.start_time_ms || 0));
  const [shown, pages] = paged(rows);
  return h("div", { id: "node-workers" },
    table(["PID", "Worker", "State", "Exit detail", "Started", "Ended", "Logs"], shown.map((w) =>
      h("tr", { "data-worker-id": w.worker_id, "data-pid": w.pid },
        h("td", { class: "mono" }, w.pid),
        h("td", { class: "mono" }, w.worker_id),
        h("td", {}, workerState(w)),
        h("td", { class: "muted" }, w.exit_detail || ""),
        h("td", {}, time(w.start_time_ms || w.worker_launch_time_ms)),
        h("td", {}, time(w.end_time_ms)),
        h("td", { class: "logs" }, outErr({ node_id: n.node_id, pid: w.pid })))),
    n.state === "ALIVE" ? "No worker has run on this node yet." : "The node is gone, and the record of its workers with it."),
    pages, warnings(list.warnings));
}

function jobDrivers(drivers) {
  return table(["PID", "Job", "Status", "Entrypoint", "Log"], drivers.map((w) =>
    h("tr", {}, h("td", { class: "mono" }, w.pid), h("td", { class: "mono" }, jobLink(jobKey(w))),
      h("td", {}, badge(w.status)), h("td", { class: "mono" }, w.entrypoint),
      // A driver of its own printed to its terminal: only a submission's driver has a log here.
      h("td", { class: "logs" }, w.submission_id ? logLink({ submission_id: w.submission_id }, "driver log") : ""))),
  "No job runs on this node now.");
}

// Ray's groups of a node's log files, in the order they are listed.
const LOG_GROUPS = [["worker_out", "Worker stdout"], ["worker_err", "Worker stderr"], ["driver", "Job drivers"],
  ["gcs_server", "Head"], ["agent", "Agent"], ["internal", "Other"]];

function nodeLogFiles(nodeId, reply) {
  if (reply instanceof Error) return h("p", { class: "error", id: "node-log-files" }, `Log files not available: ${reply.message}`);
  const groups = reply.data.result;
  const known = new Set(LOG_GROUPS.map(([key]) => key));
  const titled = [...LOG_GROUPS, ...Object.keys(groups).filter((k) => !known.has(k)).map((k) => [k, k])];
  const shown = titled.filter(([key]) => groups[key]?.length);
  if (!shown.length) return h("p", { class: "muted", id: "node-log-files" }, "This node has no log file yet.");
  return h("div", { id: "node-log-files" }, shown.map(([key, title]) => h("div", { class: "log-group", "data-group": key },
    h("h3", {}, `${title} (${groups[key].length})`),
    h("ul", { class: "files mono" }, groups[key].sort().map((f) => h("li", {}, logLink({ node_id: nodeId, filename: f }, f)))))));
}

// Where the page's list is paged to; another page starts again at the newest.
let pageOffset = 0;

function jobTable(jobs) {
  const now = Date.now();
  return table(["Job", "Status", "Entrypoint", "Submitted", "Duration"], jobs.map((j) =>
    h("tr", { "data-job-id": jobKey(j) },
      h("td", { class: "mono" }, h("a", { href: `#/jobs/${jobKey(j)}` }, jobKey(j))),
      h("td", {}, badge(j.status)),
      h("td", { class: "mono" }, j.entrypoint),
      h("td", {}, time(j.start_time)),
      h("td", {}, duration((j.end_time || now) - j.start_time)))),
  "No job has been submitted yet.");
}

async function jobs() {
  const page = await api(`/api/ui/jobs?offset=${pageOffset}&limit=${PAGE_SIZE}`);
  const move = (delta) => { pageOffset = Math.max(0, pageOffset + delta); render(); };
  return [
    h("h1", {}, `Jobs (${page.total})`),
    panel(null, jobTable(page.jobs), pager(pageOffset, page.jobs.length, page.total, move)),
  ];
}

const noWork = { result: [], num_filtered: 0, warnings: null };

async function job(id) {
  const j = await api(`/api/jobs/${encodeURIComponent(id)}`);
  // The tasks and actors of a job name its job id, which a submission has once its driver connected.
  const [actors, tasks] = j.job_id
    ? await Promise.all([stateList("actors", [["job_id", j.job_id]]), stateList("tasks", [["job_id", j.job_id]])])
    : [noWork, noWork];
  if (j.type === "DRIVER") return driverJob(j, actors, tasks);
  const terminal = ["SUCCEEDED", "FAILED", "STOPPED"].includes(j.status);
  // The page may have been reached by the job id: stop, delete and logs name the submission.
  const sid = j.submission_id;
  const act = async (method, path, then) => {
    try { await api(path, { method }); then(); } catch (e) { alert(e.message); }
  };
  return [
    h("h1", {}, `Job ${j.submission_id} `, badge(j.status)),
    h("div", { class: "actions" },
      h("button", { class: "danger", id: "stop-job", disabled: terminal, onclick: () => act("POST", `/api/jobs/${sid}/stop`, render) }, "Stop"),
      h("button", { id: "delete-job", disabled: !terminal, onclick: () => act("DELETE", `/api/jobs/${sid}`, () => { location.hash = "#/jobs"; }) }, "Delete")),
    panel("Details", h("dl", { class: "kv" },
      h("dt", {}, "Entrypoint"), h("dd", { class: "mono" }, j.entrypoint),
      h("dt", {}, "Message"), h("dd", {}, j.message || ""),
      h("dt", {}, "Submitted"), h("dd", {}, time(j.start_time)),
      h("dt", {}, "Ended"), h("dd", {}, time(j.end_time)),
      h("dt", {}, "Duration"), h("dd", {}, duration((j.end_time || Date.now()) - j.start_time)),
      h("dt", {}, "Exit code"), h("dd", {}, j.driver_exit_code ?? ""),
      h("dt", {}, "Node"), h("dd", { class: "mono" }, j.driver_node_id ? h("a", { href: `#/nodes/${j.driver_node_id}` }, short(j.driver_node_id)) : "not placed yet"),
      h("dt", {}, "Driver log"), h("dd", { id: "driver-log" }, j.driver_node_id ? logLink({ submission_id: j.submission_id }, "open in the log viewer") : "none yet"),
      h("dt", {}, "Metadata"), h("dd", { class: "mono" }, Object.entries(j.metadata || {}).map(([k, v]) => `${k}=${v}`).join(", ")),
      h("dt", {}, "Runtime env"), h("dd", { class: "mono" }, JSON.stringify(j.runtime_env || {})))),
    jobWork(j.job_id, actors, tasks),
    panel("Logs", logView(sid, terminal)),
  ];
}

// A driver that connected by itself: nothing to stop or delete, and its output went to its own terminal.
function driverJob(j, actors, tasks) {
  return [
    h("h1", {}, `Job ${j.job_id} `, badge(j.status)),
    panel("Details", h("dl", { class: "kv" },
      h("dt", {}, "Driver"), h("dd", { class: "mono" }, `${j.entrypoint} (pid ${j.driver_info?.pid ?? "?"} on ${j.driver_info?.node_ip_address || "?"})`),
      h("dt", {}, "Connected"), h("dd", {}, time(j.start_time)),
      h("dt", {}, "Disconnected"), h("dd", {}, time(j.end_time)),
      h("dt", {}, "Duration"), h("dd", {}, duration((j.end_time || Date.now()) - j.start_time)),
      h("dt", {}, "Node"), h("dd", { class: "mono" }, nodeLink(j.driver_node_id)))),
    jobWork(j.job_id, actors, tasks),
  ];
}

// The log element survives refreshes of the job page, so the live tail keeps appending.
let logFor = null;
let logEl = null;

function logView(id, terminal) {
  if (logFor === id && logEl) return logEl;
  closeSocket();
  logFor = id;
  logEl = h("pre", { class: "log", id: "job-log" });
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/api/jobs/${encodeURIComponent(id)}/logs/tail`);
  socket.onmessage = (event) => {
    const stick = logEl.scrollTop + logEl.clientHeight >= logEl.scrollHeight - 4;
    logEl.append(document.createTextNode(event.data));
    if (stick) logEl.scrollTop = logEl.scrollHeight;
  };
  socket.onclose = (event) => {
    if (event.code !== 1000 && logFor === id) logEl.append(document.createTextNode(`\n[log stream ended: ${event.reason || event.code}]`));
  };
  return logEl;
}

function closeSocket() {
  if (socket) socket.close();
  socket = null;
  logFor = null;
  logEl = null;
}

// Actors, tasks and placement groups, from Ray's state API. Tasks and actors reach the head
// about once a second after they change, so a page can trail its program by that much.

const TASK_STATES = ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "RUNNING", "FINISHED", "FAILED"];

// How long a task ran: milliseconds are worth showing for the short ones.
function elapsed(ms) {
  if (ms == null || ms < 0) return "";
  return ms < 1000 ? `${ms} ms` : ms < 60_000 ? `${(ms / 1000).toFixed(1)}s` : duration(ms);
}

function taskElapsed(t) {
  if (!t.start_time_ms) return "";
  return elapsed((t.end_time_ms || Date.now()) - t.start_time_ms);
}

function actorTable(rows) {
  return table(["Actor", "Class", "Name", "State", "Node", "PID", "Restarts", "Job"], rows.map((a) =>
    h("tr", { "data-actor-id": a.actor_id },
      h("td", { class: "mono" }, actorLink(a.actor_id)),
      h("td", {}, a.class_name),
      h("td", {}, a.name),
      h("td", {}, badge(a.state)),
      h("td", { class: "mono" }, nodeLink(a.node_id)),
      h("td", { class: "mono" }, a.pid || ""),
      h("td", {}, a.num_restarts),
      h("td", { class: "mono" }, jobLink(a.job_id)))),
  "No actor has been created yet.");
}

function taskTable(rows, empty = "No task has run yet.") {
  return table(["Task", "Name", "Type", "State", "Attempt", "Node", "Worker PID", "Duration", "Error"], rows.map((t) =>
    h("tr", { "data-task-id": t.task_id, "data-attempt": t.attempt_number },
      h("td", { class: "mono" }, taskLink(t.task_id)),
      h("td", {}, t.name),
      h("td", { class: "muted" }, t.type),
      h("td", {}, badge(t.state)),
      h("td", {}, t.attempt_number),
      h("td", { class: "mono" }, nodeLink(t.node_id)),
      h("td", { class: "mono" }, t.worker_pid ?? ""),
      h("td", {}, taskElapsed(t)),
      h("td", { class: "error-type" }, t.error_type || ""))),
  empty);
}

// The newest `PAGE_SIZE` rows from `pageOffset`, and a pager over all of them.
function paged(rows) {
  const move = (delta) => { pageOffset = Math.max(0, pageOffset + delta); render(); };
  const shown = rows.slice(pageOffset, pageOffset + PAGE_SIZE);
  return [shown, rows.length > PAGE_SIZE ? pager(pageOffset, shown.length, rows.length, move) : null];
}

async function actors() {
  const list = await stateList("actors");
  // Actors still being created have no start time yet: they are the newest.
  const rows = list.result.sort((a, b) => (b.start_time_ms || Infinity) - (a.start_time_ms || Infinity));
  const [shown, pages] = paged(rows);
  return [
    h("h1", {}, `Actors (${list.total})`),
    panel("By state", stateCounts(countBy(rows, "state"), "actor-counts")),
    panel(null, actorTable(shown), pages, warnings(list.warnings)),
  ];
}

async function actor(id) {
  const [list, work] = await Promise.all([stateList("actors", [["actor_id", id]]), stateList("tasks", [["actor_id", id]])]);
  const a = list.result[0];
  if (!a) return [h("h1", {}, `Actor ${short(id)}`), panel(null, h("p", { class: "muted" }, "The head has no actor with this id."))];
  const death = a.death_cause?.actor_died_error_context?.error_message;
  const [shown, pages] = paged(work.result.sort(newestFirst("creation_time_ms")));
  return [
    h("h1", {}, `Actor ${a.class_name}${a.name ? ` “${a.name}”` : ""} `, badge(a.state)),
    panel("Details", h("dl", { class: "kv" },
      h("dt", {}, "Actor id"), h("dd", { class: "mono", id: "actor-id" }, a.actor_id),
      h("dt", {}, "Class"), h("dd", {}, a.class_name),
      h("dt", {}, "Name"), h("dd", {}, a.name || h("span", { class: "muted" }, "anonymous")),
      h("dt", {}, "Namespace"), h("dd", {}, a.ray_namespace || ""),
      h("dt", {}, "Lifetime"), h("dd", {}, a.is_detached ? "detached: outlives its job" : "ends with its job"),
      h("dt", {}, "Job"), h("dd", { class: "mono" }, jobLink(a.job_id)),
      h("dt", {}, "Node"), h("dd", { class: "mono" }, nodeLink(a.node_id)),
      h("dt", {}, "PID"), h("dd", { class: "mono" }, a.pid || ""),
      h("dt", {}, "Logs"), h("dd", { id: "actor-logs" }, a.pid ? outErr({ actor_id: a.actor_id }) : "none yet: not placed on a worker"),
      h("dt", {}, "Resources"), h("dd", {}, resourceList(a.required_resources) || "none held while alive"),
      h("dt", {}, "Placement group"), h("dd", { class: "mono" }, a.placement_group_id ? h("a", { href: "#/placement-groups" }, a.placement_group_id) : "none"),
      h("dt", {}, "Restarts"), h("dd", {}, a.num_restarts),
      h("dt", {}, "Started"), h("dd", {}, time(a.start_time_ms)),
      h("dt", {}, "Ended"), h("dd", {}, time(a.end_time_ms)),
      h("dt", {}, "Death cause"), h("dd", {}, death ? h("pre", { class: "log", id: "death-cause" }, death) : "none"))),
    panel(`Tasks (${work.num_filtered})`, taskTable(shown, "No task of this actor has been reported yet."), pages, warnings(work.warnings)),
  ];
}

function taskFilters(params, names) {
  const state = h("select", { id: "filter-state", onchange: () => apply() },
    h("option", { value: "" }, "any state"),
    TASK_STATES.map((s) => h("option", { value: s, selected: params.get("state") === s }, s)));
  const name = h("input", { type: "search", id: "filter-name", list: "task-names", placeholder: "name, e.g. Counter.incr", value: params.get("name") || "" });
  const job = h("input", { type: "search", id: "filter-job", placeholder: "job id", value: params.get("job") || "" });
  const apply = (event) => {
    event?.preventDefault();
    const query = new URLSearchParams();
    for (const [key, field] of [["state", state], ["name", name], ["job", job]]) if (field.value.trim()) query.set(key, field.value.trim());
    const next = query.toString() ? `#/tasks?${query}` : "#/tasks";
    if (location.hash === next) render();
    else location.hash = next;
  };
  return h("form", { class: "filters", onsubmit: apply },
    h("label", {}, "State ", state), h("label", {}, "Name ", name), h("label", {}, "Job ", job),
    h("button", { type: "submit", class: "primary" }, "Filter"),
    h("a", { href: "#/tasks" }, "Clear"),
    h("datalist", { id: "task-names" }, names.map((n) => h("option", { value: n }))));
}

async function tasks(params) {
  // The server filters: the name must match whole, ignoring case.
  const filters = [["state", params.get("state")], ["name", params.get("name")], ["job_id", params.get("job")]].filter(([, v]) => v);
  const [summary, list] = await Promise.all([api("/api/v0/tasks/summarize"), stateList("tasks", filters)]);
  const cluster = summary.data.result.result.node_id_to_summary.cluster;
  const functions = Object.entries(cluster.summary).sort(([a], [b]) => a.localeCompare(b));
  const [shown, pages] = paged(list.result.sort(newestFirst("creation_time_ms")));
  return [
    h("h1", {}, `Tasks (${filters.length ? `${list.num_filtered} of ${list.total}` : list.total})`),
    warnings(list.warnings),
    panel("Summary",
      h("p", { class: "muted" }, `${cluster.total_tasks} tasks · ${cluster.total_actor_tasks} actor tasks · ${cluster.total_actor_scheduled} actor creations`),
      table(["Name", "Type", "States", "Total"], functions.map(([name, f]) =>
        h("tr", { "data-function": name },
          h("td", {}, h("a", { href: `#/tasks?name=${encodeURIComponent(name)}` }, name)),
          h("td", { class: "muted" }, f.type),
          h("td", {}, stateCounts(f.state_counts)),
          h("td", {}, Object.values(f.state_counts).reduce((x, y) => x + y, 0)))),
      "No task has run yet.")),
    panel(null, taskFilters(params, functions.map(([name]) => name)),
      taskTable(shown, filters.length ? "No task matches these filters." : "No task has run yet."), pages),
  ];
}

async function task(id) {
  const list = await stateList("tasks", [["task_id", id]]);
  const attempts = list.result.sort((a, b) => b.attempt_number - a.attempt_number);
  const t = attempts[0];
  if (!t) return [h("h1", {}, `Task ${short(id)}`), panel(null, h("p", { class: "muted" }, "The head has no task with this id: not reported yet, or ended long enough ago to be dropped."))];
  return [
    h("h1", {}, `Task ${t.name} `, badge(t.state)),
    panel("Details", h("dl", { class: "kv" },
      h("dt", {}, "Task id"), h("dd", { class: "mono", id: "task-id" }, t.task_id),
      h("dt", {}, "Name"), h("dd", {}, t.name),
      h("dt", {}, "Type"), h("dd", {}, t.type),
      h("dt", {}, "Job"), h("dd", { class: "mono" }, jobLink(t.job_id)),
      t.actor_id ? [h("dt", {}, "Actor"), h("dd", { class: "mono" }, h("a", { href: `#/actors/${t.actor_id}` }, t.actor_id))] : null,
      t.parent_task_id ? [h("dt", {}, "Parent task"), h("dd", { class: "mono" }, h("a", { href: `#/tasks/${t.parent_task_id}` }, t.parent_task_id))] : null,
      t.placement_group_id ? [h("dt", {}, "Placement group"), h("dd", { class: "mono" }, h("a", { href: "#/placement-groups" }, t.placement_group_id))] : null,
      h("dt", {}, "Attempts"), h("dd", {}, attempts.length))),
    attempts.map(attempt),
  ];
}

function attempt(a) {
  const created = a.creation_time_ms;
  return h("section", { class: "panel attempt", "data-attempt": a.attempt_number },
    h("h2", {}, `Attempt ${a.attempt_number} `, badge(a.state)),
    h("dl", { class: "kv" },
      h("dt", {}, "Node"), h("dd", { class: "mono" }, nodeLink(a.node_id) || "not placed yet"),
      h("dt", {}, "Worker"), h("dd", { class: "mono" }, a.worker_pid ? `pid ${a.worker_pid}` : "", a.worker_id ? h("span", { class: "muted" }, ` (${a.worker_id})`) : ""),
      h("dt", {}, "Logs"), h("dd", { class: "attempt-logs" }, attemptLogs(a)),
      h("dt", {}, "Resources"), h("dd", {}, resourceList(a.required_resources) || "none"),
      h("dt", {}, "Created"), h("dd", {}, time(created)),
      h("dt", {}, "Ran for"), h("dd", {}, taskElapsed(a)),
      a.error_type ? [h("dt", {}, "Error type"), h("dd", { class: "error-type" }, a.error_type)] : null),
    h("h3", {}, "State changes"),
    table(["State", "Time", "Since created"], (a.events || []).map((e) =>
      h("tr", {}, h("td", {}, badge(e.state)), h("td", {}, time(e.created_ms)), h("td", { class: "muted" }, `+${elapsed(e.created_ms - created)}`))),
    "No state change reported yet."),
    a.error_message ? [h("h3", {}, "Error"), h("pre", { class: "log task-error" }, a.error_message)] : null);
}

// An actor's tasks print into the actor's log; a normal task's attempt has its own share of
// its worker's log.
function attemptLogs(a) {
  if (a.actor_id) return [...outErr({ actor_id: a.actor_id }), h("span", { class: "muted" }, " (the actor's log)")];
  if (!a.worker_id) return "none yet: not run on a worker";
  return outErr({ task_id: a.task_id, attempt_number: a.attempt_number });
}

async function placementGroups() {
  const list = await stateList("placement_groups");
  const rows = list.result.sort(newestFirst("created_at_ms"));
  const [shown, pages] = paged(rows);
  return [
    h("h1", {}, `Placement groups (${list.total})`),
    panel("By state", stateCounts(countBy(rows, "state"), "pg-counts")),
    panel(null, table(["Placement group", "Name", "State", "Strategy", "Lifetime", "Created", "Bundles"], shown.map((g) =>
      h("tr", { "data-pg-id": g.placement_group_id },
        h("td", { class: "mono", title: g.placement_group_id }, short(g.placement_group_id)),
        h("td", {}, g.name),
        h("td", {}, badge(g.state)),
        h("td", {}, g.strategy),
        h("td", {}, g.is_detached ? "detached" : "job"),
        h("td", {}, time(g.created_at_ms)),
        h("td", {}, h("ul", { class: "bundles" }, g.bundles.map((b) =>
          h("li", {}, h("span", { class: "muted" }, `#${b.bundle_id.bundle_index} `), resourceList(b.unit_resources) || "nothing",
            b.node_id ? [" on ", h("span", { class: "mono" }, nodeLink(b.node_id))] : h("span", { class: "muted" }, " not placed"))))))),
    "No placement group has been created yet."), pages, warnings(list.warnings)),
  ];
}

// Serve: each application with its deployments and their replicas, from Serve's REST API
// (Ray's ServeInstanceDetails).
async function serveApps() {
  const details = await api("/api/serve/applications/");
  const apps = Object.values(details.applications || {}).sort((a, b) => a.name.localeCompare(b.name));
  const http = details.http_options;
  return [
    h("h1", {}, `Serve applications (${apps.length})`),
    apps.length ? panel("By status", stateCounts(countBy(apps, "status"), "serve-counts"),
      http?.port ? h("p", { class: "muted" }, `HTTP on port ${http.port}${http.host ? ` (${http.host})` : ""}`) : null)
      : panel(null, h("p", { class: "muted", id: "serve-empty" }, "Serve runs nothing: deploy with `oxray serve deploy`, `oxray serve run` or `serve.run`.")),
    ...apps.map(serveApp),
  ];
}

function serveApp(app) {
  const deployments = Object.values(app.deployments || {}).sort((a, b) => a.name.localeCompare(b.name));
  return h("section", { class: "panel", "data-serve-app": app.name },
    h("h2", {}, h("span", { class: "name" }, app.name), " ", badge(app.status)),
    h("dl", { class: "kv" },
      h("dt", {}, "Route prefix"), h("dd", { class: "mono" }, app.route_prefix ?? h("span", { class: "muted" }, "none: handles only")),
      h("dt", {}, "Deployed"), h("dd", {}, `${time(app.last_deployed_time_s * 1000)} (${app.source || ""})`),
      app.deployed_app_config?.import_path ? [h("dt", {}, "Import path"), h("dd", { class: "mono" }, app.deployed_app_config.import_path)] : null),
    app.message ? h("pre", { class: "log serve-message" }, app.message) : null,
    table(["Deployment", "Status", "Replicas", "Replica", "State", "Node", "Actor", "PID", "Logs"], deployments.flatMap(serveDeploymentRows),
      "No deployment yet."));
}

// A deployment's rows: its first replica beside it, the others below.
function serveDeploymentRows(d) {
  const replicas = d.replicas || [];
  const head = [
    h("td", { rowspan: Math.max(1, replicas.length) }, d.name, d.message ? h("div", { class: "muted" }, d.message) : null),
    h("td", { rowspan: Math.max(1, replicas.length) }, badge(d.status)),
    h("td", { rowspan: Math.max(1, replicas.length) }, `${replicas.filter((r) => r.state === "RUNNING").length} / ${d.target_num_replicas}`),
  ];
  const cells = (r) => [
    h("td", { class: "mono" }, r.replica_id),
    h("td", {}, badge(r.state)),
    h("td", { class: "mono" }, nodeLink(r.node_id)),
    h("td", { class: "mono" }, actorLink(r.actor_id)),
    h("td", { class: "mono" }, r.pid || ""),
    h("td", {}, r.actor_id && r.pid ? outErr({ actor_id: r.actor_id }) : ""),
  ];
  if (!replicas.length) return [h("tr", { "data-deployment": d.name }, head, h("td", { colspan: 6, class: "muted" }, "no replica"))];
  return replicas.map((r, i) => h("tr", { "data-deployment": d.name, "data-replica": r.replica_id }, i ? null : head, cells(r)));
}

// The job page's view of what the job's program started.
function jobWork(id, actorList, taskList) {
  const shown = taskList.result.sort(newestFirst("creation_time_ms")).slice(0, PAGE_SIZE);
  return h("section", { class: "panel", id: "job-work" },
    h("h2", {}, `Actors (${actorList.num_filtered})`),
    actorTable(actorList.result.sort(newestFirst("start_time_ms"))),
    h("h2", { class: "spaced" }, `Tasks (${taskList.num_filtered})`),
    taskTable(shown, "No task of this job has been reported yet."),
    taskList.num_filtered > shown.length ? h("p", {}, h("a", { href: `#/tasks?job=${encodeURIComponent(id)}` }, `All ${taskList.num_filtered} tasks of this job`)) : null,
    warnings(taskList.warnings));
}

// The log viewer. Its query names a log as /api/v0/logs/file's does (a node's file, a
// worker's pid, an actor, a task attempt, a job's driver) with `suffix` and `lines`;
// `follow=true` reads /api/v0/logs/stream instead, which goes on sending what the log gains.
// A viewer is built once for its query: refreshes leave it be, and leaving it stops its read.
let viewer = null;

function stopViewer() {
  viewer?.controller.abort();
  viewer = null;
}

function logs(params) {
  const key = params.toString();
  if (viewer?.key === key) return viewer.nodes;
  stopViewer();
  const follow = params.get("follow") === "true";
  const query = new URLSearchParams(params);
  query.delete("follow");
  const view = {
    key,
    controller: new AbortController(),
    text: h("pre", { class: "log viewer", id: "log-text" }),
    status: h("span", { class: "muted", id: "log-status" }, "reading…"),
    error: h("p", { class: "error", id: "log-error", hidden: true }),
  };
  view.nodes = [h("h1", { id: "log-title" }, logSubject(params)), panel(null, logControls(params, follow, view.status), view.error, view.text)];
  viewer = view;
  readLog(view, follow ? "stream" : "file", query, follow);
  return view.nodes;
}

// Whose log the viewer shows, with a link to it.
function logSubject(p) {
  const stream = p.has("filename") || p.has("submission_id") ? "" : ` · ${p.get("suffix") === "err" ? "stderr" : "stdout"}`;
  const node = p.get("node_id") ? [" on node ", nodeLink(p.get("node_id"))] : p.get("node_ip") ? ` on ${p.get("node_ip")}` : "";
  const subject = p.has("actor_id") ? ["Actor ", actorLink(p.get("actor_id"))]
    : p.has("task_id") ? ["Task ", taskLink(p.get("task_id")), ` attempt ${p.get("attempt_number") || 0}`]
      : p.has("submission_id") ? ["Driver of job ", jobLink(p.get("submission_id"))]
        : p.has("pid") ? [`Worker pid ${p.get("pid")}`, node]
          : [p.get("filename") || "Log", node];
  return [...subject.flat(), stream];
}

// The viewer's hash with `changes` made to its query; a null value takes the key out.
function viewerHref(params, changes) {
  const next = new URLSearchParams(params);
  for (const [key, value] of Object.entries(changes)) {
    if (value == null) next.delete(key);
    else next.set(key, value);
  }
  return `#/logs?${next}`;
}

// Links to the choices of one setting, the current one marked.
function switcher(id, choices) {
  return h("span", { class: "switch", id }, choices.map(([text, href, on]) =>
    h("a", { href, class: on ? "on" : null, "aria-current": on ? "true" : null }, text)));
}

function logControls(p, follow, status) {
  const err = p.get("suffix") === "err";
  const lines = Number(p.get("lines") || 1000);
  const reload = () => { stopViewer(); render(); };
  const toggle = (event) => { location.hash = viewerHref(p, { follow: event.target.checked ? "true" : null }); };
  return h("div", { class: "log-controls" },
    p.has("filename") || p.has("submission_id") ? null : switcher("log-suffix",
      [["stdout", viewerHref(p, { suffix: null }), !err], ["stderr", viewerHref(p, { suffix: "err" }), err]]),
    switcher("log-lines", [["last 1000 lines", viewerHref(p, { lines: null }), lines === 1000], ["all", viewerHref(p, { lines: "-1" }), lines <= 0]]),
    h("label", { class: "follow" }, h("input", { type: "checkbox", id: "log-follow", checked: follow, onchange: toggle }), " follow"),
    h("button", { id: "log-reload", disabled: follow, onclick: reload }, "Reload"),
    status);
}

// Reads the viewer's log into its <pre>: what there is, or, following, also what comes.
async function readLog(view, kind, query, follow) {
  try {
    const response = await fetch(`/api/v0/logs/${kind}?${query}`, { credentials: "same-origin", signal: view.controller.signal });
    if (response.status === 401 || response.status === 403) throw new Unauthorized(await response.text());
    if (!response.ok) throw new Error((await response.text()) || `the log API answered ${response.status}`);
    view.status.textContent = follow ? "following: new lines appear as they are written" : "reading…";
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) appendLog(view.text, chunk.value, follow);
    if (viewer !== view) return;
    const n = view.text.textContent.split("\n").filter(Boolean).length;
    view.status.textContent = `${follow ? "The stream ended. " : ""}${n ? `${n} line${n === 1 ? "" : "s"}` : "The log is empty."}`;
  } catch (e) {
    if (viewer !== view) return;
    if (e instanceof Unauthorized) return login();
    view.status.textContent = "";
    view.error.textContent = `This log cannot be shown: ${e.message}`;
    view.error.hidden = false;
    view.text.hidden = !view.text.textContent;
  }
}

// Characters a followed log keeps: older lines make way for new ones.
const FOLLOW_KEEP = 4_000_000;

// Appends to a log, keeping its end in view when it was.
function appendLog(pre, text, follow) {
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.append(document.createTextNode(text));
  if (pre.childNodes.length > 500) trimLog(pre, follow ? FOLLOW_KEEP : Infinity);
  if (atEnd) pre.scrollTop = pre.scrollHeight;
}

// Makes the log's text one node again, without the lines before the last `keep` characters.
function trimLog(pre, keep) {
  const all = pre.textContent;
  pre.textContent = all.length > keep ? all.slice(all.indexOf("\n", all.length - keep) + 1) : all;
}

function login(reason) {
  closeSocket();
  stopViewer();
  document.getElementById("nav").hidden = true;
  document.getElementById("live").hidden = true;
  const input = h("input", { type: "password", id: "token", placeholder: "cluster token", autocomplete: "off" });
  const error = h("div", { class: "error", id: "login-error" }, reason || "");
  const submit = async (event) => {
    event.preventDefault();
    const response = await fetch("/api/authenticate", { method: "POST", headers: { Authorization: `Bearer ${input.value.trim()}` } });
    if (response.ok) render();
    else error.textContent = "That token is not this cluster's.";
  };
  main.replaceChildren(h("form", { class: "panel login", onsubmit: submit },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "This cluster needs its token. Run `oxray get-auth-token` on the head to print it."),
    input, h("button", { class: "primary", type: "submit" }, "Sign in"), error));
  input.focus();
}

const routes = [
  [/^#?\/?$/, "overview", () => overview()],
  [/^#\/nodes$/, "nodes", () => nodes()],
  [/^#\/nodes\/([0-9a-f]+)$/, "nodes", (m) => node(m[1])],
  [/^#\/jobs$/, "jobs", () => jobs()],
  [/^#\/jobs\/([A-Za-z0-9_.-]+)$/, "jobs", (m) => job(m[1])],
  [/^#\/actors$/, "actors", () => actors()],
  [/^#\/actors\/([0-9a-f]+)$/, "actors", (m) => actor(m[1])],
  [/^#\/tasks(?:\?(.*))?$/, "tasks", (m) => tasks(new URLSearchParams(m[1] || ""))],
  [/^#\/tasks\/([0-9a-f]+)$/, "tasks", (m) => task(m[1])],
  [/^#\/placement-groups$/, "placement-groups", () => placementGroups()],
  [/^#\/serve$/, "serve", () => serveApps()],
  [/^#\/logs(?:\?(.*))?$/, (m) => logsTab(new URLSearchParams(m[1] || "")), (m) => logs(new URLSearchParams(m[1] || ""))],
];

// The tab a log belongs under: its actor's, its task's, its job's or its node's.
function logsTab(p) {
  return p.has("actor_id") ? "actors" : p.has("task_id") ? "tasks" : p.has("submission_id") ? "jobs" : "nodes";
}

// Whether `main` shows these very nodes already (the log viewer's, between refreshes).
const showing = (nodes) => nodes.length === main.childNodes.length && nodes.every((node, i) => main.childNodes[i] === node);

// Someone typing into a field of the page: a refresh would take the field away.
const typing = () => main.contains(document.activeElement) && document.activeElement.matches("input");

async function render(auto = false) {
  clearTimeout(timer);
  if (auto && typing()) {
    timer = setTimeout(render, REFRESH_MS, true);
    return;
  }
  const hash = location.hash || "#/";
  const [pattern, tab, page] = routes.find(([p]) => p.test(hash)) || routes[0];
  if (!hash.startsWith("#/jobs/")) closeSocket();
  if (!hash.startsWith("#/logs")) stopViewer();
  try {
    const match = hash.match(pattern);
    const content = (await page(match)).flat().filter((x) => x != null);
    if ((location.hash || "#/") !== hash) return;
    if (!showing(content)) main.replaceChildren(...content);
    document.getElementById("nav").hidden = false;
    document.getElementById("live").hidden = false;
    const active = typeof tab === "function" ? tab(match) : tab;
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.tab === active);
  } catch (e) {
    if (e instanceof Unauthorized) return login();
    main.replaceChildren(panel("Error", h("p", {}, e.message)));
  }
  timer = setTimeout(render, REFRESH_MS, true);
}

window.addEventListener("hashchange", () => { pageOffset = 0; render(); });
render();
