"""The retained log as an archive: what a query registered late needs to start as if it had been
registered at an earlier instant T (`POST /queries` with `seed_from`).

The log's input records (sources registered and dropped, pushes, heartbeats, clock ticks, source
knobs) are replayed into a shadow engine that has the sources and no query, each at its logged
instant. The *seed moment* is just before the first record that reaches T: one carrying an element
with ts ≥ T, or moving a source's time past T (a heartbeat, a clock tick of a system-timestamped
stream). There every shadow source is marked (`engine.seeding.mark`); what the sources append from
then on, and each relation's contents then, become the new query's input (`engine.seeding`). The
replay reads the log's files, so most of it runs outside the engine lock (the live server keeps
appending meanwhile); the records appended since are replayed under the lock, right before the
query is registered. Relations are replayed whole: their state at T is their whole history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cqlstream.cql import ast
from cqlstream.cql.catalog import UNIT_MS
from cqlstream.cql.parser import parse_script
from cqlstream.engine import control
from cqlstream.engine.dsms import Dsms
from cqlstream.engine.inputs import RelationInput, StreamInput
from cqlstream.engine.seeding import Mark, SourceSeed, mark
from cqlstream.server.problems import ProblemError
from cqlstream.server.wal import Record, WriteAheadLog
from cqlstream.server.wal_records import decode_batch

if TYPE_CHECKING:
    from cqlstream.server.settings import Settings


def archive_of(wal: WriteAheadLog | None, settings: Settings, replaying: bool = False) -> WriteAheadLog:
    """The log as an archive, or the problem why there is none (409 with a code naming the fix).
    `replaying`: a recovery replays a seeded registration: the records are what counts."""
    if wal is None:
        raise ProblemError(
            409,
            "no_archive",
            "seed_from needs the log archive: start the server with --data-dir DIR --retain-log",
        )
    if not settings.retain_log and not replaying:
        raise ProblemError(
            409,
            "no_archive",
            "seed_from needs the log archive, and this server deletes the log at checkpoints: restart it "
            "with --retain-log",
        )
    if wal.first_lsn > 1:
        raise ProblemError(
            409,
            "archive_incomplete",
            f"the log before record {wal.first_lsn} was deleted (the server ran without --retain-log then): "
            "seeding replays the whole log, so it needs every record since the data dir was created",
        )
    return wal


class ArchiveReplay:
    """The shadow replay of the log for a query seeded at instant `t`; `advance` replays more of the
    log (any thread: it touches only its own engine), `seeds` gives the query's input."""

    def __init__(self, wal: WriteAheadLog, settings: Settings, t: int) -> None:
        self.wal = wal
        self.t = int(t)
        self.now = 0.0
        self.shadow = Dsms(
            compat=settings.compat,
            silence_timeout=settings.silence_timeout,
            sys_stream=False,
            clock=self._clock,
            synopsis_joins=settings.synopsis_joins,
        )
        self.next = 1  # the next log record to replay
        self.records = 0
        self.marks: dict[str, Mark] | None = None  # set at the seed moment
        self.earliest: int | None = None  # the smallest instant any record carries
        self.latest: int | None = None  # the largest

    def _clock(self) -> float:
        return self.now

    def advance(self, upto: int | None = None) -> None:
        """Replay the records from `next` up to LSN `upto` (exclusive; None: as far as the files go)."""
        for rec in self.wal.records(self.next):
            if upto is not None and rec.lsn >= upto:
                break
            self._apply(rec)
            self.next = rec.lsn + 1
            self.records += 1

    # ------------------------------------------------------------ one record
    def _instants(self, *ts: int | None) -> None:
        for t in ts:
            if t is not None:
                self.earliest = t if self.earliest is None else min(self.earliest, t)
                self.latest = t if self.latest is None else max(self.latest, t)

    def _reach(self, top: int | None, heartbeat: int | None) -> None:
        """Mark the sources when this record is the first to reach T (an element at ≥ T, time past T)."""
        if self.marks is None and (
            (top is not None and top >= self.t) or (heartbeat is not None and heartbeat > self.t)
        ):
            self.marks = {name: mark(inp) for name, inp in self.shadow.inputs.items()}

    def _apply(self, rec: Record) -> None:
        h = rec.header
        op = h.get("op")
        self.now = float(h.get("now") or 0.0)
        fn = _OPS.get(str(op))
        if fn is not None:
            fn(self, h, rec.payload)

    def _push(self, h: dict[str, Any], payload: bytes) -> None:
        batch = decode_batch(h["codec"], payload)
        hb = h.get("heartbeat")
        top = int(batch.ts.max()) if len(batch) else None
        self._instants(int(batch.ts.min()) if len(batch) else None, top, hb)
        self._reach(top, hb)
        d = self.shadow
        if len(batch):
            d.push_batch(h["source"], batch, drop_late=h.get("drop_late", False))
        if hb is not None:
            d.heartbeat(h["source"], int(hb))

    def _heartbeat(self, h: dict[str, Any], payload: bytes) -> None:
        self._instants(int(h["t"]))
        self._reach(None, int(h["t"]))
        self.shadow.heartbeat(h["source"], int(h["t"]))

    def _tick(self, h: dict[str, Any], payload: bytes) -> None:
        system = [i for i in self.shadow.inputs.values() if i.d.timestamp == "system"]
        if system:
            t = max(int(self.now * 1000) // UNIT_MS[i.d.time_unit] for i in system)
            self._instants(t)
            self._reach(None, t)
        self.shadow.tick()

    def _register(self, ddl: str) -> None:
        for stmt in parse_script(ddl):
            if isinstance(stmt, ast.RegisterSource):
                s = self.shadow.register_source(stmt)
                if self.marks is not None:  # registered after the moment: everything it got counts
                    self.marks[s.name.lower()] = mark(self.shadow.inputs[s.name.lower()])

    def _drop(self, h: dict[str, Any], payload: bytes) -> None:
        self.shadow.drop_source(h["name"])
        if self.marks is not None:
            self.marks.pop(str(h["name"]).lower(), None)

    def _plan(self, h: dict[str, Any], payload: bytes) -> None:
        for text in (h.get("doc") or {}).get("catalog") or []:
            self._register(text)

    def _knob(self, h: dict[str, Any], payload: bytes) -> None:
        if str(h.get("entity", "")).startswith("src:"):  # load shedding of a source changes what it appends
            control.set_knob(self.shadow, h["entity"], h["knob"], h["value"])

    # ------------------------------------------------------------ the result
    def seeds(self, live: Dsms) -> dict[str, SourceSeed]:
        """Each live source's input since the seed moment (call once the replay reached the log's
        end, under the engine lock). 422 when T is before the archive or after its last instant."""
        if self.earliest is not None and self.t < self.earliest:
            raise ProblemError(
                422,
                "before_archive",
                f"seed_from {self.t} is before the archive: its earliest instant is {self.earliest}",
                earliest=self.earliest,
            )
        if self.marks is None:
            raise ProblemError(
                422,
                "seed_in_future",
                f"seed_from {self.t} is in the future: the latest instant in the archive is {self.latest}"
                if self.latest is not None
                else f"seed_from {self.t} is in the future: the archive holds no input yet",
                latest=self.latest,
            )
        out = {}
        for name, m in self.marks.items():
            mine, theirs = self.shadow.inputs.get(name), live.inputs.get(name)
            if isinstance(mine, (StreamInput, RelationInput)) and theirs is not None:
                out[name] = SourceSeed.of(m, mine, theirs)
        return out


_OPS = {
    "push": ArchiveReplay._push,
    "heartbeat": ArchiveReplay._heartbeat,
    "tick": ArchiveReplay._tick,
    "register_source": lambda r, h, p: r._register(h["ddl"]),
    "drop_source": ArchiveReplay._drop,
    "plan": ArchiveReplay._plan,
    "knob": ArchiveReplay._knob,
}
