"""The process of a `cqlstream run`: no garbage collection while it starts, no teardown once it ends.

Both are fixed costs of every run that its results do not need (bench/README.md, "session 17,
start-up and exit"): the collector walked the start-up's ~40k new, long-lived objects (modules,
classes, the script's plans) ~100 times, ~15 ms; the interpreter's teardown after the run (every
module and object freed one by one) ~50 ms.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading

_paused = False


def pause_gc() -> None:
    """Collect no garbage until `resume_gc`: what a run creates before its first tuple lives as
    long as the run (imports, the registered plan), so collecting it finds nothing."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_gc() -> None:
    """Undo `pause_gc` (a no-op without it): the objects made meanwhile are moved out of the
    collector's generations (`gc.freeze`: later collections skip them, and they are live anyway),
    and collection resumes for the run."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()


def leave(code: int) -> int:
    """End the process now with exit status `code`, as Python's own exit would but without its
    teardown: the atexit handlers run (the caches' saves, logging's flush), then stdout and stderr
    are flushed, then `os._exit`. Only called once a run's dests are written and closed.

    Returns `code` instead (for an ordinary exit) where the teardown may matter: a tracer,
    profiler or monitoring tool is set (coverage and cProfile write their data at exit), Python
    is to go interactive afterwards (`-i`, PYTHONINSPECT), another non-daemon thread is alive
    (Python would wait for it), this is not the main thread, or a flush fails (Python reports it
    as usual)."""
    if sys.gettrace() is not None or sys.getprofile() is not None or _monitored():
        return code
    if sys.flags.inspect or os.environ.get("PYTHONINSPECT"):
        return code
    main = threading.main_thread()
    if threading.current_thread() is not main:
        return code
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return code
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's: runs them once, then forgets them
    if run_exit_handlers is None:
        return code
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            return code
    os._exit(code)


def _monitored() -> bool:
    """Whether a tool holds a `sys.monitoring` id (Python 3.12+; coverage can measure that way)."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return False
    return any(monitoring.get_tool(i) is not None for i in range(6))
