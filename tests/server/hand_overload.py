"""The overload controller of a test server turned by hand: the test says what load it sees and
when it looks, so its steps come where the test wants them."""

from __future__ import annotations

from dataclasses import replace

from cqlstream.engine.approx.controller import Load


class HandOverload:
    def __init__(self, host) -> None:
        self.host = host
        self.a = host.d.approx
        assert self.a is not None, "start the server with overload_control=True"
        self.load = Load(0)
        with host.lock:
            self.a.config = replace(self.a.config, interval=0.0, settle=1)
            self.a.measure = lambda: self.load

    def press(self, mib: int = 400, turns: int = 1) -> None:
        """Queue memory of `mib` MiB (the default limit is 100), seen for `turns` looks; then a
        load in the hold band (under the limit, above where precision comes back), so the server's
        own looks on its clock change nothing until `release`."""
        self.load = Load(mib << 20)
        for _ in range(turns):
            with self.host.lock:
                self.host._approximate()
        self.load = Load(75 << 20)

    def release(self, qid: int) -> None:
        """No load, and looks until query `qid` is exact again."""
        self.load = Load(0)
        with self.host.lock:
            self.a.config = replace(self.a.config, calm=1)
        for _ in range(40):
            with self.host.lock:
                self.host._approximate()
            now = self.host.get_query(qid)["approximation"]
            if now is None or now["since"] is None:
                return
        raise AssertionError(f"query {qid} is still approximated after 40 calm looks")
