// Query editor: CQL with keyword highlighting, EXPLAIN before registering (POST /explain), and an
// inline marker at the line/column of the problem document a bad query gets.
import { api, h, toast } from "./api.js";

const $ = (id) => document.getElementById(id);
const KEYWORDS = new Set(
  ("select from where group by having as and or not in is null distinct union except intersect istream dstream " +
    "rstream range rows partition slide now unbounded second seconds minute minutes hour hours day days millisecond " +
    "milliseconds register stream relation view query with static case when then else end between like exists all " +
    "any count sum avg min max true false integer float char varchar byte").split(" "),
);
const TOKEN = /(--[^\n]*)|('(?:[^']|'')*'?)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)|([^]+?)/g;
let marker = null; // {line, column} of the current error
let go = null;

// the text as highlighted nodes; the character at the marker (or the end of its line) is wrapped in a .marker span
function render() {
  const text = $("cql").value;
  const out = [];
  let offset = -1;
  if (marker) {
    const lines = text.split("\n");
    const line = Math.min(Math.max(marker.line, 1), lines.length);
    offset = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0) + Math.min(Math.max(marker.column, 1) - 1, lines[line - 1].length);
  }
  let pos = 0;
  const push = (str, cls) => {
    // split a token around the marker offset so the marker covers exactly one character
    if (offset >= pos && offset < pos + str.length) {
      const i = offset - pos;
      if (i) out.push(cls ? h("span", { class: cls }, str.slice(0, i)) : str.slice(0, i));
      out.push(markerSpan(str[i] === "\n" ? "" : str[i]));
      if (str[i] === "\n") out.push("\n");
      if (i + 1 < str.length) out.push(cls ? h("span", { class: cls }, str.slice(i + 1)) : str.slice(i + 1));
    } else out.push(cls ? h("span", { class: cls }, str) : str);
    pos += str.length;
  };
  for (const m of text.matchAll(TOKEN)) {
    const [tok, cmt, str, num, word] = m;
    push(tok, cmt ? "cmt" : str ? "str" : num ? "numl" : word && KEYWORDS.has(word.toLowerCase()) ? "kw" : null);
  }
  if (offset >= pos) out.push(markerSpan(""));
  $("cql-view").replaceChildren(...out, "\n");
  syncScroll();
}

function markerSpan(ch) {
  return h("span", { class: "marker", id: "cql-marker", "data-line": marker.line, "data-column": marker.column,
    title: $("cql-error").textContent }, ch);
}

function syncScroll() {
  $("cql-view").scrollTop = $("cql").scrollTop;
  $("cql-view").scrollLeft = $("cql").scrollLeft;
}

function showProblem(e) {
  const p = e.problem || {};
  marker = p.line ? { line: p.line, column: p.column || 1 } : null;
  $("cql-error").textContent = (p.line ? `line ${p.line}, column ${p.column}: ` : "") + e.message + (p.excerpt ? `\n${p.excerpt}` : "");
  render();
}

function clearProblem() {
  marker = null;
  $("cql-error").textContent = "";
  render();
}

async function explain() {
  try {
    const out = await api("POST", "/explain", { cql: $("cql").value });
    clearProblem();
    $("explain-out").textContent = out.explain;
    return true;
  } catch (e) {
    showProblem(e);
    $("explain-out").textContent = "";
    return false;
  }
}

async function register(e) {
  e.preventDefault();
  const body = { cql: $("cql").value };
  if ($("query-name").value.trim()) body.name = $("query-name").value.trim();
  if ($("seed-from").value.trim()) body.seed_from = Number($("seed-from").value);
  try {
    const q = await api("POST", "/queries", body);
    clearProblem();
    $("explain-out").textContent = q.explain;
    toast(`registered query ${q.id} (${q.kind})`);
    go(`results/${q.id}`);
  } catch (err) {
    showProblem(err);
  }
}

export function init(navigate) {
  go = navigate;
  $("cql").addEventListener("input", () => { marker = null; $("cql-error").textContent = ""; render(); });
  $("cql").addEventListener("scroll", syncScroll);
  $("explain").addEventListener("click", explain);
  $("editor-form").addEventListener("submit", register);
  render();
}

export function show() {}
