"""Real browser: the race streams (screenshot mid-race), then finishes with a summary (screenshot)."""
from tests.browser.harness import assert_no_error, screenshot, wait_idle


def test_race_in_progress_and_finished(app_server, page):
    page.goto(f"{app_server.url}/speculative?temperature=0")
    # mid-race: a lane shows the streaming cursor while tokens arrive
    page.wait_for_selector("text=\u258c", timeout=300_000)
    page.wait_for_timeout(1500)
    screenshot(page, "speculative-racing")
    wait_idle(page, timeout=600)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Measured speedup" in body and "Tokens per target pass" in body
    assert "\u258c" not in body  # both lanes finished
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 3
    screenshot(page, "speculative-finished")
