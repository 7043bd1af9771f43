// Live results over SSE: a relation as a table that applies +/- in place (an update's changed cells
// flash), a stream as a scrolling log with pause. Opens with a snapshot; shows lagged/ended states.
import { api, h } from "./api.js";
import { LineChart } from "./chart.js";
import { EventFeed } from "./events.js";

const $ = (id) => document.getElementById(id);
const LOG_LINES = 500;
let source = null; // the EventFeed (SSE over fetch, with the API key)
let view = null; // the open table or log
let pending = []; // elements waiting for the next animation frame
let frame = 0;

function setState(text, cls) {
  $("results-state").textContent = text;
  $("results-state").className = `state ${cls}`;
}

// relation: rows keyed by their values, each a table row with a multiplicity
class RelationTable {
  constructor(schema) {
    this.rows = new Map(); // key -> {tr, count}
    this.tbody = h("tbody");
    this.el = h("table", { class: "grid", id: "results-table", "aria-label": "Current result relation" },
      h("thead", {}, h("tr", {}, schema.map((a) => h("th", { scope: "col" }, a.name)), h("th", { scope: "col" }, "×"))),
      this.tbody);
    this.chart = LineChart.of(schema);
    if (this.chart) this.el = h("div", {}, this.chart.el, this.el);
    this.updates = 0;
  }

  // one timestamp's elements: removals first, and a row removed then added again at the same instant
  // (an aggregate's update) is rewritten in place with its changed cells flashing
  apply(elements) {
    const free = [];
    for (const e of elements) {
      if (e.sign >= 0) continue;
      const k = JSON.stringify(e.row);
      const r = this.rows.get(k);
      if (!r) continue;
      if (--r.count > 0) { r.tr.lastChild.textContent = r.count; continue; }
      this.rows.delete(k);
      free.push(r.tr);
    }
    for (const e of elements) {
      if (e.sign < 0) continue;
      const k = JSON.stringify(e.row);
      const r = this.rows.get(k);
      if (r) { r.count++; r.tr.lastChild.textContent = r.count; continue; }
      let tr = free.shift();
      if (tr) {
        e.row.forEach((v, i) => {
          const td = tr.children[i];
          if (td.textContent !== String(v ?? "")) { td.textContent = v ?? ""; td.classList.remove("flash"); void td.offsetWidth; td.classList.add("flash"); }
        });
        tr.lastChild.textContent = 1;
      } else {
        tr = h("tr", { class: "flash" }, e.row.map((v) => h("td", {}, v ?? "")), h("td", { class: "num" }, 1));
        this.tbody.append(tr);
      }
      tr.dataset.key = k;
      this.rows.set(k, { tr, count: 1 });
      this.chart?.add(e.ts, e.row);
    }
    for (const tr of free) tr.remove();
    this.updates += elements.length;
  }
}

// stream: a log of the latest elements; paused, it keeps counting but stops scrolling
class StreamLog {
  constructor() {
    this.el = h("pre", { class: "log", id: "results-log", tabindex: 0, "aria-label": "Result stream" });
    this.held = [];
  }

  apply(elements) {
    this.held.push(...elements);
    if ($("results-pause").checked) { this.paused = true; setState(`paused, ${this.held.length} held`, "live"); return; }
    if (this.paused) { this.paused = false; setState("live", "live"); }
    const lines = this.held.map((e) => h("div", { class: e.sign < 0 ? "minus" : "" }, `${e.ts}\t${e.sign < 0 ? "-" : "+"} ${e.row.map((v) => v ?? "null").join("\t")}`));
    this.held = [];
    this.el.append(...lines);
    while (this.el.childElementCount > LOG_LINES) this.el.firstChild.remove();
    this.el.scrollTop = this.el.scrollHeight;
  }
}

function flush() {
  frame = 0;
  const batch = pending;
  pending = [];
  if (!view) return;
  if (view instanceof StreamLog) return view.apply(batch);
  let i = 0;
  while (i < batch.length) { // group by timestamp
    let j = i + 1;
    while (j < batch.length && batch[j].ts === batch[i].ts) j++;
    view.apply(batch.slice(i, j));
    i = j;
  }
  view.chart?.draw();
}

function close(state = "closed", cls = "") {
  if (source) source.close();
  source = null;
  setState(state, cls);
}

function open(qid) {
  close();
  pending = [];
  $("results-body").replaceChildren();
  $("results-info").textContent = "";
  $("results-approx").textContent = "";
  setState("connecting", "");
  const stop = (name, cls) => (data) => {
    flush();
    const info = data ? JSON.parse(data) : {};
    close(`${name === "end" ? "ended" : "lagged"}${info.reason ? `: ${info.reason}` : ""}`, cls);
  };
  const feed = new EventFeed(`/queries/${qid}/results?format=sse&snapshot=true`, {
    open: (data) => {
      const info = JSON.parse(data);
      view = info.kind === "relation" ? new RelationTable(info.schema) : new StreamLog();
      $("results-body").replaceChildren(view.el);
      $("results-info").textContent = `query ${qid}: ${info.kind} (${info.schema.map((a) => a.name).join(", ")})`;
      setState("live", "live");
    },
    message: (data) => {
      pending.push(JSON.parse(data));
      if (!frame) frame = requestAnimationFrame(flush);
    },
    // the overload controller changed the query's sampling rate: results from here on are at that rate
    approximation: (data) => {
      flush();
      const a = JSON.parse(data);
      const el = $("results-approx");
      el.textContent = a.since === null ? "" : `sampled ${Math.round(a.sampling_rate * 100)}%`;
      el.title = a.since === null ? "" : `${a.reason} (since ${new Date(a.since * 1000).toLocaleTimeString()})`;
    },
    lagged: stop("lagged", "lagged"),
    end: stop("end", "ended"),
    error: (text) => {
      if (source === feed) close(text, "error");
    },
  });
  source = feed;
}

async function fillQueries(selected) {
  try {
    const qs = await api("GET", "/queries");
    const sel = $("results-query");
    sel.replaceChildren(...qs.map((q) => h("option", { value: q.id }, `${q.id}: ${q.name || q.cql.slice(0, 50)} (${q.kind})`)));
    if (selected) sel.value = selected;
  } catch {}
}

// SysStream(entity, metric, value) publishes every entity's counters about once a second (ms timestamps)
const rate = (metric, as) =>
  `select entity, (max(value) - min(value)) / 10 as ${as}\nfrom SysStream [range 10 seconds]\nwhere metric = '${metric}'\ngroup by entity`;
const level = (metric, as) =>
  `select entity, max(value) as ${as}\nfrom SysStream [range 2 seconds]\nwhere metric = '${metric}'\ngroup by entity`;
const MONITORS = {
  input: rate("accepted", "rows_per_second"),
  results: rate("results", "rows_per_second"),
  queues: level("length", "tuples"),
  memory: level("memory_bytes", "bytes"),
  cpu: rate("cpu_seconds", "cpu_share"),
};

async function monitor(e) {
  e.preventDefault();
  const key = $("monitor").value;
  const name = `monitor_${key}`;
  try {
    const existing = (await api("GET", "/queries")).find((q) => q.name === name);
    const q = existing || (await api("POST", "/queries", { cql: MONITORS[key], name }));
    location.hash = `results/${q.id}`;
  } catch (err) {
    setState(`monitor failed: ${err.message}`, "error");
  }
}

export function init() {
  $("monitor-form").addEventListener("submit", monitor);
  $("results-form").addEventListener("submit", (e) => {
    e.preventDefault();
    if ($("results-query").value) location.hash = `results/${$("results-query").value}`;
  });
  $("results-close").addEventListener("click", () => close());
  $("results-pause").addEventListener("change", () => view instanceof StreamLog && view.apply([]));
}

export async function show(arg) {
  await fillQueries(arg);
  if (arg) open(arg);
}

export function hide() {
  close();
}
