"""How a script view's declared kind (`vtable : register stream|relation`) meets what its vquery
yields, in paper mode and in STREAM compatibility mode (docs/semantics.md, "Views in scripts").

A vquery has two readings: with CQL's implicit Istream (a monotonic query over streams read
through default windows is a stream) and without it (the relation such a query computes). The
table below says, for each (declared kind, kind with the implicit Istream, kind without), which
reading the view takes and whether that is accepted, accepted with a warning, or refused.
STREAM 0.6 applies no implicit Istream and keeps a relation-valued view a relation even when it
is declared a stream; compatibility mode does the same, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

# messages: {name} the view, {line} the vquery's line, {declared}/{kind} the kinds
_NO_IMPLICIT = (
    "vtable '{name}' is declared a relation and its vquery (line {line}) is monotonic over streams "
    "read without windows: the view is the relation it computes, with no implicit Istream (as in STREAM 0.6)"
)
_STREAM_OVER_RELATION = (
    "vtable '{name}' is declared a stream but its vquery (line {line}) yields a relation; "
    "STREAM 0.6 keeps it a relation, and so does --stream-compat"
)
_WRAP = (
    "vtable '{name}' is declared a stream but its vquery (line {line}) yields a relation; "
    "wrap the vquery in Istream(...), Dstream(...) or Rstream(...), or register it as a relation"
)
_DECLARE_STREAM = (
    "vtable '{name}' is declared a relation but its vquery (line {line}) yields a stream; declare it 'register stream'"
)


@dataclass(frozen=True)
class Outcome:
    """`error` refuses the view with `message`; otherwise `message` (if any) is a warning."""

    message: str | None = None
    error: bool = False


@dataclass(frozen=True)
class Rule:
    """`implicit`: the view takes the reading with the implicit Istream (else the one without)."""

    implicit: bool
    paper: Outcome
    compat: Outcome


_OK = Outcome()

# (declared, kind with the implicit Istream, kind without) → rule
RULES: dict[tuple[str, str, str], Rule] = {
    ("stream", "stream", "stream"): Rule(True, _OK, _OK),
    # `select ... from S` (no window): a stream through the implicit Istream, in both modes
    ("stream", "stream", "relation"): Rule(True, _OK, _OK),
    # a windowed aggregate declared a stream
    ("stream", "relation", "relation"): Rule(False, Outcome(_WRAP, error=True), Outcome(_STREAM_OVER_RELATION)),
    ("relation", "relation", "relation"): Rule(False, _OK, _OK),
    # a join of unwindowed streams declared a relation: the relation, not its implicit Istream
    ("relation", "stream", "relation"): Rule(False, _OK, Outcome(_NO_IMPLICIT)),
    # Istream(...), or a set operation of streams, declared a relation
    ("relation", "stream", "stream"): Rule(
        True, Outcome(_DECLARE_STREAM, error=True), Outcome(_DECLARE_STREAM, error=True)
    ),
}


@dataclass(frozen=True)
class Verdict:
    """The reading to register (`implicit`), and the warning or error text, filled in."""

    implicit: bool
    message: str | None
    error: bool


def view_kind(name: str, line: int, declared: str, with_implicit: str, without: str, compat: bool) -> Verdict:
    """The verdict for view `name` (vquery on `line`) declared `declared`, whose vquery is a
    `with_implicit` under CQL's implicit Istream and a `without` otherwise."""
    rule = RULES[(declared, with_implicit, without)]
    out = rule.compat if compat else rule.paper
    text = out.message.format(name=name, line=line) if out.message else None
    return Verdict(rule.implicit, text, out.error)


__all__ = ["RULES", "Outcome", "Rule", "Verdict", "view_kind"]
