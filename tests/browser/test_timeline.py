"""Real browser: the prefill-vs-decode page on the embedded model, with two measurements run by clicking."""
from tests.browser.harness import assert_no_error, close_dialogs, screenshot, wait_idle
from ui import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/timeline.py")



def test_timeline_measurements_in_browser(app_server, page):
    page.goto(f"{app_server.url}/{URL}?max_new_tokens=6&temperature=0")
    wait_idle(page)
    close_dialogs(page)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Time to first token" in body and "GB/s" in body
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
    # timeline, cache on/off, stage shares, floor, roofline, memory
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 6
    screenshot(page, "timeline-measured")
