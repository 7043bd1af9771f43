// k-Mon view: per stream, the k-constraints declared with it and those its joins use (declared,
// detected by the monitors, or derived from the plan) with their k and whether withdrawn; per
// join, its k-Mon state from the strategy's control table (GET /entities, kind "kconstraints"):
// the Yes / No / Unknown parts of each input, rows in memory, spilled, kept for retraction, and
// the bytes of the k-Mon structures. Refreshed every two seconds while shown.
import { api, fmt, h, toast } from "./api.js";

let timer = null;
const $ = (id) => document.getElementById(id);
const kText = (k) => (k === null || k === undefined ? "∞" : fmt(k));
const parts = (c, x) => (c[`in${x}_yes`] === undefined ? "–" : `${c[`in${x}_yes`]} / ${c[`in${x}_no`]} / ${c[`in${x}_unknown`]}`);

async function refresh() {
  let sources, entities;
  try {
    [sources, entities] = await Promise.all(["/streams", "/entities"].map((p) => api("GET", p)));
  } catch (e) {
    toast(`cannot read the k-Mon state: ${e.message}`, true);
    return;
  }
  const kmon = entities.filter((e) => e.kind === "kconstraints");
  const rows = [];
  for (const s of sources.filter((s) => s.kind === "stream" && s.name !== "SysStream")) {
    const used = kmon.flatMap((e) => (e.constraints || []).filter((r) => r.stream.toLowerCase() === s.name.toLowerCase())
      .map((r) => ({ ...r, joinId: e.join || e.id })));
    const declared = (s.constraints || []).join(", ") || "none";
    if (!used.length) {
      rows.push(h("tr", { "data-stream": s.name }, h("td", {}, s.name), h("td", {}, declared),
        h("td", {}, "–"), h("td", {}, "–"), h("td", { class: "num" }, "–"), h("td", { class: "num" }, "–"),
        h("td", {}, "–"), h("td", {}, "no join uses them")));
    }
    for (const r of used) {
      rows.push(h("tr", { "data-stream": s.name, "data-constraint": r.constraint, class: r.withdrawn ? "withdrawn" : null },
        h("td", {}, s.name), h("td", {}, declared), h("td", {}, r.constraint), h("td", {}, r.origin),
        h("td", { class: "num" }, kText(r.k_declared)), h("td", { class: "num" }, kText(r.k_in_use)),
        h("td", {}, r.withdrawn ? "withdrawn (k = ∞)" : "in use"), h("td", {}, r.joinId)));
    }
  }
  $("kmon-streams").tBodies[0].replaceChildren(...rows);
  $("kmon-joins").tBodies[0].replaceChildren(
    ...kmon.map((e) => {
      const c = e.counters || {};
      return h("tr", { "data-id": e.id },
        h("td", {}, e.join || e.id), h("td", {}, e.knobs?.mode ?? "–"),
        h("td", { class: "num" }, parts(c, 0)), h("td", { class: "num" }, parts(c, 1)),
        h("td", { class: "num" }, fmt(c.state_tuples)), h("td", { class: "num" }, fmt(c.spilled_tuples)),
        h("td", { class: "num" }, fmt(c.retraction_tuples)), h("td", { class: "num" }, fmt(c.kmon_bytes)),
        h("td", { class: "num" }, fmt(c.store_reads)),
        h("td", { class: "num" }, c.state_ratio === null || c.state_ratio === undefined ? "–" : `${Math.round(c.state_ratio * 100)}%`),
        h("td", {}, (e.withdrawals || []).join("; ") || "none"));
    }),
  );
  $("kmon-empty").hidden = kmon.length > 0;
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
