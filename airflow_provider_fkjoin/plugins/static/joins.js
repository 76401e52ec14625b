// The Joins view's pages: the outputs list, one output's history (with a uPlot chart), one refresh.
// Data comes from the plugin's JSON endpoints; the browser sends Airflow's login cookie with each call.
"use strict";

const body = document.body;
const prefix = body.dataset.prefix;
const params = new URLSearchParams(window.location.search);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child ?? ""));
  }
  return node;
}

async function getJson(path) {
  const response = await fetch(prefix + path, { credentials: "same-origin" });
  if (!response.ok) {
    throw new Error(`${response.status} ${response.statusText}: ${await response.text()}`);
  }
  return response.json();
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 90) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

// Times are shown in the timezone chosen in Airflow's UI (its "timezone" setting in this origin's local
// storage), else the one the API reports ([core] default_timezone), else the browser's.
let timeZone;

function chosenTimeZone(configured) {
  let chosen = null;
  try {
    const stored = window.localStorage.getItem("timezone");
    if (stored) chosen = stored.startsWith('"') ? JSON.parse(stored) : stored;
  } catch (error) {
    chosen = null;
  }
  for (const zone of [chosen, configured]) {
    if (!zone) continue;
    try {
      new Intl.DateTimeFormat("en", { timeZone: zone });
      return zone;
    } catch (error) {
      // not a zone this browser knows: try the next
    }
  }
  return Intl.DateTimeFormat().resolvedOptions().timeZone;
}

function when(iso) {
  if (!iso) return "";
  const options = {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    hour12: false, timeZoneName: "short",
  };
  return new Intl.DateTimeFormat("sv-SE", { ...options, timeZone: timeZone }).format(new Date(iso));
}

function rows(counts) {
  if (!counts) return "";
  return `+${counts.inserted ?? 0} ~${counts.updated ?? 0} -${counts.deleted ?? 0}`;
}

const enc = encodeURIComponent;

function uiLink(href, label, attrs = {}) {
  // the view runs in Airflow's iframe: links into Airflow's UI replace the whole page
  return el("a", { href, target: "_top", ...attrs }, label);
}

function taskInstanceHref(origin) {
  let href = `/dags/${enc(origin.dag_id)}/runs/${enc(origin.run_id)}/tasks/${enc(origin.task_id)}`;
  if (origin.map_index !== undefined && origin.map_index !== null && origin.map_index >= 0) {
    href += `/mapped/${origin.map_index}`;
  }
  return href;
}

function taskInstanceLink(origin, label) {
  if (!origin || !origin.dag_id || !origin.run_id || !origin.task_id) return label;
  return uiLink(taskInstanceHref(origin), label);
}

function shortened(text, limit = 160) {
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}

function tableName(location) {
  if (!location) return "(not readable)";
  return location.replace(/\/+$/, "").split("/").pop() || location;
}

function badge(state, title) {
  return el("span", { class: `badge state-${state || "none"}`, title: title || "" }, state || "no run");
}

function inputLines(row) {
  return Object.entries(row.inputs || {}).map(([side, info]) => {
    if (info.error) {
      return el("div", { class: "unreadable", title: info.error }, shortened(`${side}: unreadable: ${info.error}`));
    }
    const text = info.lag_versions
      ? `${side}: ${info.consumed_version} of ${info.latest_version} (${info.lag_versions} behind, ` +
        `for ${duration(info.lag_s)})`
      : `${side}: ${info.consumed_version} (latest)`;
    return el("div", { class: info.lag_versions ? "stale detail" : "fresh detail" }, text);
  });
}

function policyText(policy) {
  if (!policy) return "no freshness policy";
  const parts = [];
  if (policy.warn_after) parts.push(`warn after ${duration(policy.warn_after)}`);
  if (policy.error_after) parts.push(`error after ${duration(policy.error_after)}`);
  return parts.join(", ");
}

function freshnessCell(row) {
  if (row.error) return el("td", { class: "unreadable", title: row.error }, shortened(row.error));
  const lag = row.lag_s === null || row.lag_s === undefined
    ? "lag unknown"
    : row.lag_s === 0 ? "up to date" : `${duration(row.lag_s)} behind`;
  const state = row.freshness_state;
  const head = el("div", {},
    state ? badge(state, policyText(row.freshness_policy)) : "", state ? " " : "",
    el("strong", { class: row.lag_s ? "stale" : "fresh" }, lag));
  return el("td", {}, head, ...inputLines(row));
}

function lastTaskCell(row) {
  const ti = row.last_task;
  if (!ti) return el("td", { class: "muted" }, "no run yet");
  const origin = { dag_id: row.dag_id, task_id: row.task_id, run_id: ti.run_id, map_index: ti.map_index };
  return el("td", {},
    uiLink(taskInstanceHref(origin), badge(ti.state, `try ${ti.try_number}`)), el("br"),
    uiLink(`/dags/${enc(row.dag_id)}/runs/${enc(ti.run_id)}`, "latest run", { class: "muted" }));
}

// The plan a refresh ran (plan.js): the plan, what chose it, its actual seconds and both estimates; a plan
// that took more than WARN_RATIO times the other plan's estimate is marked, with why in its warning.
function planNodes(strategy) {
  const plan = planSummary(strategy, duration);
  if (!plan) return [];
  const nodes = [el("span", { class: "plan-text" }, plan.text)];
  if (plan.warning) nodes.push(el("div", { class: "plan-warning" }, `⚠ ${plan.warning}`));
  return nodes;
}

function planCell(strategy) {
  const slower = slowerPlan(strategy);
  return el("td", { class: slower ? "plan slow-plan" : "plan", "data-slower": slower }, ...planNodes(strategy));
}

function table(headers, bodyRows) {
  return el("table", {}, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...bodyRows));
}

const STATE_ORDER = { error: 4, unknown: 3, warn: 2, ok: 1 };

// Sortable table: each column {title, cell(row), sort(row)}; a click on a header sorts by it (again:
// the other way).
function sortableTable(columns, data, initial) {
  const tbody = el("tbody", {});
  let current = { index: initial, descending: true };
  const render = () => {
    const column = columns[current.index];
    const keyed = data.map((row, order) => ({ row, order, key: column.sort(row) }));
    keyed.sort((a, b) => {
      const missing = (a.key === null || a.key === undefined) - (b.key === null || b.key === undefined);
      if (missing) return missing;  // unknown values last, whichever the direction
      const diff = a.key < b.key ? -1 : a.key > b.key ? 1 : a.order - b.order;
      return current.descending ? -diff : diff;
    });
    tbody.replaceChildren(...keyed.map(({ row }) => columns.reduce(
      (tr, c) => { tr.append(c.cell(row)); return tr; },
      el("tr", { "data-output": row.output || "", "data-dag": row.dag_id, "data-task": row.task_id,
        class: row.freshness_state ? `freshness-${row.freshness_state}` : "" }))));
    headers.forEach((th, i) => {
      th.setAttribute("aria-sort", i === current.index ? (current.descending ? "descending" : "ascending") : "none");
    });
  };
  const headers = columns.map((column, index) => {
    const th = el("th", { class: column.sort ? "sortable" : "", "data-column": column.key }, column.title);
    if (column.sort) {
      th.addEventListener("click", () => {
        current = { index, descending: current.index === index ? !current.descending : true };
        render();
      });
    }
    return th;
  });
  render();
  return el("table", { id: "outputs" }, el("thead", {}, el("tr", {}, ...headers)), tbody);
}

function text(value) {
  return value === null || value === undefined ? null : String(value).toLowerCase();
}

const OUTPUT_COLUMNS = [
  {
    key: "output", title: "output", sort: (r) => text(tableName(r.output)),
    cell: (r) => el("td", {},
      el("a", { href: `${prefix}/output?dag_id=${enc(r.dag_id)}&task_id=${enc(r.task_id)}`, class: "output",
        title: r.output || "" }, tableName(r.output)),
      el("div", { class: "muted path" }, r.output || "")),
  },
  { key: "kind", title: "kind", sort: (r) => text(r.kind), cell: (r) => el("td", {}, r.kind) },
  {
    key: "task", title: "DAG / task", sort: (r) => text(`${r.dag_id}.${r.task_id}`),
    cell: (r) => el("td", {}, uiLink(`/dags/${enc(r.dag_id)}`, r.dag_id), el("br"),
      uiLink(`/dags/${enc(r.dag_id)}/tasks/${enc(r.task_id)}`, r.task_id, { class: "muted" })),
  },
  { key: "last_task", title: "last task", sort: (r) => text(r.last_task && r.last_task.state), cell: lastTaskCell },
  {
    key: "freshness", title: "freshness (lag)", cell: freshnessCell,
    sort: (r) => (r.lag_s === null || r.lag_s === undefined ? null
      : (STATE_ORDER[r.freshness_state] || 0) * 1e12 + r.lag_s),
  },
  {
    key: "last_refresh", title: "last refresh", sort: (r) => (r.last_refresh ? r.last_refresh.committed_at : null),
    cell: (r) => el("td", {}, r.last_refresh ? when(r.last_refresh.committed_at) : ""),
  },
  {
    key: "mode", title: "mode / reason", sort: (r) => (r.last_refresh ? text(r.last_refresh.mode) : null),
    cell: (r) => el("td", {}, r.last_refresh ? r.last_refresh.mode : "", el("br"),
      el("span", { class: "muted" }, r.last_refresh ? r.last_refresh.reason : "")),
  },
  {
    key: "rows", title: "rows", cell: (r) => el("td", { class: "num" }, r.last_refresh ? rows(r.last_refresh.rows) : ""),
    sort: (r) => (r.last_refresh && r.last_refresh.rows
      ? (r.last_refresh.rows.inserted ?? 0) + (r.last_refresh.rows.updated ?? 0) + (r.last_refresh.rows.deleted ?? 0)
      : null),
  },
  {
    key: "duration", title: "duration", sort: (r) => (r.last_refresh ? r.last_refresh.duration_s : null),
    cell: (r) => el("td", { class: "num" }, r.last_refresh ? duration(r.last_refresh.duration_s) : ""),
  },
  {
    key: "asset", title: "asset", sort: null,
    cell: (r) => el("td", {}, r.asset_id !== null && r.asset_id !== undefined
      ? uiLink(`/assets/${enc(r.asset_id)}`, "asset", { title: r.asset_uri || "" })
      : el("span", { class: "muted", title: "no asset event yet" }, "—")),
  },
];

// The lineage graph: joins (boxes, linked to their output's page) and source tables (grey), left to
// right by depth, an edge per table a join reads.
function lineageSvg(graph) {
  const ns = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs = {}, ...children) => {
    const node = document.createElementNS(ns, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    node.append(...children);
    return node;
  };
  const width = 190, height = 38, gapX = 70, gapY = 14;
  const columns = new Map();
  for (const node of graph.nodes) {
    if (!columns.has(node.depth)) columns.set(node.depth, []);
    columns.get(node.depth).push(node);
  }
  const place = new Map();
  for (const [depth, nodes] of columns) {
    nodes.sort((a, b) => (a.type === b.type ? a.label.localeCompare(b.label) : a.type === "table" ? -1 : 1));
    nodes.forEach((node, i) => place.set(node.id, { x: 10 + depth * (width + gapX), y: 10 + i * (height + gapY) }));
  }
  const maxRows = Math.max(1, ...[...columns.values()].map((nodes) => nodes.length));
  const svg = svgEl("svg", {
    id: "lineage-graph", width: 20 + columns.size * (width + gapX), height: 20 + maxRows * (height + gapY),
    role: "img", "aria-label": "Lineage: which joins feed which",
  });
  svg.append(svgEl("defs", {}, svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, svgEl("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#7b8794" }))));
  for (const edge of graph.edges) {
    const a = place.get(edge.source), b = place.get(edge.target);
    if (!a || !b) continue;
    const x1 = a.x + width, y1 = a.y + height / 2, x2 = b.x, y2 = b.y + height / 2, mid = (x1 + x2) / 2;
    svg.append(svgEl("path", { class: "edge", d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`,
      "data-source": edge.source, "data-target": edge.target, "marker-end": "url(#arrow)" },
      svgEl("title", {}, edge.table)));
  }
  for (const node of graph.nodes) {
    const { x, y } = place.get(node.id);
    const label = node.label.length > 26 ? `${node.label.slice(0, 25)}…` : node.label;
    const sub = node.type === "join" ? `${node.dag_id}.${node.task_id}` : "table";
    const group = svgEl("g", { class: `node ${node.type}`, "data-id": node.id },
      svgEl("title", {}, node.type === "join" ? `${node.kind} → ${node.output || "(not readable)"}` : node.uri),
      svgEl("rect", { x, y, width, height, rx: 6 }),
      svgEl("text", { x: x + 8, y: y + 16, class: "label" }, label),
      svgEl("text", { x: x + 8, y: y + 31, class: "sub" }, sub.length > 30 ? `${sub.slice(0, 29)}…` : sub));
    if (node.type === "join") {
      const link = svgEl("a", { href: `${prefix}/output?dag_id=${enc(node.dag_id)}&task_id=${enc(node.task_id)}` });
      link.append(group);
      svg.append(link);
    } else {
      svg.append(group);
    }
  }
  return svg;
}

async function joinsPage() {
  const [data, graph] = await Promise.all([getJson("/api/outputs"), getJson("/api/lineage")]);
  timeZone = chosenTimeZone(data.timezone);
  const summary = document.getElementById("summary");
  const states = data.outputs.reduce((n, r) => ({ ...n, [r.freshness_state]: (n[r.freshness_state] || 0) + 1 }), {});
  const alerts = ["error", "warn"].filter((s) => states[s]).map((s) => `${states[s]} ${s}`).join(", ");
  summary.textContent = `${data.outputs.length} outputs, stalest first${alerts ? ` (${alerts})` : ""}; ` +
    `read ${when(data.generated_at)}; times in ${timeZone}. Click a column to sort.`;
  const content = document.getElementById("content");
  if (data.outputs.length === 0) {
    content.append(el("p", { class: "muted" },
      "No join outputs: no DAG you may read has a join operator of this provider."));
    return;
  }
  content.append(sortableTable(OUTPUT_COLUMNS, data.outputs, OUTPUT_COLUMNS.findIndex((c) => c.key === "freshness")));
  content.append(el("h2", {}, "Lineage"), el("p", { class: "muted" },
    "Which joins feed which, from the inputs and outputs the tasks declare; grey boxes are tables no join writes."),
  el("div", { id: "lineage" }, lineageSvg(graph)));
}

function historyChart(refreshes) {
  const ordered = [...refreshes].reverse().filter((r) => r.committed_at);
  if (ordered.length === 0 || typeof uPlot === "undefined") return;
  const x = ordered.map((r) => new Date(r.committed_at).getTime() / 1000);
  const seconds = ordered.map((r) => r.duration_s ?? null);
  const changed = ordered.map((r) => (r.rows.inserted + r.rows.updated + r.rows.deleted));
  const full = ordered.map((r) => (r.mode === "full" ? (r.duration_s ?? 0) : null));
  const options = {
    title: "Refreshes: duration and rows changed (full rebuilds marked)",
    width: Math.min(1100, document.body.clientWidth - 32),
    height: 260,
    // the time axis in the page's timezone, as the tables are
    tzDate: (ts) => (timeZone ? uPlot.tzDate(new Date(ts * 1e3), timeZone) : new Date(ts * 1e3)),
    scales: { rows: {} },
    series: [
      {},
      { label: "duration (s)", stroke: "#2563eb", width: 2 },
      { label: "rows changed", stroke: "#16a34a", width: 2, scale: "rows" },
      { label: "full rebuild", stroke: "#dc2626", width: 0, points: { show: true, size: 9, fill: "#dc2626" } },
    ],
    axes: [{}, { label: "seconds" }, { side: 1, scale: "rows", label: "rows", grid: { show: false } }],
  };
  new uPlot(options, [x, seconds, changed, full], document.getElementById("chart"));
}

async function outputPage() {
  const dag = params.get("dag_id");
  const task = params.get("task_id");
  const data = await getJson(`/api/outputs/${enc(dag)}/${enc(task)}?history=50`);
  timeZone = chosenTimeZone(data.timezone);
  document.querySelector("h1").textContent = tableName(data.output);
  const summary = document.getElementById("summary");
  summary.replaceChildren(
    `${data.output || "(not readable)"}: ${data.kind} written by `,
    uiLink(`/dags/${enc(data.dag_id)}/tasks/${enc(data.task_id)}`, `${data.dag_id}.${data.task_id}`),
    `; version ${data.version ?? "?"}; times in ${timeZone}`,
    data.asset_id !== null && data.asset_id !== undefined ? " · " : "",
    data.asset_id !== null && data.asset_id !== undefined ? uiLink(`/assets/${enc(data.asset_id)}`, "asset") : "",
    data.browser_url ? " · " : "",
    data.browser_url ? el("a", { href: data.browser_url, target: "_blank", rel: "noopener" }, "in the console") : "");
  if (data.error) {
    summary.append(el("div", { class: "unreadable" }, data.error));
    return;
  }
  historyChart(data.refreshes);
  const content = document.getElementById("content");
  content.append(el("h2", {}, "Freshness"), table(["freshness (lag)", "policy", "last task"], [el("tr", {},
    freshnessCell(data), el("td", {}, policyText(data.freshness_policy)), lastTaskCell(data))]));
  content.append(el("h2", {}, `Last ${data.refreshes.length} refreshes`), table(
    ["version", "committed", "mode", "reason", "rows", "duration", "plan", "write path", "task instance"],
    data.refreshes.map((r) => el("tr", { class: r.mode === "full" ? "full" : "", "data-version": r.version },
      el("td", { class: "num" }, String(r.version)),
      el("td", {}, when(r.committed_at)),
      el("td", {}, r.mode),
      el("td", {}, r.reason),
      el("td", { class: "num" }, rows(r.rows)),
      el("td", { class: "num" }, duration(r.duration_s)),
      planCell(r.strategy),
      el("td", {}, r.write_path ?? ""),
      el("td", {}, taskInstanceLink(r.origin, r.origin && r.origin.run_id ? r.origin.run_id : "")))),
  ));
}

async function refreshPage() {
  // Airflow fills {MAP_INDEX} in only on a mapped task's page: anything else is an unmapped task (-1)
  const mapIndex = params.get("map_index");
  const query = new URLSearchParams({
    dag_id: params.get("dag_id"), run_id: params.get("run_id"), task_id: params.get("task_id"),
    map_index: /^-?\d+$/.test(mapIndex || "") ? mapIndex : "-1",
  });
  const data = await getJson(`/api/refresh?${query}`);
  const result = data.result;
  if (!result) {
    const summary = document.getElementById("summary");
    summary.className = "muted";
    summary.replaceChildren(data.message, ". ", el("a", { href: `${prefix}/joins` }, "Every join output"));
    return;
  }
  document.getElementById("summary").textContent =
    `${result.kind}: ${result.mode} (${result.reason}) in ${duration(result.duration_s)}`;
  const content = document.getElementById("content");
  const inputs = Object.entries(result.inputs || {}).map(([side, info]) => el("tr", {},
    el("td", {}, side), el("td", {}, info.path ?? ""),
    el("td", { class: "num" }, String(info.from_version ?? "")),
    el("td", { class: "num" }, String(info.to_version ?? ""))));
  content.append(el("h2", {}, "Versions"), table(["input", "path", "from (after)", "to"], inputs));
  const output = result.output || {};
  content.append(el("p", {}, `Output ${output.path} at version ${output.version}; write path `,
    el("code", {}, String(result.write_path ?? "none")), result.source ? ` (result from ${result.source})` : ""));
  const counts = Object.entries(result.rows || {}).map(([name, value]) => el("tr", {},
    el("td", {}, name), el("td", { class: "num" }, typeof value === "object" ? JSON.stringify(value) : String(value))));
  content.append(el("h2", {}, "Rows"), table(["", ""], counts));
  const strategy = result.strategy;
  if (planSummary(strategy, duration)) {
    const slower = slowerPlan(strategy);
    content.append(el("h2", {}, "Plan"),
      el("div", { id: "plan", class: slower ? "plan slow-plan" : "plan", "data-slower": slower },
        ...planNodes(strategy),
        strategy.reason ? el("div", { class: "muted detail" }, strategy.reason) : "",
        strategy.fallback ? el("div", { class: "muted detail" }, strategy.fallback) : ""));
  }
  const phases = Object.entries(result.phases || {});
  let previous = 0;
  const phaseRows = phases.map(([name, at]) => {
    const row = el("tr", {}, el("td", {}, name), el("td", { class: "num" }, at.toFixed(2)),
      el("td", { class: "num" }, (at - previous).toFixed(2)));
    previous = at;
    return row;
  });
  content.append(el("h2", {}, "Phases"), phases.length
    ? table(["phase", "reached at (s)", "since the previous (s)"], phaseRows)
    : el("p", { class: "muted" }, "No phases recorded (a noop found without running, or an older result)."));
}

const pages = { joins: joinsPage, output: outputPage, refresh: refreshPage };
pages[body.dataset.page]().catch((error) => {
  const summary = document.getElementById("summary");
  summary.className = "unreadable";
  summary.textContent = String(error.message || error);
});
