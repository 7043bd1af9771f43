"""API docs offline (Swagger UI and ReDoc from the server itself) and the console's page weight."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.console.conftest import OfflinePage

BUDGET = 300_000  # bytes transferred by the console's first load


def test_swagger_ui_renders_offline(offline: OfflinePage) -> None:
    page = offline.page
    page.goto("/docs")
    expect(page.locator("#swagger-ui .opblock").first).to_be_visible()
    expect(page.locator("#swagger-ui")).to_contain_text("/queries")
    offline.shot("docs")
    # the fixture asserts that no request left 127.0.0.1


def test_redoc_renders_offline(offline: OfflinePage) -> None:
    page = offline.page
    page.goto("/redoc")
    expect(page.locator("h1").first).to_contain_text("cqlstream")
    expect(page.locator("body")).to_contain_text("Register a continuous query")
    offline.shot("redoc")


def test_first_load_under_budget(offline: OfflinePage) -> None:
    page = offline.page
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    sizes: dict[str, int] = {}
    urls: dict[str, str] = {}
    cdp.on("Network.requestWillBeSent", lambda e: urls.__setitem__(e["requestId"], e["request"]["url"]))
    cdp.on("Network.loadingFinished", lambda e: sizes.__setitem__(e["requestId"], int(e["encodedDataLength"])))
    page.goto("/", wait_until="networkidle")
    expect(page.locator("#sources")).to_be_visible()
    total = sum(sizes.values())
    print(f"\nconsole first load: {total} bytes transferred in {len(sizes)} requests")
    for rid, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"  {n:>7}  {urls.get(rid, rid)}")
    assert any(u.endswith("/console/main.js") for u in urls.values())
    assert 0 < total < BUDGET
