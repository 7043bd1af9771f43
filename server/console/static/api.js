// HTTP helpers: JSON in and out, problem documents (RFC 7807) raised as ApiError, the API key header.
export class ApiError extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || `HTTP ${problem.status}`);
    this.problem = problem;
  }
}

const KEY = "cqlstream.apiKey";
export const apiKey = {
  get: () => sessionStorage.getItem(KEY) || "",
  set: (v) => (v ? sessionStorage.setItem(KEY, v) : sessionStorage.removeItem(KEY)),
};

export async function api(method, path, body, contentType) {
  const headers = { Accept: "application/json" };
  if (apiKey.get()) headers["X-API-Key"] = apiKey.get();
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = contentType || "application/json";
    payload = typeof body === "string" ? body : JSON.stringify(body);
  }
  const r = await fetch(path, { method, headers, body: payload });
  if (r.status === 204) return null;
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (!r.ok) throw new ApiError({ status: r.status, ...(data || {}) });
  return data;
}

// a tiny element builder: h("td", {class: "num"}, "3")
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}

export function toast(msg, bad = false) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  t.className = bad ? "bad" : "";
}

export function fmt(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number" && !Number.isInteger(v)) return v.toPrecision(4).replace(/\.?0+$/, "");
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}
