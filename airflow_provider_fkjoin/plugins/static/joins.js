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

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function rows(counts) {
  if (!counts) return "";
  return `+${counts.inserted ?? 0} ~${counts.updated ?? 0} -${counts.deleted ?? 0}`;
}

function taskInstanceLink(origin, label) {
  if (!origin || !origin.dag_id || !origin.run_id || !origin.task_id) return label;
  let href = `/dags/${encodeURIComponent(origin.dag_id)}/runs/${encodeURIComponent(origin.run_id)}` +
    `/tasks/${encodeURIComponent(origin.task_id)}`;
  if (origin.map_index !== undefined && origin.map_index !== null && origin.map_index >= 0) {
    href += `/mapped/${origin.map_index}`;
  }
  return el("a", { href, target: "_top" }, label);
}

function shortened(text, limit = 160) {
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}

function lagCell(row) {
  if (row.error) return el("td", { class: "unreadable", title: row.error }, shortened(row.error));
  const lines = Object.entries(row.inputs || {}).map(([side, info]) => {
    if (info.error) {
      return el("div", { class: "unreadable", title: info.error }, shortened(`${side}: unreadable: ${info.error}`));
    }
    const text = info.lag_versions
      ? `${side}: ${info.consumed_version} of ${info.latest_version} (${info.lag_versions} behind, ` +
        `for ${duration(info.lag_s)})`
      : `${side}: ${info.consumed_version} (latest)`;
    return el("div", { class: info.lag_versions ? "stale" : "fresh" }, text);
  });
  return el("td", { "data-lag": row.lag_s ?? "" }, ...lines);
}

function table(headers, bodyRows) {
  return el("table", {}, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...bodyRows));
}

async function joinsPage() {
  const data = await getJson("/api/outputs");
  const summary = document.getElementById("summary");
  summary.textContent = `${data.outputs.length} outputs, stalest first; read ${when(data.generated_at)}`;
  const bodyRows = data.outputs.map((row) => {
    const last = row.last_refresh;
    const link = el("a", {
      href: `${prefix}/output?dag_id=${encodeURIComponent(row.dag_id)}&task_id=${encodeURIComponent(row.task_id)}`,
    }, row.output || "(not readable)");
    return el("tr", { "data-output": row.output || "", "data-dag": row.dag_id, "data-task": row.task_id },
      el("td", {}, link),
      el("td", {}, row.kind),
      el("td", {}, row.dag_id, el("br"), el("span", { class: "muted" }, row.task_id)),
      el("td", {}, last ? when(last.committed_at) : ""),
      el("td", {}, last ? last.mode : "", el("br"), el("span", { class: "muted" }, last ? last.reason : "")),
      el("td", { class: "num" }, last ? rows(last.rows) : ""),
      el("td", { class: "num" }, last ? duration(last.duration_s) : ""),
      lagCell(row));
  });
  document.getElementById("content").append(table(
    ["output", "kind", "DAG / task", "last refresh", "mode / reason", "rows", "duration", "lag per input"],
    bodyRows));
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
  const data = await getJson(`/api/outputs/${encodeURIComponent(dag)}/${encodeURIComponent(task)}?history=50`);
  document.querySelector("h1").textContent = `${data.output || "(not readable)"}`;
  const summary = document.getElementById("summary");
  summary.textContent = `${data.kind} written by ${data.dag_id}.${data.task_id}; version ${data.version ?? "?"}`;
  if (data.error) {
    summary.append(el("div", { class: "unreadable" }, data.error));
    return;
  }
  historyChart(data.refreshes);
  const content = document.getElementById("content");
  content.append(el("h2", {}, "Lag per input"), table(["lag"], [el("tr", {}, lagCell(data))]));
  content.append(el("h2", {}, `Last ${data.refreshes.length} refreshes`), table(
    ["version", "committed", "mode", "reason", "rows", "duration", "write path", "task instance"],
    data.refreshes.map((r) => el("tr", { class: r.mode === "full" ? "full" : "" },
      el("td", { class: "num" }, String(r.version)),
      el("td", {}, when(r.committed_at)),
      el("td", {}, r.mode),
      el("td", {}, r.reason),
      el("td", { class: "num" }, rows(r.rows)),
      el("td", { class: "num" }, duration(r.duration_s)),
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
