"""Real browser: run the batching experiment on the embedded model with small settings; screenshot the results."""
from tests.browser.harness import assert_no_error, screenshot, wait_idle
from ui import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/batching.py")


def test_batching_results_in_browser(app_server, page):
    page.goto(f"{app_server.url}/{URL}")
    wait_idle(page)
    assert_no_error(page)
    page.get_by_role("button", name="Run on the real model").click()
    wait_idle(page, timeout=420)
    assert_no_error(page)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 10
    body = page.inner_text("body")
    assert "Static vs continuous batching" in body and "Your request on a quiet" in body
    screenshot(page, f"{URL}-results")
