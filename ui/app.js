// The oxray dashboard: a single page over the head's HTTP API. It polls what it shows every
// few seconds and follows running jobs' logs over the log-tail WebSocket. Every piece of
// cluster data is inserted as text, never as HTML.
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
  if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
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

// Pages. Each returns the nodes to show; the router re-runs it every REFRESH_MS.

async function overview() {
  const [status, jobs, events] = await Promise.all([
    api("/api/cluster_status"),
    api(`/api/ui/jobs?limit=10`),
    api("/api/ui/events?limit=20"),
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
  const detail = await api(`/api/ui/nodes/${encodeURIComponent(id)}`);
  const n = detail.node;
  let log;
  try {
    log = await api(`/api/ui/nodes/${encodeURIComponent(id)}/log`);
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    log = `(log not available: ${e.message})`;
  }
  return [
    h("h1", {}, `Node ${short(n.node_id)} `, badge(n.state)),
    panel("Details", h("dl", { class: "kv" },
      h("dt", {}, "Node id"), h("dd", { class: "mono", id: "node-id" }, n.node_id),
      h("dt", {}, "Name"), h("dd", {}, n.node_name),
      h("dt", {}, "Address"), h("dd", { class: "mono" }, n.node_ip),
      h("dt", {}, "Role"), h("dd", {}, n.is_head_node ? "head node" : "worker node"),
      h("dt", {}, "Resources (free / total)"), h("dd", {}, Object.entries(n.resources_total).filter(([k]) => !k.startsWith("node:"))
        .map(([k, v]) => `${k} ${amount(k, n.resources_available[k] || 0)} / ${amount(k, v)}`).join(", ")),
      h("dt", {}, "Labels"), h("dd", { class: "mono" }, Object.entries(n.labels).map(([k, v]) => `${k}=${v}`).join(", ")),
      h("dt", {}, "Started"), h("dd", {}, time(n.start_time_ms)),
      n.state_message ? [h("dt", {}, "State"), h("dd", {}, n.state_message)] : null)),
    panel("Worker processes", table(["PID", "Job", "Status", "Entrypoint"], detail.workers.map((w) =>
      h("tr", {}, h("td", { class: "mono" }, w.pid), h("td", { class: "mono" }, h("a", { href: `#/jobs/${w.submission_id}` }, w.submission_id)),
        h("td", {}, badge(w.status)), h("td", { class: "mono" }, w.entrypoint))),
    "No job runs on this node now.")),
    panel("Agent log (latest)", h("pre", { class: "log", id: "node-log" }, log)),
  ];
}

let jobsOffset = 0;

function jobTable(jobs) {
  const now = Date.now();
  return table(["Job", "Status", "Entrypoint", "Submitted", "Duration"], jobs.map((j) =>
    h("tr", { "data-job-id": j.submission_id },
      h("td", { class: "mono" }, h("a", { href: `#/jobs/${j.submission_id}` }, j.submission_id)),
      h("td", {}, badge(j.status)),
      h("td", { class: "mono" }, j.entrypoint),
      h("td", {}, time(j.start_time)),
      h("td", {}, duration((j.end_time || now) - j.start_time)))),
  "No job has been submitted yet.");
}

async function jobs() {
  const page = await api(`/api/ui/jobs?offset=${jobsOffset}&limit=${PAGE_SIZE}`);
  const last = Math.min(page.total, jobsOffset + page.jobs.length);
  const move = (delta) => { jobsOffset = Math.max(0, jobsOffset + delta); render(); };
  return [
    h("h1", {}, `Jobs (${page.total})`),
    panel(null, jobTable(page.jobs),
      h("div", { class: "pager" },
        h("button", { onclick: () => move(-PAGE_SIZE), disabled: jobsOffset === 0 }, "Newer"),
        h("span", {}, page.total ? `${jobsOffset + 1}–${last} of ${page.total}, newest first` : ""),
        h("button", { onclick: () => move(PAGE_SIZE), disabled: last >= page.total }, "Older"))),
  ];
}

async function job(id) {
  const j = await api(`/api/jobs/${encodeURIComponent(id)}`);
  const terminal = ["SUCCEEDED", "FAILED", "STOPPED"].includes(j.status);
  const act = async (method, path, then) => {
    try { await api(path, { method }); then(); } catch (e) { alert(e.message); }
  };
  return [
    h("h1", {}, `Job ${j.submission_id} `, badge(j.status)),
    h("div", { class: "actions" },
      h("button", { class: "danger", id: "stop-job", disabled: terminal, onclick: () => act("POST", `/api/jobs/${id}/stop`, render) }, "Stop"),
      h("button", { id: "delete-job", disabled: !terminal, onclick: () => act("DELETE", `/api/jobs/${id}`, () => { location.hash = "#/jobs"; }) }, "Delete")),
    panel("Details", h("dl", { class: "kv" },
      h("dt", {}, "Entrypoint"), h("dd", { class: "mono" }, j.entrypoint),
      h("dt", {}, "Message"), h("dd", {}, j.message || ""),
      h("dt", {}, "Submitted"), h("dd", {}, time(j.start_time)),
      h("dt", {}, "Ended"), h("dd", {}, time(j.end_time)),
      h("dt", {}, "Duration"), h("dd", {}, duration((j.end_time || Date.now()) - j.start_time)),
      h("dt", {}, "Exit code"), h("dd", {}, j.driver_exit_code ?? ""),
      h("dt", {}, "Node"), h("dd", { class: "mono" }, j.driver_node_id ? h("a", { href: `#/nodes/${j.driver_node_id}` }, short(j.driver_node_id)) : "not placed yet"),
      h("dt", {}, "Metadata"), h("dd", { class: "mono" }, Object.entries(j.metadata || {}).map(([k, v]) => `${k}=${v}`).join(", ")),
      h("dt", {}, "Runtime env"), h("dd", { class: "mono" }, JSON.stringify(j.runtime_env || {})))),
    panel("Logs", logView(id, terminal)),
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

function login(reason) {
  closeSocket();
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
];

async function render() {
  clearTimeout(timer);
  const hash = location.hash || "#/";
  const [pattern, tab, page] = routes.find(([p]) => p.test(hash)) || routes[0];
  if (!hash.startsWith("#/jobs/")) closeSocket();
  try {
    const content = await page(hash.match(pattern));
    if ((location.hash || "#/") !== hash) return;
    main.replaceChildren(...content);
    document.getElementById("nav").hidden = false;
    document.getElementById("live").hidden = false;
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.tab === tab);
  } catch (e) {
    if (e instanceof Unauthorized) return login();
    main.replaceChildren(panel("Error", h("p", {}, e.message)));
  }
  timer = setTimeout(render, REFRESH_MS);
}

window.addEventListener("hashchange", () => { jobsOffset = 0; render(); });
render();
