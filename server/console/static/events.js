// Server-sent events read with fetch: the browser's EventSource cannot send the API key header, so
// a server started with --api-key or --read-key could not be watched live. Same frames, same events.
import { apiKey } from "./api.js";

// one SSE frame ("event:", "data:" lines; comments and ids ignored) -> [name, data]
function parseFrame(frame) {
  let name = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  return [name, data.join("\n")];
}

export class EventFeed {
  // handlers: {open(data), message(data), <event name>(data), error(text)}; close() stops reading
  constructor(url, handlers) {
    this.handlers = handlers;
    this.abort = new AbortController();
    this.read(url);
  }

  close() {
    this.abort.abort();
  }

  emit(name, data) {
    const f = this.handlers[name];
    if (f) f(data);
  }

  async read(url) {
    const headers = { Accept: "text/event-stream" };
    if (apiKey.get()) headers["X-API-Key"] = apiKey.get();
    try {
      const r = await fetch(url, { headers, signal: this.abort.signal });
      if (!r.ok) {
        let detail = `HTTP ${r.status}`;
        try { detail = (await r.json()).detail || detail; } catch {}
        return this.emit("error", detail);
      }
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        // a "\r" at the end of a chunk may be half of "\r\n": normalize only what is complete
        buf += value;
        const tail = buf.endsWith("\r") ? "\r" : "";
        buf = buf.slice(0, buf.length - tail.length).replace(/\r\n?/g, "\n");
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          this.emit(...parseFrame(buf.slice(0, end)));
          buf = buf.slice(end + 2);
        }
        buf += tail;
      }
      this.emit("error", "disconnected");
    } catch (e) {
      if (e.name !== "AbortError") this.emit("error", e.message);
    }
  }
}
