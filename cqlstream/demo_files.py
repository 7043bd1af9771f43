"""The demo shop's input as files for Spark: each round of orders or clicks becomes one small CSV
file in its stream's folder, which a Spark file source watches. A file is written in a staging
folder beside the watched ones and renamed into place, so Spark never lists half a file."""

from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STAGING = ".staging"  # beside the watched folders, never inside one


class DemoFolder:
    """Where the demo's files go: `<data_dir>/demo-shop` (kept) or a temp folder (removed by `close`)."""

    def __init__(self, data_dir: str | None = None) -> None:
        if data_dir:
            self.root = Path(data_dir).resolve() / "demo-shop"
            self.root.mkdir(parents=True, exist_ok=True)
            self.temporary = False
        else:
            self.root = Path(tempfile.mkdtemp(prefix="cqlstream-demo-"))
            self.temporary = True

    def close(self) -> None:
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)


class FileDrop:
    """Writes rows of each stream (`columns`: stream -> its CSV header, event time first) as CSV
    files into `root/<stream in lower case>/`, one file per `write`."""

    def __init__(self, root: Path, columns: Mapping[str, Sequence[str]]) -> None:
        self.root = root
        self.columns = {name: tuple(cols) for name, cols in columns.items()}
        self.staging = root / STAGING
        self.staging.mkdir(parents=True, exist_ok=True)
        for name in self.columns:
            self.folder(name).mkdir(parents=True, exist_ok=True)
        self.written = 0

    def folder(self, stream: str) -> Path:
        return self.root / stream.lower()

    def write(self, stream: str, ts: int, rows: Sequence[Mapping[str, Any]]) -> Path | None:
        """One file of `rows` (dicts of the stream's fields), all at event time `ts`; None if no rows."""
        if not rows:
            return None
        cols = self.columns[stream]
        text = io.StringIO()
        out = csv.writer(text, lineterminator="\n")
        out.writerow(cols)
        out.writerows([ts, *(r[c] for c in cols[1:])] for r in rows)
        self.written += 1
        name = f"{ts}-{self.written:07d}.csv"  # names sort in writing order, like their modification times
        staged = self.staging / f"{stream.lower()}-{name}"
        staged.write_text(text.getvalue(), encoding="utf-8")
        target = self.folder(stream) / name
        os.replace(staged, target)  # atomic on one file system: Spark sees the whole file or nothing
        return target
