"""Operators own their behaviour: outside engine/operators/, nothing dispatches on concrete
operator, store or window-kind classes (`isinstance(x, JoinOp)`, `type(x) is FilterOp`), probes
operators with getattr/hasattr, or patches their wiring after construction (`op.eid = ...`).
Code that needs something of an operator calls a method of the operator protocol
(engine/operators/base.py) instead. An AST scan of the layers above the operators enforces it."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import cqlstream.engine.operators as ops_pkg
from cqlstream.engine.operators.base import Operator
from cqlstream.engine.operators.window_kinds import WindowKind
from cqlstream.engine.operators.window_logic import WindowLogic
from cqlstream.engine.synopses import Synopsis

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["engine", "server", "io", "cqlstream"]
EXEMPT = [ROOT / "engine" / "operators"]  # where behaviour lives

# names an operator or store travels under in the scanned code
OPERATORISH = re.compile(r"^(op|ops|operator|o|obj|hub|m|member|producer|st|store|ws|view|sib|old|fresh)$")
# wiring an operator gets through its constructor or bind(), never by assignment from outside
WIRING = {"eid", "node", "label", "readers", "hold_until", "counters", "knobs", "t0", "snap_at", "store"}


def _concrete_classes() -> set[str]:
    names = set()
    for info in pkgutil.iter_modules(ops_pkg.__path__):
        mod = importlib.import_module(f"{ops_pkg.__name__}.{info.name}")
        for name, obj in inspect.getmembers(mod, inspect.isclass):
            bases = (Operator, WindowKind, WindowLogic, Synopsis)
            if obj not in bases and issubclass(obj, bases):
                names.add(name)
    from cqlstream.engine import synopses, window_store

    for mod in (synopses, window_store):
        for name, obj in inspect.getmembers(mod, inspect.isclass):
            if obj is not Synopsis and issubclass(obj, Synopsis):
                names.add(name)
    return names


def _files():
    for top in SCANNED:
        d = ROOT / top
        if not d.is_dir():
            continue
        for p in sorted(d.rglob("*.py")):
            if not any(p.is_relative_to(e) for e in EXEMPT):
                yield p


def _tail(e: ast.expr) -> str | None:
    """The last name of `x` or `a.b.x`."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        return e.attr
    return None


def _class_names(e: ast.expr) -> list[str]:
    if isinstance(e, ast.Tuple):
        return [n for x in e.elts for n in _class_names(x)]
    t = _tail(e)
    return [t] if t else []


def violations(source: str, path: str, concrete: set[str]) -> list[str]:
    out = []
    for n in ast.walk(ast.parse(source)):
        where = f"{path}:{getattr(n, 'lineno', '?')}"
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            if n.func.id == "isinstance" and len(n.args) == 2:
                hit = [c for c in _class_names(n.args[1]) if c in concrete]
                if hit:
                    out.append(f"{where}: isinstance(..., {', '.join(hit)})")
            if n.func.id in ("getattr", "hasattr", "setattr") and n.args:
                t = _tail(n.args[0])
                if t is not None and OPERATORISH.match(t):
                    out.append(f"{where}: {n.func.id}({ast.unparse(n.args[0])}, ...)")
        if isinstance(n, ast.Compare) and isinstance(n.left, ast.Call) and _tail(n.left.func) == "type":
            hit = [c for x in n.comparators for c in _class_names(x) if c in concrete]
            if hit:
                out.append(f"{where}: type(...) is {', '.join(hit)}")
        if isinstance(n, (ast.Assign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            for t in flat:
                if isinstance(t, ast.Attribute) and t.attr in WIRING:
                    owner = _tail(t.value)
                    if owner is not None and (OPERATORISH.match(owner) or owner == "op"):
                        out.append(f"{where}: {ast.unparse(t)} = ... (wiring set from outside)")
    return out


def test_no_dispatch_on_operator_classes_outside_the_operators():
    concrete = _concrete_classes()
    assert {
        "JoinOp",
        "WindowOp",
        "AggregateOp",
        "HubMember",
        "RangeWindow",
        "TimeWindowLogic",
        "WindowStore",
    } <= concrete
    found = [v for p in _files() for v in violations(p.read_text(), str(p.relative_to(ROOT)), concrete)]
    assert not found, "dispatch outside the operator classes:\n" + "\n".join(found)


def test_the_scan_catches_each_kind_of_dispatch():
    concrete = _concrete_classes()
    bad = """
if isinstance(pn.op, WindowOp): pass
if isinstance(x, (int, JoinOp)): pass
if type(pn.op) is FilterOp: pass
limit = getattr(op, "memory_limit", None)
if hasattr(pn.op, "knobs"): pass
op.eid = "op:1"
m.node, m.eid = node, "op:2"
"""
    found = violations(bad, "x.py", concrete)
    assert len(found) == 8, found
    fine = """
if isinstance(node, L.Window): pass
budget = getattr(scheduler, "budget", None)
pn.note = "shared"
op.set_knob("memory_limit", 5)
"""
    assert violations(fine, "y.py", concrete) == []


LOGIC_PROTOCOL = {"process", "contents", "state_bytes", "pending_bytes"}


def test_window_buffers_stay_in_their_logic():
    """A window's buffers belong to its runtime (engine/operators/window_logic.py): everywhere
    else, in the operators too, a window's `logic` is only asked `process`, `contents`,
    `state_bytes` and `pending_bytes`, and the window operator keeps no buffer of its own."""
    found = []
    for p in sorted((ROOT / "engine").rglob("*.py")):
        if p.name == "window_logic.py":
            continue
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Attribute) and _tail(n.value) == "logic" and n.attr not in LOGIC_PROTOCOL:
                found.append(f"{p.relative_to(ROOT)}:{n.lineno}: {ast.unparse(n)}")
    assert not found, "window buffers read outside their logic:\n" + "\n".join(found)
    from cqlstream.cql.logical.nodes import RangeSpec
    from cqlstream.engine.operators.window import WindowOp
    from cqlstream.engine.queues import Queue

    op = WindowOp([Queue([])], Queue([]), None, RangeSpec(size=3, slide=None))
    assert not [a for a in vars(op) if a.startswith("buf") or a == "count"]
    assert isinstance(op.logic, WindowLogic)
