"""Real browser: a race runs only on Start; it is measured with the page quiet, then replayed (screenshot
mid-race), and finishes with a summary (screenshot)."""
from tests.browser.harness import assert_no_error, screenshot, wait_idle, wait_text_then_check


def test_race_in_progress_and_finished(app_server, page):
    # few tokens: the flow is checked here, not a speed (64 tokens x 6 races took 55-128 s of the suite)
    page.goto(f"{app_server.url}/speculative?temperature=0&max_new_tokens=24")
    wait_idle(page)
    assert "Measured speedup" not in page.inner_text("body")  # opening the page starts no race
    page.get_by_role("button", name="Start the race").click()
    # mid-race: a lane shows the streaming cursor while tokens arrive
    # Either the streaming cursor shows (mid-race) or, on a fast machine, the race has already finished.
    page.wait_for_function(
        "() => document.body.innerText.includes('\u258c') || document.body.innerText.includes('Measured speedup')",
        timeout=300_000)
    screenshot(page, "speculative-racing")
    # the lanes stream between runs: on a loaded machine the page can look idle mid-race
    wait_text_then_check(page, "Measured speedup", "Tokens per target pass", timeout=600)
    wait_idle(page, timeout=600)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Measured speedup" in body and "Tokens per target pass" in body
    assert "\u258c" not in body  # both lanes finished
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 3
    screenshot(page, "speculative-finished")
