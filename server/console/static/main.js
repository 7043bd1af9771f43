// Console entry: tabs (with the URL hash: #catalog, #editor, #results/3, #plan, #kmon) and the API key field.
import { apiKey } from "./api.js";
import * as catalog from "./catalog.js";
import * as editor from "./editor.js";
import * as results from "./results.js";
import * as plan from "./plan.js";
import * as kmon from "./kmon.js";

const VIEWS = { catalog, editor, results, plan, kmon };
const tabs = [...document.querySelectorAll("[role=tab]")];
let current = null;

function show(route) {
  const [name, arg] = (route || "catalog").split("/");
  const view = VIEWS[name] ? name : "catalog";
  for (const t of tabs) {
    const on = t.dataset.view === view;
    t.setAttribute("aria-selected", on);
    t.tabIndex = on ? 0 : -1;
    document.getElementById(t.getAttribute("aria-controls")).hidden = !on;
  }
  if (current && current !== view) VIEWS[current].hide?.();
  current = view;
  VIEWS[view].show(arg);
}

export function go(route) {
  if (location.hash === `#${route}`) show(route);
  else location.hash = route;
}

tabs.forEach((t, i) => {
  t.addEventListener("click", () => go(t.dataset.view));
  t.addEventListener("keydown", (e) => {  // arrow keys move between tabs (WAI-ARIA tabs pattern)
    const d = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
    if (!d) return;
    const next = tabs[(i + d + tabs.length) % tabs.length];
    next.focus();
    go(next.dataset.view);
  });
});
window.addEventListener("hashchange", () => show(location.hash.slice(1)));

const key = document.getElementById("api-key");
key.value = apiKey.get();
key.addEventListener("change", () => apiKey.set(key.value));

for (const v of Object.values(VIEWS)) v.init?.(go);
show(location.hash.slice(1));
