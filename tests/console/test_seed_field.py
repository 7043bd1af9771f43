"""The editor's "seed from instant" field is sent as the registration's `seed_from`: without a log
archive the server refuses it and the editor shows why (the fix: --retain-log)."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import OfflinePage
from tests.console.test_views import setup_stream
from tests.server.conftest import ServerThread


def test_seed_from_field_reaches_the_server(server: ServerThread, offline: OfflinePage) -> None:
    setup_stream(server)
    page = offline.page
    page.goto("/#editor")
    page.get_by_label("CQL query").fill("select A from S [range 10]")
    page.get_by_label("Seed from instant").fill("5")
    page.get_by_role("button", name="Register").click()
    expect(page.locator("#cql-error")).to_contain_text("--retain-log")
    with server.client() as c:
        assert c.get("/queries").json() == []
