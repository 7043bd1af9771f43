"""The process of `cqlstream run` (cqlstream/run_process.py): garbage collection paused while the
run starts, and the process ended without Python's teardown once the dests are closed.

Ending with `os._exit` is only right when nothing else still had to happen at exit: these runs
check, in fresh interpreters, that the results, the atexit handlers' work (the caches' saves)
and buffered stdout/stderr all survive, that the exit status is the command's, and that the
teardown is kept where it matters (a profiler or tracer set, another thread still running).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = (
    "table : register stream S (A integer, B integer);\nsource : s.dat\n"
    "query : select B, Sum(A) from S [Rows 50] group by B;\ndest : out\n"
)
ROWS = "i,i,i\n" + "".join(f"{i // 10 + 1},{i % 100},{i % 7}\n" for i in range(500))


def _setup(tmp_path: Path) -> Path:
    (tmp_path / "s.dat").write_text(ROWS)
    (tmp_path / "run.cql").write_text(SCRIPT)
    return tmp_path / "run.cql"


def _program(tmp_path: Path, before: str = "", after_main: str = "", args: list[str] | None = None) -> str:
    """A program that runs `cqlstream run` as the `cqlstream` executable does (`main()` reading
    sys.argv); `before` runs first, `after_main` only if main returned (no fast exit)."""
    argv = ["cqlstream", "run", str(tmp_path / "run.cql"), "--out-dir", str(tmp_path / "o"), *(args or [])]
    lines = [
        "import atexit, gc, os, sys, threading",
        f"os.environ['CQLSTREAM_CACHE_DIR'] = {str(tmp_path / 'cache')!r}",
        before,
        "from cqlstream.cli import main",
        f"sys.argv = {argv!r}",
        "code = main()",
        after_main,
        "sys.exit(code)",
    ]
    return "\n".join(lines) + "\n"


def _run(tmp_path: Path, prog: str) -> subprocess.CompletedProcess[str]:
    # stdout block-buffered, as for a user's run piped into a file
    env = {k: v for k, v in os.environ.items() if k not in ("CQLSTREAM_CACHE_DIR", "PYTHONUNBUFFERED")}
    return subprocess.run(
        [sys.executable, "-c", prog], capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL
    )


def _expected(tmp_path: Path) -> bytes:
    """The dest of the same script run in this process (main with arguments: no fast exit)."""
    from cqlstream.cli import main

    assert main(["run", str(tmp_path / "run.cql"), "--out-dir", str(tmp_path / "ref"), "--threads", "1"]) == 0
    return (tmp_path / "ref" / "out").read_bytes()


def test_a_run_ends_without_teardown_and_keeps_results_caches_and_output(tmp_path: Path):
    _setup(tmp_path)
    prog = _program(
        tmp_path,
        # buffered stdout written at exit by an atexit handler, and a handler registered first (so
        # run last) that sees the caches the run's own handlers saved
        before=textwrap.dedent("""
            atexit.register(lambda: print("caches:", sorted(p.name.rsplit("-", 1)[0] for p in
                __import__("pathlib").Path(os.environ["CQLSTREAM_CACHE_DIR"]).glob("*"))))
            atexit.register(lambda: print("gc enabled:", gc.isenabled(), "frozen:", gc.get_freeze_count() > 0))
            sys.stdout.write("buffered ")
        """),
        after_main='print("main returned")',
    )
    for _ in range(2):  # a cold run (caches written) and a warm one
        r = _run(tmp_path, prog)
        assert r.returncode == 0, r.stderr
        assert "main returned" not in r.stdout  # the process ended inside main
        assert r.stdout.startswith("buffered gc enabled: True frozen: True\ncaches: ")
        assert "'cql-parsed'" in r.stdout and "'dataclass-code'" in r.stdout, r.stdout
        assert r.stderr.endswith("out: 693 lines\n")
        assert (tmp_path / "o" / "out").read_bytes() == _expected(tmp_path)


def test_a_failed_run_ends_with_its_status_and_message(tmp_path: Path):
    _setup(tmp_path)
    (tmp_path / "run.cql").write_text(SCRIPT.replace("Sum(A)", "Sum(C)"))
    r = _run(tmp_path, _program(tmp_path, after_main='print("main returned")'))
    assert r.returncode == 2
    assert "main returned" not in r.stdout
    assert "C" in r.stderr and "run.cql" in r.stderr


def test_the_teardown_is_kept_under_a_profiler_or_with_a_thread_running(tmp_path: Path):
    _setup(tmp_path)
    # a profiler writes its data at exit
    r = _run(tmp_path, _program(tmp_path, before="sys.setprofile(lambda *a: None)", after_main='print("returned")'))
    assert r.returncode == 0 and "returned" in r.stdout, r.stderr
    # Python goes interactive after the program (`-i`, here PYTHONINSPECT; stdin is empty)
    r = _run(tmp_path, _program(tmp_path, before="os.environ['PYTHONINSPECT'] = '1'", after_main='print("returned")'))
    assert r.returncode == 0 and "returned" in r.stdout, r.stderr
    # a thread still running: Python waits for it, and so does the run
    thread = (
        'threading.Thread(target=lambda: (__import__("time").sleep(1.0), print("thread done")), daemon=False).start()'
    )
    r = _run(tmp_path, _program(tmp_path, before=thread, after_main='print("returned")'))
    assert r.returncode == 0 and "returned" in r.stdout and "thread done" in r.stdout, r.stderr
    # a daemon thread does not hold up an exit, ours or Python's
    daemon = 'threading.Thread(target=lambda: __import__("time").sleep(60), daemon=True).start()'
    r = _run(tmp_path, _program(tmp_path, before=daemon, after_main='print("returned")'))
    assert r.returncode == 0 and "returned" not in r.stdout, r.stderr


def test_main_with_arguments_neither_pauses_collection_nor_exits(tmp_path: Path):
    """Called as a function (tests, benchmarks), a run leaves the caller's collector alone."""
    import gc

    from cqlstream.cli import main

    _setup(tmp_path)
    frozen = gc.get_freeze_count()
    assert main(["run", str(tmp_path / "run.cql"), "--out-dir", str(tmp_path / "o")]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    assert (tmp_path / "o" / "out").read_bytes() == _expected(tmp_path)
