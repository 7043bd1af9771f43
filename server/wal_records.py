"""What the server writes in its log and how each record is replayed: one record per state change
the engine host applies, replayed at recovery through the same host calls.

Every record's JSON header has `op` (a key of `REPLAY`) and `now`, the wall-clock instant the
engine saw during the call (the host pins the engine's clock per call, so replay sees the same
instant: silence timeouts and system timestamps come out the same). A push carries its rows as
they were pushed to the engine, after system timestamps were assigned, as an Arrow IPC stream
(columns `ts`, `sign`, `c0`… and a null mask `n<i>` for a column with NULLs).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from cqlstream.engine.batch import Batch

if TYPE_CHECKING:
    from cqlstream.server.host import EngineHost

# ---------------------------------------------------------------- the rows of a push


def encode_batch(b: Batch) -> tuple[str, bytes]:
    """(codec, bytes) of a batch's timestamps, signs, columns and null masks. Arrow IPC; a column
    Arrow cannot take as it is (a string with a lone surrogate, say) sends the batch as a pickle."""
    try:
        arrays = [pa.array(b.ts, pa.int64()), pa.array(b.sign, pa.int8())]
        names = ["ts", "sign"]
        for i, (c, m) in enumerate(zip(b.cols, b.nulls)):
            arrays.append(pa.array(c, pa.string()) if c.dtype == object else pa.array(c))
            names.append(f"c{i}")
            if m is not None:
                arrays.append(pa.array(m, pa.bool_()))
                names.append(f"n{i}")
        rb = pa.RecordBatch.from_arrays(arrays, names=names)
    except (pa.ArrowException, UnicodeEncodeError, TypeError, ValueError):
        return "pickle", pickle.dumps((b.cols, b.nulls, b.ts, b.sign), protocol=5)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rb.schema) as w:
        w.write_batch(rb)
    return "arrow", sink.getvalue().to_pybytes()


def decode_batch(codec: str, data: bytes) -> Batch:
    """The batch `encode_batch` wrote (tuple ids are the engine's to assign: zeros)."""
    if codec == "pickle":
        cols, nulls, ts, sign = pickle.loads(data)
    else:
        rb = pa.ipc.open_stream(data).read_next_batch()
        names = rb.schema.names
        ts = rb.column(0).to_numpy().astype(np.int64, copy=False)
        sign = rb.column(1).to_numpy().astype(np.int8, copy=False)
        cols, nulls = [], []
        for k in range(2, len(names)):
            name, arr = names[k], rb.column(k)
            if name.startswith("n"):
                nulls[-1] = arr.to_numpy(zero_copy_only=False).astype(np.bool_, copy=False)
                continue
            col = arr.to_numpy(zero_copy_only=False)
            if pa.types.is_string(arr.type):
                col = col.astype(object, copy=False)
            cols.append(col)
            nulls.append(None)
    return Batch(list(cols), list(nulls), ts, sign, np.zeros(len(ts), np.uint64))


# ---------------------------------------------------------------- replay, per record kind


def _push(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    """A push, with the admission decision the live push made (none recorded: admitted as it was)."""
    from cqlstream.engine.approx.admission import Decision

    batch = decode_batch(h["codec"], payload)
    adm = h.get("admission")
    decision = None if adm is None else Decision.from_json(adm)
    host._apply_batch(
        host._source(h["source"]),
        batch,
        h.get("drop_late", False),
        h.get("heartbeat"),
        h.get("key"),
        replay=(decision,),
    )


def _heartbeat(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    host.heartbeat(h["source"], h["t"])


def _tick(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    host._tick()


def _register_query(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    host.d.reserve_query_ids(h["id"])  # ids consumed by registrations that failed are skipped alike
    seed = h.get("seed_from")  # seeded from the archive: the log before this record, as live
    out = host.register_query(
        h["cql"], h.get("name"), seed, upto=host.journal.replay_lsn, approximate=h.get("approximate")
    )
    if out["id"] != h["id"]:
        raise RuntimeError(f"replayed query got id {out['id']}, the log says {h['id']}")


def _patch_query(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    host.patch_query(h["id"], h.get("active"), h.get("weight"))


def _knob(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    host.d.set_knob(h["entity"], h["knob"], h["value"])
    host.publish()


def _suspend(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    """A query the live run suspended over a limit (a no-op when the replay suspended it already)."""
    host.d.suspend(h["id"], h["reason"])
    host.publish()


def _approximate(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    """A change the overload controller made live: the same sampling steps at the same point."""
    if host.d.approx is not None:
        host.d.approx.set_levels({int(q): int(k) for q, k in h["levels"].items()}, h.get("reason", ""))
        host._run()


def _plan(host: EngineHost, h: dict[str, Any], payload: bytes) -> None:
    """The catalog and queries of a data dir written before it had a log (its plan file)."""
    from cqlstream.engine.persist import PlanFile

    assert host.d.plan_file is not None
    PlanFile.apply(host.d.plan_file, host.d, h["doc"])
    for qid in sorted(host.d.queries):
        if qid not in host.fanout.pubs:
            host.fanout.add(host.d.queries[qid])


Replay = Callable[["EngineHost", dict[str, Any], bytes], object]

REPLAY: dict[str, Replay] = {
    "approximate": _approximate,
    "push": _push,
    "heartbeat": _heartbeat,
    "tick": _tick,
    "register_source": lambda host, h, p: host.register_source(h["ddl"]),
    "drop_source": lambda host, h, p: host.drop_source(h["name"]),
    "register_view": lambda host, h, p: host.register_view(h["ddl"]),
    "drop_view": lambda host, h, p: host.drop_view(h["name"]),
    "register_query": _register_query,
    "patch_query": _patch_query,
    "delete_query": lambda host, h, p: host.delete_query(h["id"]),
    "knob": _knob,
    "suspend": _suspend,
    "plan": _plan,
}
