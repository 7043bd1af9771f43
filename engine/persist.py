"""The catalog and plans on disk (CIDR §6.2): `plan.json` under the data directory, a JSON file
meant to be read and edited by people (STREAM used XML), restored at start-up.

    {"format": "cqlstream-plan", "version": 1,
     "engine": {"share": true, "scheduler": "round-robin", "budget": null},
     "catalog": ["REGISTER STREAM S (A INTEGER, B INTEGER)", "REGISTER VIEW V AS ..."],
     "next_query_id": 2,
     "queries": [{"id": 1, "name": null, "cql": "select ...", "active": true, "weight": 1.0, "share": true}],
     "knobs": [{"entity": "src:S", "knob": "sampling_rate", "value": 0.5},
               {"operator": "<the operator's subplan, as EXPLAIN prints it>", "knob": "probe_orders", "value": [[1], [0]]}]}

Queries come back with the same ids; `share: false` gives a query its own operators (explicit
sharing decisions written offline are honoured); knobs set at run time are written back.
Operator knobs are keyed by the operator's subplan, which stays the same across restarts even
when operator numbers do not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqlstream.cql.errors import CqlError
from cqlstream.cql.logical.explain import explain_plan
from cqlstream.engine.errors import EngineError, PlanFileError

if TYPE_CHECKING:
    from cqlstream.engine.dsms import Dsms, QueryHandle
    from cqlstream.engine.operators.base import Operator

FORMAT, VERSION = "cqlstream-plan", 1


def _approximate(h: QueryHandle) -> dict[str, Any]:
    """A query's approved static approximation, for the plan file (nothing for an exact query)."""
    a = h.compiled.approximation
    return {} if a is None else {"approximate": a.spec.to_json()}


def _op_key(op: Operator) -> str:
    assert op.node is not None  # planned operators are bound to their node
    return f"{op.kind}: {explain_plan(op.node)}"


def _operators(d: Dsms) -> list[Operator]:
    """Every operator with knobs: scheduled ones and the members of grouped selections."""
    return list(d.plan.operators) + [
        pn.op for pn in d.plan.nodes.values() if pn.op is not None and pn.op not in d.plan.operators
    ]


class PlanFile:
    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(data_dir)
        self.path = self.dir / "plan.json"
        self.restoring = False

    # ------------------------------------------------------------ writing
    def document(self, d: Dsms) -> dict[str, Any]:
        ops = {op.eid: op for op in _operators(d)}
        knobs: list[dict[str, Any]] = []
        for eid, kv in d.knobs.items():  # engine and query knobs have their own sections
            for knob, value in kv.items():
                if eid in ops:
                    knobs.append({"operator": _op_key(ops[eid]), "knob": knob, "value": value})
                elif eid.startswith("src:"):
                    knobs.append({"entity": eid, "knob": knob, "value": value})
        s = d.scheduler
        return {
            "format": FORMAT,
            "version": VERSION,
            "engine": {"share": d.share, "scheduler": s.name, "budget": s.budget},
            "next_query_id": d.peek_next_query_id(),
            "catalog": list(d.ddl.values()),
            "queries": [
                {"id": h.id, "name": h.name, "cql": h.text, "active": h.active, "weight": h.weight, "share": h.share}
                | _approximate(h)
                for h in sorted(d.queries.values(), key=lambda h: h.id)
            ],
            "knobs": knobs,
        }

    def save(self, d: Dsms) -> None:
        """Write atomically (a crash leaves the old or the new file, never half of one)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.document(d), f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    # ------------------------------------------------------------ reading
    def restore(self, d: Dsms) -> None:
        if not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise PlanFileError(f"{self.path}: not readable JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise PlanFileError(f'{self.path}: not a {FORMAT} file ("format" must be "{FORMAT}")')
        self.apply(d, doc)

    def apply(self, d: Dsms, doc: dict[str, Any]) -> None:
        """Register the catalog, queries and knobs of a plan document (`document`'s shape) in `d`."""
        self.restoring = True
        try:
            self._apply(d, doc)
        finally:
            self.restoring = False

    def _apply(self, d: Dsms, doc: dict[str, Any]) -> None:
        where = str(self.path)
        eng = doc.get("engine") or {}
        if "share" in eng:
            d.share = bool(eng["share"])
        for knob in ("scheduler", "budget"):
            if eng.get(knob) is not None:
                self._knob(d, "engine", knob, eng[knob], f"{where}: engine.{knob}")
        for i, stmt in enumerate(doc.get("catalog") or []):
            try:
                d.execute(stmt)
            except CqlError as e:
                raise PlanFileError(f"{where}: catalog[{i}]: {e}") from None
        for i, q in enumerate(doc.get("queries") or []):
            try:
                d.register_query(
                    q["cql"],
                    name=q.get("name"),
                    active=bool(q.get("active", True)),
                    weight=float(q.get("weight", 1.0)),
                    share=q.get("share"),
                    query_id=int(q["id"]),
                    approximate=q.get("approximate"),
                )
            except CqlError as e:
                raise PlanFileError(f"{where}: queries[{i}] (id {q.get('id')}): {e}") from None
            except (EngineError, KeyError, TypeError, ValueError) as e:
                raise PlanFileError(f"{where}: queries[{i}]: {e}") from None
        if isinstance(doc.get("next_query_id"), int):
            d.reserve_query_ids(doc["next_query_id"])
        ops = {_op_key(op): op.eid for op in _operators(d)}
        for i, k in enumerate(doc.get("knobs") or []):
            eid = k.get("entity") or ops.get(k.get("operator", ""))
            if eid is None:
                raise PlanFileError(f"{where}: knobs[{i}]: no operator {k.get('operator')!r} in the restored plan")
            self._knob(d, eid, k.get("knob"), k.get("value"), f"{where}: knobs[{i}]")

    @staticmethod
    def _knob(d: Dsms, eid: str, knob: str, value: object, where: str) -> None:
        from cqlstream.engine import control

        try:
            control.set_knob(d, eid, knob, value)
        except (EngineError, KeyError, ValueError) as e:
            raise PlanFileError(f"{where}: {e}") from None
