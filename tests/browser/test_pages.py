"""Real browser: every page renders on the embedded model with no error, shows its chart; a screenshot each."""
import pytest

from tests.browser.harness import assert_no_error, screenshot, wait_idle
from ui import nav

PAGES = nav.available()


@pytest.mark.parametrize("spec", PAGES, ids=[p.url for p in PAGES])
def test_page_in_browser(spec, app_server, page):
    page.goto(f"{app_server.url}/{spec.url if spec != PAGES[0] else ''}")
    wait_idle(page)
    assert_no_error(page)
    if spec.url == "serving":  # measures a server you connect to: no chart before that (tests/browser/test_serving.py)
        assert "Press Connect" in page.inner_text("body")
        screenshot(page, spec.url)
        return
    if spec.url == "speculative":  # a race runs only when asked: nothing is measured before Start
        assert "Nothing runs until you do" in page.inner_text("body")
        page.get_by_role("button", name="Start the race").click()
        page.wait_for_function("() => document.body.innerText.includes('Measured speedup')", timeout=300_000)
        wait_idle(page)
        assert_no_error(page)
    # Plotly is a lazily loaded chunk: on a page that computes quickly the script can finish before it mounts.
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(state="attached", timeout=60_000)
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 1, "no chart on the page"
    screenshot(page, spec.url)


def test_home_shows_sampled_token_and_sidebar_typing_survives(app_server, page):
    """Type a new prompt into the sidebar like a person; the page reruns with it and the URL records it."""
    page.goto(f"{app_server.url}/?temperature=0")
    wait_idle(page)
    box = page.get_by_role("textbox", name="Prompt")
    box.fill("Name the largest planet in the solar system.")
    box.press("Control+Enter")
    wait_idle(page)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "the model chose" in body
    assert "largest planet" in body  # the exact text the model receives now holds the new prompt
    assert box.input_value() == "Name the largest planet in the solar system."
    assert "prompt=Name" in page.url
    # Switch page and back: the typed prompt is still there (shared settings survive navigation).
    page.reload()
    wait_idle(page)
    assert page.get_by_role("textbox", name="Prompt").input_value() == "Name the largest planet in the solar system."
    screenshot(page, "home-typed")
