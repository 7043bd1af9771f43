"""The execution engine: delta batches, operators, queues, synopses, scheduler, and the `Dsms` facade."""

from typing import Any

__all__ = ["Dsms"]


def __getattr__(name: str) -> Any:
    # lazy, so importing one engine module does not import the whole engine
    if name == "Dsms":
        from cqlstream.engine.dsms import Dsms

        return Dsms
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
