"""The engine host's journal: with a data dir, every state change the host applies is written to the
write-ahead log (server/wal.py) before it is acknowledged, checkpoints of the whole state are taken
now and then, and a restart rebuilds the state from the last checkpoint and the log after it.

- `log` is called by the host under its lock, in the order the changes are applied, after the
  engine accepted the change and before the reply. Records and their replay: server/wal_records.py.
- The engine's clock is pinned for the length of each host call (`moment`) and the instant is
  logged with the record, so a replay sees the same time (system timestamps, silence timeouts).
- `recover` (host start): load the newest checkpoint, then replay the records after it through
  the same host calls, with logging off. A checkpoint that cannot be loaded (written by other code)
  falls back to replaying the whole log when it was retained, else recovery stops with a clear error.
- `checkpoint`: pickle the host's state at the log's next LSN (server/checkpoint.py), start a new
  segment, delete the older checkpoint and, unless the log is retained, the segments before it.
- A data dir written before the log existed holds only `plan.json`: its catalog and queries become
  the log's first record. Once a log exists it is authoritative: `plan.json` is still written on
  every catalog change, as a readable export, but not read at start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqlstream.engine.batch import Batch
from cqlstream.server import checkpoint as ckpt
from cqlstream.server.problems import ProblemError
from cqlstream.server.wal import SUFFIX, LogError, WriteAheadLog
from cqlstream.server.wal_records import REPLAY, encode_batch

if TYPE_CHECKING:
    from collections.abc import Callable

    from cqlstream.engine.dsms import Dsms
    from cqlstream.server.host import EngineHost

log = logging.getLogger("cqlstream.server")

LOG_DIR = "wal"  # under the data dir: segments and checkpoints


class RecoveryError(ValueError):
    """The data dir's log cannot be recovered (say why, and what the operator can do)."""


def has_log(data_dir: str | Path) -> bool:
    """Whether `data_dir` holds a log (segments or a checkpoint): then it, not plan.json, is restored."""
    d = Path(data_dir) / LOG_DIR
    return d.is_dir() and (any(d.glob("*" + SUFFIX)) or bool(ckpt.checkpoints(d)))


class PinnedClock:
    """The engine's clock (`Dsms.clock`): the wall clock, or the instant of the host call under way."""

    def __init__(self, base: Callable[[], float]) -> None:
        self.base = base
        self.pinned: float | None = None

    def __call__(self) -> float:
        return self.pinned if self.pinned is not None else self.base()


class Journal:
    """The write-ahead log, checkpoints and recovery of one engine host (inactive without a data dir:
    then only the clock pinning remains)."""

    def __init__(self, host: EngineHost) -> None:
        s = host.settings
        self.host = host
        self.clock = PinnedClock(host.d.clock)
        host.d.clock = self.clock
        self.replaying = False
        self.replay_lsn: int | None = None  # the record being replayed (a seeded registration's end of the log)
        self.failed: str | None = None  # why the log cannot be written: every later change is refused
        self.retain = s.retain_log
        self.every_records = s.checkpoint_records
        self.every_seconds = s.checkpoint_seconds
        self.since_checkpoint = 0  # records since the last checkpoint
        self.last_checkpoint = time.monotonic()
        self.checkpoint_error: str | None = None
        self.stats: dict[str, Any] = {}  # what the last recovery did
        self.dir: Path | None = None
        self.wal: WriteAheadLog | None = None
        if s.data_dir:
            self.dir = Path(s.data_dir) / LOG_DIR
            self.fresh = not has_log(s.data_dir)
            self.wal = WriteAheadLog(
                self.dir, fsync=s.fsync, interval_ms=s.fsync_interval_ms, segment_bytes=s.segment_bytes
            )

    @property
    def active(self) -> bool:
        return self.wal is not None

    # ------------------------------------------------------------ the live path
    @contextmanager
    def moment(self) -> Iterator[float]:
        """Pin the engine's clock for one host call (a nested call, or a replay, keeps the instant)."""
        self._check()
        c = self.clock
        if c.pinned is not None:
            yield c.pinned
            return
        c.pinned = c.base()
        try:
            yield c.pinned
        finally:
            c.pinned = None

    def _check(self) -> None:
        if self.failed is not None:
            raise ProblemError(
                503, "log_unavailable", f"the server's log cannot be written ({self.failed}): restart it"
            )

    def log(self, op: str, payload: bytes = b"", **fields: Any) -> None:
        """Append the record of a change just applied (call under the host lock, before replying)."""
        if self.wal is None or self.replaying:
            return
        self._check()
        try:
            self.wal.append({"op": op, "now": self.clock(), **fields}, payload)
        except LogError as e:
            self.failed = str(e)
            log.error("%s: the server refuses every change from now on", e)
            raise ProblemError(
                503, "log_unavailable", f"the change could not be logged ({e}): restart the server"
            ) from None
        self.since_checkpoint += 1

    def log_push(
        self,
        source: str,
        batch: Batch,
        drop_late: bool,
        heartbeat: int | None,
        key: str | None,
        admission: dict[str, Any] | None = None,
    ) -> None:
        """A push as it was offered, with admission control's decision for it (None: admitted as it
        was; engine/approx/admission.py Decision.to_json): the replay applies that decision."""
        if self.wal is None or self.replaying:
            return
        codec, data = encode_batch(batch)
        extra = {} if admission is None else {"admission": admission}
        self.log("push", data, source=source, codec=codec, drop_late=drop_late, heartbeat=heartbeat, key=key, **extra)

    # ------------------------------------------------------------ recovery
    def recover(self) -> None:
        """Rebuild the host's state from the data dir (call once, at start, under the host lock)."""
        if self.wal is None or self.dir is None:
            return
        host = self.host
        t0 = time.perf_counter()
        start, source = 1, "log"
        ckpt.remove_partial(self.dir)
        found = ckpt.checkpoints(self.dir)
        if found:
            lsn, path = found[-1]
            try:
                _, state = ckpt.load(path, host.d.catalog.functions)
                self._adopt(state)
                start, source = lsn, path.name
            except ckpt.CheckpointError as e:
                if self.wal.first_lsn > 1:
                    raise RecoveryError(
                        f"{e}; the log before it was deleted (start without --retain-log), so the state cannot be "
                        f"rebuilt by this version: run the version that wrote it, or move {self.dir} aside to start empty"
                    ) from None
                log.warning("%s: replaying the whole log instead", e)
        elif self.wal.first_lsn > 1:
            raise RecoveryError(
                f"{self.dir}: the log starts at record {self.wal.first_lsn} and no checkpoint covers it"
            )
        if self.fresh and host.d.plan_file is not None and (host.d.queries or host.d.ddl):
            self.log("plan", doc=host.d.plan_file.document(host.d))  # plan.json of a data dir without a log
        n, errors = self._replay(start)
        self.stats = {
            "from": source,
            "records": n,
            "errors": errors,
            "seconds": time.perf_counter() - t0,
            "truncated_bytes": self.wal.truncated,
        }
        if n or found:
            log.info("recovered from %s + %d log records in %.3f s", source, n, self.stats["seconds"])

    def _replay(self, start: int) -> tuple[int, int]:
        assert self.wal is not None
        host = self.host
        pf = host.d.plan_file
        self.replaying = True
        host.d.guard.cpu = False  # suspensions over a time limit come from their own records
        if host.d.approx is not None:
            host.d.approx.frozen = True  # so do the overload controller's changes
        if pf is not None:
            pf.restoring = True  # written once at the end, not per record
        n = errors = 0
        try:
            for rec in self.wal.records(start):
                op = rec.header.get("op")
                fn = REPLAY.get(str(op))
                if fn is None:
                    raise RecoveryError(f"log record {rec.lsn}: unknown kind {op!r} (written by a newer version?)")
                self.clock.pinned = rec.header.get("now")
                self.replay_lsn = rec.lsn
                try:
                    fn(host, rec.header, rec.payload)
                except Exception as e:  # the live call failed the same way after its change was logged
                    errors += 1
                    log.warning("log record %d (%s) replayed with an error: %s", rec.lsn, op, e)
                finally:
                    self.clock.pinned = None
                n += 1
        finally:
            self.replaying = False
            self.replay_lsn = None
            host.d.guard.cpu = True
            if host.d.approx is not None:
                host.d.approx.frozen = False
            if pf is not None:
                pf.restoring = False
        if n and pf is not None:
            pf.save(host.d)
        self.since_checkpoint += n
        return n, errors

    def _adopt(self, state: dict[str, Any]) -> None:
        """Make a checkpoint's state the host's."""
        from cqlstream.server.publication import Publication

        host = self.host
        d: Dsms = state["dsms"]
        d.clock = self.clock
        d.attached = {}
        d.plan_file = host.d.plan_file
        host.d = host.fanout.d = host.control.d = d
        host.fanout.pubs.clear()
        for qid, sub, through, emitted, *history in state["pubs"]:
            pub = host.fanout.pubs[qid] = Publication(d.queries[qid], sub, host.fanout.history)
            pub.through, pub.emitted = through, emitted
            if history:  # the results retained for resuming subscribers (older checkpoints have none)
                pub.history.adopt(history[0])
        host.idempotency = state["idempotency"]
        host.accepted.update(state["accepted"])
        host.pushes = state["pushes"]

    # ------------------------------------------------------------ checkpoints
    def due(self) -> bool:
        if self.wal is None or not self.since_checkpoint or self.failed:
            return False
        if self.every_records and self.since_checkpoint >= self.every_records:
            return True
        every = self.every_seconds
        return every is not None and every > 0 and time.monotonic() - self.last_checkpoint >= every

    def maybe_checkpoint(self) -> None:
        """Take a checkpoint when one is due (the host's clock thread calls this)."""
        if self.due():
            with self.host.lock:
                if self.due():
                    self.checkpoint()

    def checkpoint(self) -> Path | None:
        """Write the host's state at the log's next LSN (call under the host lock); None when there
        is no log or the state could not be written (the log still has everything)."""
        if self.wal is None or self.dir is None:
            return None
        host, d = self.host, self.host.d
        lsn = self.wal.next_lsn
        state = {
            "dsms": d,
            "pubs": [(qid, p.sub, p.through, p.emitted, p.history) for qid, p in host.fanout.pubs.items()],
            "idempotency": host.idempotency,
            "accepted": dict(host.accepted),
            "pushes": host.pushes,
        }
        saved = d.clock, d.attached, d.plan_file
        d.clock, d.attached, d.plan_file = None, {}, None  # type: ignore[assignment]  # not part of the state
        try:
            path = ckpt.write(self.dir, lsn, state, d.catalog.functions)
        except Exception as e:
            self.checkpoint_error = f"{type(e).__name__}: {e}"
            self.last_checkpoint = time.monotonic()  # do not retry at every tick
            log.exception("checkpoint at record %d failed (the log keeps every record)", lsn)
            return None
        finally:
            d.clock, d.attached, d.plan_file = saved
        self.checkpoint_error = None
        self.wal.roll()
        for old, p in ckpt.checkpoints(self.dir):
            if old < lsn:
                p.unlink(missing_ok=True)
        if not self.retain:
            self.wal.drop_before(lsn)
        self.since_checkpoint = 0
        self.last_checkpoint = time.monotonic()
        return path

    def close(self) -> None:
        """Clean stop: a last checkpoint (a restart then replays nothing), fsync, close."""
        if self.wal is None or self.wal.closed:
            return
        with self.host.lock:
            if self.since_checkpoint and not self.failed:
                self.checkpoint()
            self.wal.close()

    def metrics(self) -> dict[str, Any]:
        if self.wal is None:
            return {}
        return {
            "next_lsn": self.wal.next_lsn,
            "first_lsn": self.wal.first_lsn,
            "bytes": self.wal.bytes(),
            "since_checkpoint": self.since_checkpoint,
            "checkpoint_error": self.checkpoint_error,
            "failed": self.failed,
            "recovery": self.stats,
        }
