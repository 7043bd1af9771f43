"""Parse each result format back into (ts, sign, row) elements (+ the control events seen)."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET


def _typed(v: str | None, t: str):
    if v is None:
        return None
    t = t.upper()
    if t.startswith(("INTEGER", "TIMESTAMP")):
        return int(v)
    if t.startswith("FLOAT"):
        return float(v)
    if t.startswith("BOOLEAN"):
        return v == "true"
    return v


def ndjson(text: str, schema=None):
    elems, events = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        o = json.loads(line)
        if "event" in o:
            events.append(o)
        else:
            elems.append((o["ts"], o["sign"], tuple(o["row"])))
    return elems, events


def json_array(text: str, schema=None):
    arr = json.loads(text)
    assert isinstance(arr, list)
    elems = [(o["ts"], o["sign"], tuple(o["row"])) for o in arr if "event" not in o]
    events = [o for o in arr if "event" in o]
    assert events and events[-1] == {"event": "close"}, "a JSON result array ends with the close event"
    return elems, events[:-1]


def sse(text: str, schema=None):
    elems, events = [], []
    assert text.endswith("\n\n") or not text
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        ev, data = "message", []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            k, _, v = line.partition(":")
            v = v[1:] if v.startswith(" ") else v
            if k == "event":
                ev = v
            elif k == "data":
                data.append(v)
        if not data:
            continue
        o = json.loads("\n".join(data))
        if ev == "message":
            elems.append((o["ts"], o["sign"], tuple(o["row"])))
        else:
            events.append(o)
    return elems, events


def _text(v) -> str:
    """An XML value's text (`enc="base64"`: the base64 of its UTF-8, for text XML cannot hold)."""
    if v.get("enc") == "base64":
        return base64.b64decode(v.text or "").decode("utf-8")
    return v.text or ""


def xml(text: str, schema=None):
    root = ET.fromstring(text)
    assert root.tag == "results"
    types = [a.get("type") for a in root.find("schema")]
    elems, events = [], []
    for el in root:
        if el.tag == "tuple":
            row = tuple(None if v.get("null") == "true" else _typed(_text(v), t) for v, t in zip(el, types))
            elems.append((int(el.get("ts")), 1 if el.get("sign") == "+" else -1, row))
        elif el.tag != "schema":
            events.append({"event": el.tag, **el.attrib})
    return elems, events


PARSERS = {"ndjson": ndjson, "json": json_array, "sse": sse, "xml": xml}
