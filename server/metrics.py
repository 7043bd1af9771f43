"""`GET /metrics`: Prometheus text exposition (format 0.0.4) of the host's counters and gauges."""

from __future__ import annotations

import math
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Sample = float | None  # a metric value; None renders as NaN


def _label(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float | None) -> str:
    if v is None:
        return "NaN"
    x = float(v)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(self, name: str, kind: str, help_: str, samples: Sample | list[tuple[dict[str, Any], Sample]]) -> None:
        """samples: a number, or a list of (labels dict, number)."""
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")
        if not isinstance(samples, list):
            samples = [({}, samples)]
        for labels, v in samples:
            lab = ",".join(f'{k}="{_label(x)}"' for k, x in labels.items())
            self.lines.append(f"{name}{{{lab}}} {_num(v)}" if lab else f"{name} {_num(v)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# Spark sources: (counter name, metric type, help) — one series per source
_SPARK = [
    ("batches", "counter", "Micro-batches a Spark source applied."),
    ("rows", "counter", "Rows a Spark source delivered."),
    ("late_rows", "counter", "Rows of a Spark source dropped as older than the stream's time."),
    ("skipped_replays", "counter", "Micro-batches Spark re-delivered after a restart and the bridge skipped."),
    ("last_batch_id", "gauge", "The last micro-batch id a Spark source applied."),
    ("last_batch_seconds", "gauge", "Seconds the bridge took for the last micro-batch."),
    ("spark_batch_ms", "gauge", "Spark's duration of its last trigger, in milliseconds."),
    ("lag_seconds", "gauge", "Wall clock minus the event time a Spark source has reached (TIMESTAMP event times)."),
]


def render(m: dict[str, Any], http: dict[str, int]) -> str:
    o = _Out()
    o.metric("cqlstream_uptime_seconds", "gauge", "Seconds since the server started.", m["uptime"])
    o.metric(
        "cqlstream_tuples_accepted_total",
        "counter",
        "Tuples accepted, per stream or relation.",
        [({"source": k}, v) for k, v in sorted(m["accepted"].items())],
    )
    o.metric(
        "cqlstream_tuples_rejected_total",
        "counter",
        "Tuples in pushes the engine rejected, per source.",
        [({"source": k}, v) for k, v in sorted(m["rejected"].items())],
    )
    o.metric(
        "cqlstream_pushes_rejected_total",
        "counter",
        "Rejected pushes, per problem code.",
        [({"code": k}, v) for k, v in sorted(m["rejected_pushes"].items())],
    )
    o.metric("cqlstream_pushes_total", "counter", "Accepted pushes.", m["pushes"])
    o.metric(
        "cqlstream_pushes_replayed_total",
        "counter",
        "Pushes answered from their Idempotency-Key (a retry of a push already applied), per source.",
        [({"source": k}, v) for k, v in sorted(m["replayed"].items())],
    )
    o.metric(
        "cqlstream_idempotency_keys",
        "gauge",
        "Idempotency keys of applied pushes remembered, per source.",
        [({"source": k}, v["idempotency_keys"]) for k, v in sorted(m["sources"].items())],
    )
    o.metric(
        "cqlstream_source_late_total",
        "counter",
        "Tuples dropped as late: later than the slack, or older than the source's time in a push with late=drop.",
        [({"source": k}, v["late"]) for k, v in sorted(m["sources"].items())],
    )
    o.metric(
        "cqlstream_source_time",
        "gauge",
        "Largest timestamp or heartbeat seen per source.",
        [({"source": k}, v["max_ts"]) for k, v in sorted(m["sources"].items()) if v["max_ts"] is not None],
    )
    o.metric("cqlstream_queries", "gauge", "Registered queries.", m["queries"])
    o.metric(
        "cqlstream_subscribers",
        "gauge",
        "Connected result subscribers, per query.",
        [({"query": q}, v) for q, v in sorted(m["subscribers"].items())],
    )
    o.metric(
        "cqlstream_subscriber_buffered_elements",
        "gauge",
        "Result elements buffered for subscribers.",
        [({"query": q}, v) for q, v in sorted(m["buffered"].items())],
    )
    o.metric("cqlstream_subscriptions_total", "counter", "Result subscriptions opened.", m["subscriptions_total"])
    o.metric(
        "cqlstream_subscriber_lag_disconnects_total",
        "counter",
        "Subscribers disconnected because their buffer overflowed (too slow).",
        m["lag_disconnects"],
    )
    o.metric(
        "cqlstream_subscriber_cutoffs_total",
        "counter",
        "Lagged subscribers whose connection was cut because they did not read the lagged message in time.",
        m["cutoffs"],
    )
    o.metric(
        "cqlstream_results_total",
        "counter",
        "Result elements produced, per query.",
        [({"query": q}, v) for q, v in sorted(m["emitted"].items())],
    )
    o.metric(
        "cqlstream_query_memory_bytes",
        "gauge",
        "Memory attributed to each query (shared state split).",
        [({"query": q}, a.get("memory_bytes")) for q, a in sorted(m["attribution"].items())],
    )
    o.metric(
        "cqlstream_query_cpu_seconds_total",
        "counter",
        "CPU time attributed to each query.",
        [({"query": q}, a.get("cpu_seconds")) for q, a in sorted(m["attribution"].items())],
    )
    o.metric("cqlstream_engine_run_seconds_total", "counter", "Wall time spent running the engine.", m["run_seconds"])
    o.metric("cqlstream_engine_runs_total", "counter", "Engine runs.", m["runs"])
    spark = m.get("spark", {})
    for key, kind, help_ in _SPARK:
        o.metric(
            f"cqlstream_spark_source_{key}",
            kind,
            help_,
            [({"source": k}, v.get(key)) for k, v in sorted(spark.items())],
        )
    log = m.get("log") or {}
    if log:  # the write-ahead log (with --data-dir)
        o.metric("cqlstream_log_bytes", "gauge", "Bytes in the write-ahead log's segments.", log["bytes"])
        o.metric("cqlstream_log_next_record", "gauge", "The number the next log record gets.", log["next_lsn"])
        o.metric(
            "cqlstream_log_records_since_checkpoint",
            "gauge",
            "Log records since the last checkpoint.",
            log["since_checkpoint"],
        )
        o.metric(
            "cqlstream_log_failed",
            "gauge",
            "1 when the log cannot be written (changes get 503).",
            int(bool(log["failed"])),
        )
    o.metric(
        "cqlstream_http_requests_total",
        "counter",
        "HTTP requests, per status class.",
        [({"status": k}, v) for k, v in sorted(http.items())],
    )
    return o.text()
