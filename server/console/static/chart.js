// A line chart of a relation's last numeric column over time, one line per group (the other
// columns' values), fed by the `+` elements of the live results. Plain SVG, redrawn once per frame.
import { h } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const NUMERIC = new Set(["INTEGER", "FLOAT", "BIGINT", "DOUBLE", "INT", "REAL"]);
const MAX_SERIES = 8, MAX_POINTS = 300, WIDTH = 640, HEIGHT = 180, PAD = 34;
const COLORS = ["#1f5fbf", "#b45f06", "#1b7a3d", "#b3261e", "#7a2e9f", "#0b7a6b", "#5b6672", "#a04a00"];

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  el.append(...children);
  return el;
}

export class LineChart {
  // null when the schema has no numeric column to draw
  static of(schema) {
    let value = -1;
    schema.forEach((a, i) => { if (NUMERIC.has(String(a.type).toUpperCase())) value = i; });
    return value < 0 ? null : new LineChart(schema, value);
  }

  constructor(schema, value) {
    this.value = value;
    this.name = schema[value].name;
    this.series = new Map(); // group key -> [[ts, v], ...]
    this.svg = s("svg", { width: WIDTH, height: HEIGHT, viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", id: "results-chart",
      "aria-label": `${this.name} over time` });
    this.el = h("figure", { class: "chart" }, this.svg, h("figcaption", {}, `${this.name} over time, per group`));
  }

  add(ts, row) {
    const v = row[this.value];
    if (typeof v !== "number") return;
    const key = row.filter((_, i) => i !== this.value).join(", ");
    let pts = this.series.get(key);
    if (!pts) {
      if (this.series.size >= MAX_SERIES) return;
      pts = [];
      this.series.set(key, pts);
    }
    if (pts.length && pts[pts.length - 1][0] === ts) pts[pts.length - 1][1] = v;
    else pts.push([ts, v]);
    if (pts.length > MAX_POINTS) pts.shift();
  }

  draw() {
    const all = [...this.series.values()].flat();
    if (!all.length) return;
    const ts = all.map((p) => p[0]), vs = all.map((p) => p[1]);
    const [t0, t1] = [Math.min(...ts), Math.max(...ts)];
    const [v0, v1] = [Math.min(0, ...vs), Math.max(...vs)];
    const x = (t) => PAD + ((t - t0) / (t1 - t0 || 1)) * (WIDTH - PAD - 110);
    const y = (v) => HEIGHT - 18 - ((v - v0) / (v1 - v0 || 1)) * (HEIGHT - 30);
    const parts = [
      s("line", { x1: PAD, y1: y(v0), x2: WIDTH - 110, y2: y(v0), class: "axis" }),
      s("text", { x: 2, y: y(v1) + 4, class: "tick" }, String(+v1.toPrecision(4))),
      s("text", { x: 2, y: y(v0), class: "tick" }, String(+v0.toPrecision(4))),
      s("text", { x: PAD, y: HEIGHT - 3, class: "tick" }, `t=${t0}`),
      s("text", { x: WIDTH - 150, y: HEIGHT - 3, class: "tick" }, `t=${t1}`),
    ];
    [...this.series].forEach(([key, pts], i) => {
      const color = COLORS[i % COLORS.length];
      // a relation's value holds until it changes: steps, carried on to the latest instant
      const steps = pts.flatMap(([t, v], j) => [[t, v], [j + 1 < pts.length ? pts[j + 1][0] : t1, v]]);
      const [lt, lv] = pts[pts.length - 1];
      parts.push(s("polyline", { class: "series", "data-key": key, "data-n": pts.length, fill: "none", stroke: color,
        "stroke-width": 1.6, points: steps.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ") }),
        s("circle", { cx: x(lt), cy: y(lv), r: 2.5, fill: color }),
        s("text", { x: WIDTH - 104, y: 14 + i * 14, fill: color, class: "tick" }, key || this.name));
    });
    this.svg.replaceChildren(...parts);
  }
}
