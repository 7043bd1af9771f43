"""Fixtures for the console's browser tests: Debian's chromium driven by Playwright, a real uvicorn
server on 127.0.0.1 per test, and a page whose every non-localhost request is blocked and recorded
(the console and the API docs must work offline)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page, Playwright, Route, expect, sync_playwright

from tests.server.conftest import ROOT, ServerThread

SHOTS = ROOT / "build" / "console-shots"  # screenshots of each view (gitignored test artifacts)
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# Debian's chromium on a machine without network: no background services that would retry refused connections
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str | None:
    """The browser: $CQLSTREAM_CHROMIUM, else Debian's chromium (scripts/install_browser.sh installs it)."""
    env = os.environ.get("CQLSTREAM_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


# Assertions wait up to 15 s, not Playwright's 5: on a loaded two-core machine ReDoc alone took over
# 5 s to render its bundle (a passing page is not slowed; only a failing assertion waits longer).
EXPECT_TIMEOUT_MS = 15_000


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    exe = chromium_path()
    if exe is None:
        pytest.skip(
            "no Chromium browser: run `make setup` as root (scripts/install_browser.sh apt-get installs Debian's "
            "chromium) or `sudo apt-get install chromium`, or set CQLSTREAM_CHROMIUM"
        )
    # Playwright gives every launch a fresh temporary profile (its own --user-data-dir)
    b = playwright.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, timeout=60_000)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def server() -> Iterator[ServerThread]:
    s = ServerThread().start()
    try:
        yield s
    finally:
        s.stop()


class OfflinePage:
    """A page with the network cut off: requests to anything but 127.0.0.1 are aborted and recorded."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.context = browser.new_context(base_url=base_url, viewport={"width": 1400, "height": 900})
        self.external: list[str] = []
        self.context.route("**/*", self._route)
        self.page: Page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _route(self, route: Route) -> None:
        url = route.request.url
        host = urlsplit(url).hostname
        if url.startswith("data:") or host in LOCAL_HOSTS:
            route.continue_()
        else:
            self.external.append(url)
            route.abort("internetdisconnected")

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def offline(browser: Browser, server: ServerThread) -> Iterator[OfflinePage]:
    p = OfflinePage(browser, server.url)
    try:
        yield p
        assert p.external == [], f"requests left the machine: {p.external}"
        assert p.errors == [], f"JavaScript errors: {p.errors}"
    finally:
        p.context.close()
