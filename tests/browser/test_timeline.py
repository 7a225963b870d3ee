"""Real browser: the prefill-vs-decode page on the embedded model, with two measurements run by clicking."""
from tests.browser.harness import assert_no_error, close_dialogs, screenshot, wait_idle
from ui.frame import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/timeline.py")


def test_timeline_measurements_in_browser(app_server, page):
    page.goto(f"{app_server.url}/{URL}?max_new_tokens=6&temperature=0")
    wait_idle(page)
    close_dialogs(page)
    assert_no_error(page)
    main = page.locator('[data-testid="stMain"]')
    for text in ("Time to first token", "GB/s"):  # a busy server can look idle for 2 s mid-run: wait, then judge
        try:
            main.get_by_text(text).first.wait_for(timeout=60_000)
        except Exception:  # noqa: BLE001  say what the page shows instead
            raise AssertionError(f"{text!r} not on the page after 60 s:\n{main.inner_text()[:2500]}") from None
    page.get_by_role("button", name="Run with and without the cache").click()
    wait_idle(page)
    page.get_by_role("button", name="Measure the stages").click()
    wait_idle(page)
    page.get_by_role("button", name="Measure the memory of one pass").click()
    wait_idle(page)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Same tokens out" in body
    assert "Saved for backward" in body
    # section 5: the step against the floor measured beside it, in words that follow the measured pace
    assert "measured beside it" in body or "Not a lesson yet" in body, body[:3000]
    assert "hides better" not in body
    # timeline, cache on/off, stage shares, floor, roofline, memory
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 6
    screenshot(page, "timeline-measured")
