"""Real browser: the race streams (screenshot mid-race), then finishes with a summary (screenshot)."""
from tests.browser.harness import assert_no_error, screenshot, wait_idle


def test_race_in_progress_and_finished(app_server, page):
    page.goto(f"{app_server.url}/speculative-race?temperature=0&max_new_tokens=64")
    # mid-race: a lane shows the streaming cursor while tokens arrive
    try:
        page.locator('span:has-text("\u258c")').first.wait_for(timeout=300_000)
        page.wait_for_timeout(1500)
    except Exception:  # a very loaded machine: keep whatever state the page is in for the picture
        pass
    screenshot(page, "speculative-racing")
    wait_idle(page, timeout=600)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Measured speedup" in body and "Tokens per target pass" in body
    assert "\u258c" not in body  # both lanes finished
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 3
    screenshot(page, "speculative-finished")
