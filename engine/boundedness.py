"""Bounded-memory verdict of a query (the server's `bounded_memory`): `decide` asks the
characterization of Arasu et al. (cql/boundedness) first, and where it does not apply (windows
other than Unbounded, relations, constructs outside select-project-join-aggregate) falls back on
the size classes of this engine's plan (`verdict`), saying which procedure decided.

Plan-based verdict of a query's plan in this engine:

Each relation in the plan gets a size class, and each stateful operator holds state of its
input's class (seed 003 §1.3: row-based windows are trivially bounded; time-based windows are
bounded only given a bound on the arrival rate; an unbounded window's relation grows with the
input). The verdict is the worst class held:

- True: bounded whatever the input (Rows windows; selections and Istream over streams; scalar
  count/sum/avg);
- None: bounded if the arrival rate is (Range/Now windows hold what arrives in their extent);
- False: grows with the input (state over an Unbounded window, or a Partition By window, whose
  number of partitions grows with the distinct keys).

Relations registered by the user (`register relation`) count as bounded: their size is the
user's. This is about this engine's plan, not the best possible one (seed 003 shows e.g.
`max(A)` over an unbounded stream needs O(1); this engine keeps the distinct values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cqlstream.cql.boundedness import Decision
from cqlstream.cql.boundedness import decide as characterize
from cqlstream.cql.frontend import CompiledQuery
from cqlstream.cql.logical import nodes as L
from cqlstream.engine.operators.base import BOUNDED as B
from cqlstream.engine.operators.base import GROWS as U
from cqlstream.engine.operators.base import RATE
from cqlstream.engine.operators.registry import operator_class

NAMES = {B: "bounded", RATE: "bounded for a bounded arrival rate", U: "grows with the input"}


def analyze(plan: L.Plan) -> tuple[int, list[str]]:
    """(worst class of state the plan holds, reasons naming the operators that hold it): each
    node's operator class tells its own contribution (`Operator.state_class`)."""
    held: list[tuple[int, str]] = []

    def size(n: L.Plan) -> int:
        """Size class of n's relation (streams hold nothing: B)."""
        kids = [size(i) for i in n.inputs]
        cls = operator_class(n)
        if cls is None:  # a source (registered relations count as bounded)
            return max(kids, default=B)
        c, why = cls.state_class(n, kids)
        held.extend(why)
        return c

    top = size(plan)
    if not plan.is_stream:  # a relation result is kept current (snapshots for subscribers)
        held.append((top, "the result relation"))
    if not held:
        return B, []
    worst = max(c for c, _ in held)
    return worst, sorted({why for c, why in held if c == worst})


def verdict(plan: L.Plan) -> tuple[bool | None, str]:
    """(True / None / False as in the module docstring, a one-line reason)."""
    c, why = analyze(plan)
    v = {B: True, RATE: None, U: False}[c]
    return v, (NAMES[c] + (": " + ", ".join(why) if why and c != B else ""))


CHARACTERIZATION = "characterization"  # Arasu, Babcock, Babu, McAlister, Widom (cql/boundedness)
PLAN = "plan"  # the size classes of this engine's operators (`verdict`)


@dataclass(frozen=True)
class Verdict:
    """A query's bounded-memory verdict: `bounded` True / None (bounded for a bounded arrival rate)
    / False, the `procedure` and `rule` that decided, the `reason`, the constant-size `synopsis`
    that answers a bounded query (what is kept, `memory_units` its bound: one unit holds a value
    or a count), and what this engine's own plan holds (`engine_plan`), which may be more."""

    bounded: bool | None
    procedure: str
    rule: str
    reason: str
    synopsis: tuple[str, ...] = ()
    memory_units: int | None = None
    engine_plan: str = ""
    method: str = ""  # how the derived LTO queries were checked: "enumeration", "checker" or ""

    @property
    def note(self) -> str:
        """One line: the verdict's word, the reason and the rule."""
        word = {True: NAMES[B], None: NAMES[RATE], False: NAMES[U]}[self.bounded]
        return f"{word}: {self.reason} [{self.rule}]" if self.reason else f"{word} [{self.rule}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "bounded": self.bounded,
            "procedure": self.procedure,
            "rule": self.rule,
            "reason": self.reason,
            "synopsis": list(self.synopsis),
            "memory_units": self.memory_units,
            "engine_plan": self.engine_plan,
            "method": self.method,
        }

    def lines(self) -> list[str]:
        """The verdict as EXPLAIN prints it."""
        word = {True: "yes", None: "for a bounded arrival rate", False: "no"}[self.bounded]
        by = self.rule if self.procedure == CHARACTERIZATION else "this engine's plan operators"
        how = {"enumeration": "; every derived LTO query enumerated", "checker": "; the §6 checker's witness search"}
        out = [f"Bounded memory: {word} (by {by}{how.get(self.method, '')})", f"  why: {self.reason}"]
        if self.synopsis:
            units = "" if self.memory_units is None else f" (≤ {self.memory_units} units)"
            out.append(f"  synopsis{units}:")
            out.extend(f"    - {s}" for s in self.synopsis)
        if self.procedure == CHARACTERIZATION:
            out.append(f"  this engine's plan: {self.engine_plan}")
        return out


def decide(plan: L.Plan, run: L.Plan | None = None) -> Verdict:
    """The characterization's verdict where it applies, else the plan-based one (its reason
    then says why the characterization did not apply). `run`: the plan the engine runs for it
    (default: a synopsis join where one applies, else `plan`), which `engine_plan` describes."""
    from cqlstream.engine.synopsis_plan import SynopsisJoinPlan, synopsis_node, synopsis_plan

    if run is None:
        run = synopsis_plan(plan) or plan
    bounded, note = verdict(plan)
    found = characterize(plan)
    if isinstance(found, Decision):
        node = synopsis_node(run)
        if node is not None:
            units = "" if found.memory_units is None else f" of at most {found.memory_units} units"
            what = "a synopsis join" if isinstance(node, SynopsisJoinPlan) else "a synopsis aggregate"
            note = f"bounded: run as {what} holding the synopsis{units} (the ordinary plan's {note})"
        return Verdict(
            found.bounded,
            CHARACTERIZATION,
            found.rule,
            found.reason,
            found.synopsis,
            found.memory_units,
            note,
            found.method,
        )
    why = note.split(": ", 1)[1] if ": " in note else note
    reason = (why + " " if why else "") + f"(the characterization does not apply: {found.reason})"
    return Verdict(bounded, PLAN, "plan operators", reason, engine_plan=note)


def explain(compiled: CompiledQuery) -> str:
    """A compiled query's EXPLAIN followed by its bounded-memory verdict (what `cqlstream explain`
    and the server's explain print for a query not registered)."""
    return compiled.explain() + "\n" + "\n".join(decide(compiled.plan).lines())
