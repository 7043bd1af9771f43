// Catalog view: streams, relations, views and queries with rates from their control tables;
// register (DDL), drop, activate/deactivate, and push rows as CSV.
import { api, fmt, h, toast } from "./api.js";
import { sample } from "./rates.js";

let timer = null;
let go = null;
const $ = (id) => document.getElementById(id);

const schemaText = (attrs) => attrs.map((a) => `${a.name} ${a.type.toLowerCase()}`).join(", ");
const rate = (r) => (r === null ? "–" : r.toFixed(1));

async function act(what, fn) {
  try {
    const msg = await fn();
    toast(typeof msg === "string" ? msg : what);
    await refresh();
  } catch (e) {
    toast(`${what} failed: ${e.message}`, true);
  }
}

async function refresh() {
  let sources, views, queries, entities;
  try {
    [sources, views, queries, entities] = await Promise.all(
      ["/streams", "/views", "/queries", "/entities"].map((p) => api("GET", p)),
    );
  } catch (e) {
    toast(`cannot read the catalog: ${e.message}`, true);
    return;
  }
  const ent = new Map(entities.map((e) => [e.id, e]));
  // input rate of a query: the rates of the sources it reads (their control tables list their queries)
  const srcRate = new Map(sources.map((s) => [s.name, sample(`src:${s.name}`, ent.get(`src:${s.name}`)?.counters?.accepted ?? s.accepted)]));
  const inRate = (qid) => entities.filter((e) => e.kind === "source" && (e.queries || []).includes(qid))
    .reduce((sum, e) => (srcRate.get(e.name) ?? null) === null ? sum : (sum ?? 0) + srcRate.get(e.name), null);

  $("sources").tBodies[0].replaceChildren(
    ...sources.map((s) => {
      return h("tr", { "data-name": s.name },
        h("td", {}, s.name), h("td", {}, s.kind), h("td", {}, schemaText(s.attrs)),
        h("td", { class: "num" }, fmt(s.accepted)),
        h("td", { class: "num" }, rate(srcRate.get(s.name))),
        h("td", {}, s.timestamp === "system" ? "system" : `${s.time_unit}${s.slack ? `, slack ${s.slack}` : ""}`),
        h("td", {}, h("button", { type: "button", "aria-label": `Drop ${s.name}`,
          onclick: () => act(`dropped ${s.name}`, () => api("DELETE", `/streams/${s.name}`)) }, "Drop")));
    }),
  );
  $("views").tBodies[0].replaceChildren(
    ...views.map((v) => h("tr", {}, h("td", {}, v.name), h("td", {}, v.kind), h("td", {}, schemaText(v.schema)),
      h("td", {}, h("button", { type: "button", "aria-label": `Drop view ${v.name}`,
        onclick: () => act(`dropped view ${v.name}`, () => api("DELETE", `/views/${v.name}`)) }, "Drop")))),
  );
  $("queries").tBodies[0].replaceChildren(
    ...queries.map((q) => {
      const e = ent.get(`query:${q.id}`);
      const c = e?.counters || {};
      const label = q.name || `query ${q.id}`;
      return h("tr", { "data-id": q.id },
        h("td", { class: "num" }, q.id), h("td", { title: q.cql }, q.name || q.cql.slice(0, 40)), h("td", {}, q.kind),
        h("td", { title: [approxTitle(q.approximation), staticTitle(q.static_approximation)].filter(Boolean).join("\n") },
          (q.active ? "active" : "inactive") + approxText(q.approximation) + staticText(q.static_approximation)),
        h("td", { class: "num" }, fmt(q.weight)),
        h("td", { class: "num" }, rate(inRate(q.id))),
        h("td", { class: "num" }, rate(sample(`query:${q.id}`, c.results))),
        h("td", { class: "num" }, fmt(c.memory_bytes === undefined ? null : Math.round(c.memory_bytes))),
        h("td", { title: q.bounded_memory_note || "" }, q.bounded_memory ? "yes" : "no"),
        h("td", {}, q.complete_from === null ? "start" : fmt(q.complete_from)),
        h("td", {},
          h("button", { type: "button", "aria-label": `Results of ${label}`, onclick: () => go(`results/${q.id}`) }, "Results"), " ",
          h("button", { type: "button", "aria-label": `${q.active ? "Deactivate" : "Activate"} ${label}`,
            onclick: () => act(`${label} ${q.active ? "deactivated" : "activated"}`,
              () => api("PATCH", `/queries/${q.id}`, { active: !q.active })) }, q.active ? "Deactivate" : "Activate"), " ",
          h("button", { type: "button", "aria-label": `Drop ${label}`,
            onclick: () => act(`dropped ${label}`, () => api("DELETE", `/queries/${q.id}`)) }, "Drop")));
    }),
  );
  const sel = $("push-source");
  const keep = sel.value;
  sel.replaceChildren(...sources.filter((s) => s.name !== "SysStream").map((s) => h("option", { value: s.name }, s.name)));
  if (keep) sel.value = keep;
}

// the overload controller's approximation of a query (absent or null: exact results, nothing refused)
function approxTitle(a) {
  return a && a.since !== null ? `approximate since ${new Date(a.since * 1000).toLocaleTimeString()}: ${a.reason}` : "";
}

function approxText(a) {
  if (!a) return "";
  const rate = a.sampling_rate < 1 ? `, sampled ${Math.round(a.sampling_rate * 100)}%` : "";
  return rate + (a.refused_rows ? `, ${a.refused_rows} rows refused` : "");
}

// static approximation approved at registration (absent or null: registered exact)
function staticText(s) {
  if (!s) return "";
  return s.exact ? ", static approximation: none applied" : `, static approximation (${s.applied.length} rewrite${s.applied.length === 1 ? "" : "s"})`;
}

function staticTitle(s) {
  if (!s) return "";
  return ["static approximation:", ...s.applied.map((a) => `${a.rule}: ${a.before} → ${a.after} (${a.why})`),
    ...s.refused.map((r) => `${r.rule} refused at ${r.at}: ${r.reason}`)].join("\n");
}

export function init(navigate) {
  go = navigate;
  $("register-source").addEventListener("submit", (e) => {
    e.preventDefault();
    const ddl = $("ddl").value.trim();
    const isView = /^\s*register\s+view\b/i.test(ddl);
    act(isView ? "view registered" : "registered", () =>
      isView ? api("POST", "/views", { cql: ddl }) : api("POST", "/streams", ddl, "text/plain"));
  });
  $("push").addEventListener("submit", (e) => {
    e.preventDefault();
    const name = $("push-source").value;
    act(`pushed to ${name}`, async () => {
      const out = await api("POST", `/streams/${name}/tuples`, $("push-csv").value.trim() + "\n", "text/csv");
      return `pushed ${out.accepted} rows to ${name}${out.late ? ` (${out.late} late)` : ""}`;
    });
  });
}

export function show() {
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, 2000);
}

export function hide() {
  clearInterval(timer);
  timer = null;
}
