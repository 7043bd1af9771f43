// Plan view: the shared global plan (GET /plan?format=json) as a layered SVG graph. Nodes are control
// tables (sources, Spark sources, operators, stores, queries), edges the queues between them; a node
// used by several queries is drawn as shared. Selecting a node shows its control table as key/value
// rows and a form for its knobs (PATCH /entities/{id}).
import { api, fmt, h, toast } from "./api.js";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const W = 180, HGT = 46, GX = 56, GY = 22;
let timer = null;
let selected = null;
let shape = ""; // node and edge ids of the drawn graph: redraw only when they change

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  el.append(...children);
  return el;
}

// layers: a node's column is the longest path to it from a node without inputs
function layers(nodes, edges) {
  const depth = new Map(nodes.map((n) => [n.id, 0]));
  for (let round = 0; round < nodes.length; round++) {
    let changed = false;
    for (const e of edges) {
      const d = (depth.get(e.from) ?? 0) + 1;
      if (depth.has(e.to) && d > depth.get(e.to)) { depth.set(e.to, d); changed = true; }
    }
    if (!changed) break;
  }
  return depth;
}

const kindOf = (n) => (n.id.startsWith("spark:") ? "spark" : n.kind);
const short = (t, n = 28) => (t && t.length > n ? `${t.slice(0, n - 1)}…` : t || "");

function counterLine(n) {
  const c = n.counters || {};
  if (n.kind === "source") return `in ${fmt(c.accepted)} · wm ${fmt(c.watermark)}`;
  if (n.kind === "query") return `results ${fmt(c.results)} · ${fmt(Math.round(c.memory_bytes || 0))} B`;
  if ("tuples_in" in c) return `in ${fmt(c.tuples_in)} · out ${fmt(c.tuples_out)}`;
  return Object.entries(c).slice(0, 2).map(([k, v]) => `${k} ${fmt(v)}`).join(" · ");
}

function draw(plan) {
  const { nodes, edges } = plan;
  const depth = layers(nodes, edges);
  const last = Math.max(0, ...depth.values());
  for (const n of nodes) if (n.kind === "query") depth.set(n.id, last); // queries line up as the last column
  const cols = new Map();
  for (const n of nodes) {
    const d = depth.get(n.id);
    if (!cols.has(d)) cols.set(d, []);
    cols.get(d).push(n);
  }
  // order each column by the mean row of its inputs (one barycenter pass), fewer crossing edges
  const row = new Map();
  const inputs = new Map(nodes.map((n) => [n.id, []]));
  for (const e of edges) inputs.get(e.to)?.push(e.from);
  const pos = new Map();
  let maxRows = 1;
  for (const d of [...cols.keys()].sort((a, b) => a - b)) {
    const list = cols.get(d);
    const key = (n) => {
      const rs = inputs.get(n.id).map((id) => row.get(id)).filter((r) => r !== undefined);
      return rs.length ? rs.reduce((a, b) => a + b, 0) / rs.length : Infinity;
    };
    list.sort((a, b) => key(a) - key(b));
    list.forEach((n, i) => { row.set(n.id, i); pos.set(n.id, { x: 10 + d * (W + GX), y: 10 + i * (HGT + GY) }); });
    maxRows = Math.max(maxRows, list.length);
  }
  const width = 20 + (Math.max(...cols.keys(), 0) + 1) * (W + GX) - GX;
  const height = 20 + maxRows * (HGT + GY) - GY;
  const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "group", "aria-label": "Global query plan" },
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" },
      s("path", { d: "M0,0 L8,4 L0,8 z", fill: "#9aa4ae" }))));
  for (const e of edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + HGT / 2, x2 = b.x, y2 = b.y + HGT / 2, mx = (x1 + x2) / 2;
    svg.append(s("path", { class: "edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}` }, s("title", {}, `${e.queue}: queries ${e.queries.join(", ")}`)),
      s("text", { class: "edge-label", x: mx - 10, y: (y1 + y2) / 2 - 3 }, e.queue));
  }
  for (const n of nodes) {
    const p = pos.get(n.id);
    const shared = (n.queries || []).length > 1;
    const title = `${n.id} ${n.name || ""}${n.queries?.length ? `, used by queries ${n.queries.join(", ")}` : ""}`;
    const g = s("g", { class: `node kind-${kindOf(n)}${shared ? " shared" : ""}${n.id === selected ? " selected" : ""}`,
      transform: `translate(${p.x},${p.y})`, tabindex: 0, role: "button", "data-id": n.id, "aria-label": title },
      s("title", {}, title), s("rect", { width: W, height: HGT }),
      s("text", { x: 6, y: 14 }, `${n.id}${n.queries?.length ? `  [q ${n.queries.join(",")}]` : ""}`),
      s("text", { x: 6, y: 27, class: "sub" }, short(n.name || n.text || n.kind, 30)),
      s("text", { x: 6, y: 40, class: "sub counters" }, counterLine(n)));
    g.addEventListener("click", () => select(n.id));
    g.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); select(n.id); } });
    svg.append(g);
  }
  $("plan-graph").replaceChildren(svg);
}

async function refresh() {
  let plan;
  try { plan = await api("GET", "/plan?format=json"); } catch (e) { toast(`cannot read the plan: ${e.message}`, true); return; }
  const now = JSON.stringify([plan.nodes.map((n) => n.id), plan.edges.map((e) => [e.from, e.to])]);
  if (now !== shape) { shape = now; draw(plan); return; }
  for (const n of plan.nodes) { // same graph: update the counters only
    const t = document.querySelector(`#plan-graph [data-id="${CSS.escape(n.id)}"] text.counters`);
    if (t) t.textContent = counterLine(n);
  }
}

function knobInput(name, value) {
  const id = `knob-${name}`;
  if (typeof value === "boolean")
    return h("label", { for: id, class: "inline" }, h("input", { type: "checkbox", id, name, checked: value, "data-orig": JSON.stringify(value) }), ` ${name}`);
  return [h("label", { for: id }, name),
    h("input", { id, name, value: typeof value === "string" ? value : JSON.stringify(value), "data-orig": JSON.stringify(value), "data-type": typeof value })];
}

function parseKnob(input) {
  if (input.type === "checkbox") return input.checked;
  const v = input.value.trim();
  if (input.dataset.type === "string") return v;
  try { return JSON.parse(v); } catch { return v; }
}

async function select(id) {
  selected = id;
  document.querySelectorAll("#plan-graph .node").forEach((g) => g.classList.toggle("selected", g.dataset.id === id));
  let e;
  try { e = await api("GET", `/entities/${encodeURIComponent(id)}`); } catch (err) { toast(err.message, true); return; }
  const rows = (obj) => Object.entries(obj).map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, fmt(v))));
  const rest = Object.fromEntries(Object.entries(e).filter(([k]) => !["counters", "knobs", "id"].includes(k)));
  const form = h("form", { id: "knob-form" },
    h("h4", {}, "Knobs"), Object.entries(e.knobs || {}).map(([k, v]) => knobInput(k, v)),
    Object.keys(e.knobs || {}).length ? h("button", { type: "submit" }, "Apply") : h("p", {}, "No knobs."),
    h("p", { id: "knob-error", class: "error", role: "alert" }));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const knobs = {};
    for (const input of form.querySelectorAll("input")) {
      const v = parseKnob(input);
      if (JSON.stringify(v) !== input.dataset.orig) knobs[input.name] = v;
    }
    if (!Object.keys(knobs).length) { toast("no knob changed"); return; }
    try {
      await api("PATCH", `/entities/${encodeURIComponent(id)}`, { knobs });
    } catch (err) {
      $("knob-error").textContent = `${err.problem?.code || "error"}: ${err.message}`;
      return;
    }
    // the panel is rebuilt with the new values before the toast says so: an edit made after
    // the toast goes into the new form, not into one about to be replaced
    await select(id);
    toast(`set ${Object.keys(knobs).join(", ")} of ${id}`);
  });
  $("node-panel").replaceChildren(h("h3", {}, e.id), h("table", { class: "grid", "aria-label": "Entity" }, rows(rest)),
    h("h4", {}, "Counters"), h("table", { class: "grid", "aria-label": "Counters" }, rows(e.counters || {})), form);
}

export function init() {
  $("plan-refresh").addEventListener("click", () => { shape = ""; refresh(); });
  $("plan-auto").addEventListener("change", () => show());
}

export function show() {
  refresh();
  clearInterval(timer);
  timer = $("plan-auto").checked ? setInterval(refresh, 2000) : null;
}

export function hide() {
  clearInterval(timer);
  timer = null;
}
