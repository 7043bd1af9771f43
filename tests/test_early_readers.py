"""Sources read from the start of a threaded run (io/early_readers.py): the first pass over a script
starts each source's reader before the script's statements are checked and, in `cqlstream run`,
before the engine is imported. Nothing a user sees changes: a bad statement after the source line
is the same error at every thread count with no output and no thread left, a malformed row the
same error at the same file line, the dests the same bytes; the pass itself never raises."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

from cqlstream.cli import main as cli_main
from cqlstream.io import early_readers
from cqlstream.io.early_readers import EarlyReaders, start_early_readers
from cqlstream.io.errors import ScriptError
from cqlstream.io.script_runner import run_script
from cqlstream.io.stream_script import Registrar
from tests.test_stream_script import write

_MINE = ("cqlstream-read-", "cqlstream-writer-", "cqlstream-prefetch")


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(_MINE)]


@pytest.fixture(autouse=True)
def no_thread_left():
    assert _workers() == []
    yield
    assert _workers() == [], "a reader or writer thread outlived its run"


def _rows(n: int, bad: dict[int, str] | None = None) -> str:
    rows = [f"{i // 4 + 1},{i % 50},{i % 7}" for i in range(n)]
    for k, text in (bad or {}).items():
        rows[k] = text
    return "i,i,i\n" + "\n".join(rows) + "\n"


TWO_TABLES = (
    "table : register stream S (A integer, B integer);\nsource : s.dat\n"
    "query : select A, Count(*) from S [Rows 10] group by A;\ndest : agg\n"
    "table : register stream T (A integer, B integer);\nsource : t.dat\n"
    "query : select * from T where B = 3;\ndest : sel\n"
)


def test_every_reader_runs_before_the_first_statement_is_checked(tmp_path, monkeypatch):
    """T's table comes after a query: its reader is already running when the check analyzes the
    first query (the check alone would start it only when it reaches T's table)."""
    write(tmp_path, {"s.dat": _rows(3000), "t.dat": _rows(3000), "run.cql": TWO_TABLES})
    seen: list[list[str]] = []
    check = Registrar._query

    def spy(self, step):
        seen.append(sorted(t.name for t in _workers()))
        return check(self, step)

    monkeypatch.setattr(Registrar, "_query", spy)
    run_script(tmp_path / "run.cql", out_dir=tmp_path / "o", threads=2, batch_rows=300, block_size=1000)
    assert seen and seen[0] == ["cqlstream-read-S", "cqlstream-read-T"], seen
    seen.clear()
    run_script(tmp_path / "run.cql", out_dir=tmp_path / "o1", threads=1, batch_rows=300, block_size=1000)
    assert seen and all(names == [] for names in seen), seen  # one thread: nothing beside it
    for dest in ("agg", "sel"):
        assert (tmp_path / "o" / dest).read_bytes() == (tmp_path / "o1" / dest).read_bytes() != b""


def test_the_cli_starts_reading_before_it_imports_the_engine(tmp_path):
    """In a fresh `cqlstream run --threads 2`, the reader thread starts before the engine's modules
    (the Dsms, the planner) are imported; the engine's import then overlaps the parsing."""
    write(tmp_path, {"s.dat": _rows(3000), "run.cql": TWO_TABLES.split("table : register stream T")[0]})
    code = textwrap.dedent(f"""
        import json, sys, threading
        events = []
        class Spy:
            def find_spec(self, name, path=None, target=None):
                if name in ("cqlstream.engine.dsms", "cqlstream.engine.planner"):
                    events.append("import " + name)
                return None
        sys.meta_path.insert(0, Spy())
        start = threading.Thread.start
        def spy_start(self):
            events.append("start " + self.name)
            start(self)
        threading.Thread.start = spy_start
        from cqlstream.cli import main
        rc = main(["run", {str(tmp_path / "run.cql")!r}, "--threads", "2", "--out-dir", {str(tmp_path / "o")!r}])
        print(json.dumps([rc, events]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rc, events = json.loads(r.stdout.strip().splitlines()[-1])
    assert rc == 0
    assert events.index("start cqlstream-read-S") < events.index("import cqlstream.engine.dsms"), events
    assert events.index("start cqlstream-read-S") < events.index("import cqlstream.engine.planner"), events
    assert (tmp_path / "o" / "agg").stat().st_size > 0


@pytest.mark.parametrize(
    "later,needle,line",
    [
        ("query : select Nope from S;\ndest : x\n", "Nope", 3),  # found by the check
        ("query : select A from S\ndest : x\n", "does not end with ';'", 3),  # found splitting the script
        ("table : register stream S (A integer);\nsource : s.dat\n", "'S'", 3),  # registered twice
        ("query : select A from S;\ndest : a/x\nquery : select B from S;\ndest : b/x\n", "also written", 6),
    ],
)
def test_a_bad_statement_after_the_source_line_stops_the_run_before_any_output(later, needle, line, tmp_path):
    """The CLI reports the same error at every thread count, exit status 2, with the same (empty)
    dests — the reader had met a malformed row meanwhile — and the reader started early is stopped."""
    write(tmp_path, {"s.dat": _rows(6000, {50: "1,1,zz"}), "run.cql": TWO_TABLES.split("query")[0] + later})
    script = tmp_path / "run.cql"
    got = {}
    for t in (1, 2):
        out = tmp_path / "o"  # the same folder (an error may name a dest)
        shutil.rmtree(out, ignore_errors=True)
        r = subprocess.run(
            [sys.executable, "-m", "cqlstream", "run", str(script), "--threads", str(t), "--out-dir", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.startswith(f"{script}:{line}: ") and needle in r.stderr, r.stderr
        files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} if out.exists() else {}
        assert all(data == b"" for data in files.values()), files
        got[t] = (r.stderr, files)
    assert got[2] == got[1]
    # in this process (the CLI as a function): the same message, and no reader left behind
    for t in (1, 2):
        assert cli_main(["run", str(script), "--threads", str(t), "--out-dir", str(tmp_path / "in")]) == 2
        assert _workers() == []


@pytest.mark.parametrize(
    "bad,needle",
    [
        ("2400,7,zz", "'zz' is not an integer"),
        ("2400,7", "expected 3 comma-separated values"),
        ("3,7,1", "timestamp 3 is smaller than the previous one"),
    ],
)
def test_a_malformed_row_is_the_same_error_and_output_through_the_cli(bad, needle, tmp_path, capsys):
    """The row is in the source's second block (the CLI's blocks are 1 MB at least): the reader
    meets it while the engine works on the first; the rounds before it are written."""
    bad = bad.replace("2400", "45000")
    write(
        tmp_path, {"s.dat": _rows(200_000, {180_000: bad}), "run.cql": TWO_TABLES.split("table : register stream T")[0]}
    )
    got = {}
    for t in (1, 2):
        out = tmp_path / f"o{t}"
        argv = ["run", str(tmp_path / "run.cql"), "--threads", str(t), "--out-dir", str(out), "--batch-rows", "5000"]
        assert cli_main(argv) == 2
        got[t] = (capsys.readouterr().err, (out / "agg").read_bytes())
    message, partial = got[1]
    assert message.startswith(f"{tmp_path / 's.dat'}:180002: ") and needle in message, message
    assert partial, "the rounds before the bad row were written"
    assert got[2] == got[1]


def test_results_equal_through_the_cli_at_one_and_two_threads(tmp_path, capsys):
    write(tmp_path, {"s.dat": _rows(20000), "t.dat": _rows(7000), "run.cql": TWO_TABLES})
    for t in (1, 2):
        assert (
            cli_main(["run", str(tmp_path / "run.cql"), "--threads", str(t), "--out-dir", str(tmp_path / f"o{t}")]) == 0
        )
    for dest in ("agg", "sel"):
        assert (tmp_path / "o1" / dest).read_bytes() == (tmp_path / "o2" / dest).read_bytes() != b""


@pytest.mark.parametrize(
    "script,started",
    [
        (None, []),  # no script
        ("table : register stream S (A integer, B integer)\nsource : s.dat\n", []),  # no ';': cannot split
        (TWO_TABLES.replace("source : t.dat", "source : missing.dat"), ["S"]),  # stops at the missing file
        (TWO_TABLES.replace("register stream T (A integer, B integer)", "register stream T (A nope)"), ["S"]),
        (TWO_TABLES.replace("register stream T (A integer, B integer)", "register stream T (A integer)"), ["S"]),
        (TWO_TABLES.replace("register stream T", "register stream S"), ["S"]),  # S twice
        (TWO_TABLES.replace("table : register stream T (A integer, B integer);", "table : select * from S;"), ["S"]),
        ("query : select 1 from S;\ndest : x\n" + TWO_TABLES, ["S", "T"]),  # the check will stop at line 1
        (TWO_TABLES, ["S", "T"]),
    ],
)
def test_the_first_pass_starts_what_it_can_read_and_never_raises(script, started, tmp_path):
    write(tmp_path, {"s.dat": _rows(300), "t.dat": _rows(300)})
    if script is not None:
        write(tmp_path, {"run.cql": script})
    early = start_early_readers(tmp_path / "run.cql", None, 1000)
    try:
        assert early.names() == started
    finally:
        early.close()


def _spy_start_reader(monkeypatch) -> list[str]:
    """The names of the sources the run itself starts a reader for (not taken from the first pass)."""
    started: list[str] = []
    start_reader = early_readers.start_reader

    def spy(file, source, block_size):
        started.append(source.name)
        return start_reader(file, source, block_size)

    monkeypatch.setattr("cqlstream.io.script_runner.start_reader", spy)
    return started


def test_a_reader_is_taken_only_for_the_same_file_definition_and_blocks(tmp_path, monkeypatch):
    """An early reader of other blocks (or another file) is not used: the run starts its own and
    stops the early one; the bytes are those of one thread."""
    write(tmp_path, {"s.dat": _rows(6000), "t.dat": _rows(6000), "run.cql": TWO_TABLES})
    script = tmp_path / "run.cql"
    run_script(script, out_dir=tmp_path / "o1", threads=1, batch_rows=300, block_size=2000)
    started = _spy_start_reader(monkeypatch)
    for block, source_dir in ((1000, None), (2000, tmp_path / "elsewhere")):
        (tmp_path / "elsewhere").mkdir(exist_ok=True)
        write(tmp_path / "elsewhere", {"s.dat": _rows(10), "t.dat": _rows(10)})
        early = start_early_readers(script, source_dir, block)
        assert len(early) == 2
        out = tmp_path / f"o-{block}"
        started.clear()
        run_script(script, out_dir=out, threads=2, batch_rows=300, block_size=2000, early=early)
        assert started == ["S", "T"]  # its own readers, of 2000-byte blocks of the script's files
        assert len(early) == 0  # the early ones stopped when the run ended
        for dest in ("agg", "sel"):
            assert (out / dest).read_bytes() == (tmp_path / "o1" / dest).read_bytes()


def test_taken_readers_are_the_early_ones(tmp_path, monkeypatch):
    """Same file, definition and blocks: the run reads through the readers the first pass started
    (no second reader of the file)."""
    write(tmp_path, {"s.dat": _rows(6000), "t.dat": _rows(6000), "run.cql": TWO_TABLES})
    early = start_early_readers(tmp_path / "run.cql", None, 2000)
    started = _spy_start_reader(monkeypatch)
    run_script(tmp_path / "run.cql", out_dir=tmp_path / "o", threads=2, batch_rows=300, block_size=2000, early=early)
    assert started == [] and len(early) == 0


def test_one_thread_stops_readers_it_was_given(tmp_path):
    write(tmp_path, {"s.dat": _rows(6000), "t.dat": _rows(6000), "run.cql": TWO_TABLES})
    early = start_early_readers(tmp_path / "run.cql", None, 2000)
    run_script(tmp_path / "run.cql", out_dir=tmp_path / "o", threads=1, batch_rows=300, block_size=2000, early=early)
    assert len(early) == 0 and _workers() == []


def test_an_argument_error_stops_the_readers_it_was_given(tmp_path):
    write(tmp_path, {"s.dat": _rows(6000), "t.dat": _rows(6000), "run.cql": TWO_TABLES})
    early = start_early_readers(tmp_path / "run.cql", None, 2000)
    with pytest.raises(ValueError):
        run_script(tmp_path / "run.cql", threads=2, writer="nope", early=early)
    assert len(early) == 0


def test_a_script_error_with_given_readers_is_raised_and_stops_them(tmp_path):
    write(
        tmp_path,
        {"s.dat": _rows(6000), "t.dat": _rows(6000), "run.cql": TWO_TABLES + "query : select Nope from T;\ndest : y\n"},
    )
    early = start_early_readers(tmp_path / "run.cql", None, 2000)
    assert len(early) == 2
    with pytest.raises(ScriptError) as ei:
        run_script(tmp_path / "run.cql", out_dir=tmp_path / "o", threads=2, block_size=2000, early=early)
    assert "Nope" in str(ei.value) and str(ei.value).startswith(f"{tmp_path / 'run.cql'}:9: ")
    assert len(early) == 0 and not (tmp_path / "o").exists()


def test_early_readers_close_is_idempotent(tmp_path):
    write(tmp_path, {"s.dat": _rows(300), "t.dat": _rows(300), "run.cql": TWO_TABLES})
    early = start_early_readers(tmp_path / "run.cql", None, 100)
    early.close()
    early.close()
    assert len(early) == 0 and isinstance(early, EarlyReaders)
