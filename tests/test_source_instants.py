"""Source files read in whole instants (`SourceReader.instants`, what `cqlstream run` feeds): the
same rows, checks and error lines as reading block by block, at every block size (1 byte, a few
lines, a block ending exactly at an instant's end, an instant spanning many blocks, empty files,
no line end after the last row, CRLF and empty lines); each batch but an instant longer than a
block ends where its `next_ts` starts; a run's dests are the same bytes at every block size, and
the engine's thread takes each pushed block whole (no copies of parts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cqlstream.engine import queues
from cqlstream.io.dat_source import SourceReader
from cqlstream.io.errors import ScriptError
from cqlstream.io.script_runner import run_script
from tests.test_stream_script import _src

DDL = "register stream S (A integer, B char(8))"
BLOCKS = [1, 7, 13, 64, 300, 8 << 20]


def _lines(counts: list[int]) -> list[str]:
    """Rows of instants 1, 2, ... with counts[i] rows at instant i + 1."""
    out = []
    for i, c in enumerate(counts):
        out += [f"{i + 1},{len(out)},{'x' * (len(out) % 5 + 1)}" for _ in range(c)]
    return out


def _write(p: Path, lines: list[str], end: str = "\n", tail: str = "\n") -> Path:
    p.write_text("i,i,c8\n" + end.join(lines) + (tail if lines else ""))
    return p


def _check(p: Path, block: int) -> list[tuple[int, int, int | None]]:
    """Check instants() against iterating (the rows) and its own promise; returns (first ts, last
    ts, next_ts) per batch."""
    src = _src(DDL)
    want = SourceReader(p, src, block_size=block).read_all()
    got = list(SourceReader(p, src, block_size=block).instants())
    assert all(len(b) for b, _ in got)
    rows = [r for b, _ in got for r in b.rows()]
    assert rows == want.rows()
    assert [t for b, _ in got for t in b.ts.tolist()] == want.ts.tolist()
    for k, (b, nxt) in enumerate(got):
        last = k == len(got) - 1
        if nxt is None:  # the last batch, or one instant that may go on in the next batch
            assert last or int(b.ts[0]) == int(b.ts[-1]) <= int(got[k + 1][0].ts[0])
        else:
            assert not last and int(b.ts[-1]) < nxt == int(got[k + 1][0].ts[0])
    return [(int(b.ts[0]), int(b.ts[-1]), nxt) for b, nxt in got]


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("end,tail", [("\n", "\n"), ("\n", ""), ("\r\n", "\r\n"), ("\n\n", "\n"), ("\r", "")])
def test_instants_hold_the_same_rows_at_every_block_size(block, end, tail, tmp_path):
    rng = np.random.default_rng(block)
    lines = _lines(list(rng.integers(1, 9, 120)))
    spans = _check(_write(tmp_path / "s.dat", lines, end, tail), block)
    if block >= 300:  # blocks of several instants: every batch but the last ends at an instant's end
        assert all(nxt is not None for _, _, nxt in spans[:-1])


@pytest.mark.parametrize("block", BLOCKS)
def test_one_instant_over_many_blocks(block, tmp_path):
    spans = _check(_write(tmp_path / "s.dat", _lines([3, 400, 2, 1, 250])), block)
    if block == 64:
        assert [s for s in spans if s[0] == s[1] == 2 and s[2] is None]  # the long instant comes in parts


def test_block_ending_exactly_at_an_instant(tmp_path):
    lines = _lines([2, 2, 2, 2])  # "1,0,x\n" ... : 6-byte and 7-byte lines
    p = _write(tmp_path / "s.dat", lines)
    head = len("i,i,c8\n")
    first_two = len("\n".join(lines[:4])) + 1  # instants 1 and 2
    block = head + first_two  # the first block ends right after instant 2's last line
    spans = _check(p, block)
    assert spans[0][:2] == (1, 1)  # instant 2 is carried: its end is not known before instant 3
    for b in (block - 1, block + 1, 1, 2, 3):
        _check(p, b)


def test_single_row_empty_and_header_only(tmp_path):
    for lines in ([], ["5,1,a"]):
        for tail in ("", "\n", "\n\n"):
            p = tmp_path / "s.dat"
            p.write_text("i,i,c8\n" + "\n".join(lines) + tail)
            for block in (1, 7, 8 << 20):
                spans = _check(p, block)
                assert spans == ([] if not lines else [(5, 5, None)])


@pytest.mark.parametrize("block", [1, 7, 20, 64, 8 << 20])
@pytest.mark.parametrize("bad", ["6,77,toolongvalue", "6,zz,a", "6,1", "3,1,a", "6,1,a,9"])
@pytest.mark.parametrize("where", [20, 23, 24, 40])
def test_bad_rows_name_the_same_line(block, bad, where, tmp_path):
    """A bad row anywhere, the last instant of a block included (carried and parsed again), gives
    the error iterating gives: the file and its line."""
    lines = _lines([4] * 12)  # instant i + 1 on data rows 4i..4i+3 (file lines 4i+2..4i+5)
    lines[where] = bad.replace("6,", f"{where // 4 + 1},", 1) if not bad.startswith("3,") else bad
    p = _write(tmp_path / "s.dat", lines)
    src = _src(DDL)
    with pytest.raises(ScriptError) as want:
        list(SourceReader(p, src, block_size=block))
    with pytest.raises(ScriptError) as got:
        list(SourceReader(p, src, block_size=block).instants())
    assert (got.value.path, got.value.line, got.value.reason) == (want.value.path, want.value.line, want.value.reason)
    assert got.value.line == where + 2 + (bad.startswith("3,") and where < 8)  # an earlier ts: that row's line


SCRIPT = """\
table : register stream S (A integer, B char(8));
source : {src}/S.dat
table : register stream T (A integer);
source : {src}/T.dat
vquery : select B, count(*), sum(A) from S [Range 3] group by B;
vtable : register relation G (B char(8), N integer, M integer);
query : select istream(*) from G;
dest : {out}/agg
query : select * from S [Rows 5];
dest : {out}/rows
query : select rstream(S.B, T.A) from S [Now], T [Range 2] where S.A = T.A * 3;
dest : {out}/join
"""


def _sources(tmp_path: Path) -> Path:
    tmp_path.mkdir()
    rng = np.random.default_rng(3)
    counts = list(rng.integers(1, 12, 150))
    counts[40] = 300  # one instant over many blocks
    _write(tmp_path / "S.dat", _lines(counts))
    ts = np.sort(rng.integers(1, 160, 500))
    (tmp_path / "T.dat").write_text("i,i\n" + "\n".join(f"{t},{v}" for t, v in zip(ts, rng.integers(0, 50, 500))))
    return tmp_path


def test_run_same_bytes_at_every_block_size(tmp_path):
    src = _sources(tmp_path / "in")
    got = {}
    for block in (1, 7, 64, 1000, 8 << 20):
        for threads in (1, 2):
            out = tmp_path / f"o{block}-{threads}"
            out.mkdir()
            script = tmp_path / "run.cql"
            script.write_text(SCRIPT.replace("{out}", str(out)).replace("{src}", str(src)))
            run_script(script, threads=threads, block_size=block, batch_rows=1 << 30)
            got[block, threads] = {d: (out / d).read_bytes() for d in ("agg", "rows", "join")}
    ref = got[8 << 20, 1]
    assert all(len(v) > 100 for v in ref.values())
    for v in got.values():
        # (the Istream of a grouped aggregate writes an instant's rows by value since session 19,
        # cql/logical/instant_order.py: before, in an order that followed the rounds)
        assert v == ref


def test_blocks_are_taken_whole(tmp_path, monkeypatch):
    """The source's queue never puts a taken span together from parts: each pushed block ends at
    an instant the feed tells complete (its next_ts), so its readers take it whole in its round."""
    src = _sources(tmp_path / "in")
    (src / "S.dat").write_text("i,i,c8\n" + "\n".join(_lines([5] * 400)) + "\n")  # no instant over a block
    (src / "T.dat").write_text("i,i\n" + "".join(f"{t},{t % 9}\n" for t in range(1, 402, 2)))
    joined = []
    concat = queues.concat

    def counted(parts, types=None):
        joined.append(len(parts))
        return concat(parts, types)

    monkeypatch.setattr(queues, "concat", counted)
    script = tmp_path / "run.cql"
    script.write_text(SCRIPT.replace("{out}", str(tmp_path)).replace("{src}", str(src)))
    for threads in (1, 2):
        run_script(script, threads=threads, block_size=200, batch_rows=1 << 30)
    assert joined == []


@pytest.mark.parametrize("block", [7, 150, 400, 1000])
def test_long_lines(block, tmp_path):
    """Rows longer than the tail window first looked at (64 bytes a row): the carried text still
    starts at its first row's start."""
    rng = np.random.default_rng(block)
    counts = list(rng.integers(1, 4, 60))
    lines = [
        f"{r.split(',')[0]},{r.split(',')[1]},{' ' * int(w)}{r.split(',')[2]}"
        for r, w in zip(_lines(counts), rng.integers(0, 300, 200))
    ]
    _check(_write(tmp_path / "s.dat", lines), block)
