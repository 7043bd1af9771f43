// Per-second rates of control-table counters over the last minute, from successive samples.
const WINDOW_MS = 60000;
const samples = new Map(); // key -> [[t, value], ...]

export function sample(key, value, now = performance.now()) {
  if (typeof value !== "number") return null;
  const s = samples.get(key) || [];
  s.push([now, value]);
  while (s.length > 2 && now - s[0][0] > WINDOW_MS) s.shift();
  samples.set(key, s);
  if (s.length < 2) return null;
  const [t0, v0] = s[0];
  return now > t0 ? Math.max(0, ((value - v0) * 1000) / (now - t0)) : null;
}
