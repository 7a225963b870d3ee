"""Real browser: the prefill-vs-decode page on the embedded model, with two measurements run by clicking."""
from tests.browser.harness import assert_no_error, screenshot, wait_idle
from ui import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/timeline.py")


def _close_dialogs(page) -> None:
    """A modal (Streamlit's 'Page not found' on a first deep link) makes the page inert until it is closed."""
    for _ in range(3):
        if page.locator('[role="dialog"]').count() == 0:
            return
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)


def test_timeline_measurements_in_browser(app_server, page):
    page.goto(f"{app_server.url}/{URL}?max_new_tokens=6&temperature=0")
    wait_idle(page)
    _close_dialogs(page)
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
