"""Real browser: change the batching settings like a person, run the experiment on the embedded model (small
settings keep it to about 40 s), screenshot the results (the README shows that picture)."""
from tests.browser.harness import assert_no_error, close_dialogs, screenshot, wait_idle
from ui.frame import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/batching.py")


def _slider(page, label: str):
    return page.locator('[data-testid="stSlider"]').filter(has_text=label).get_by_role("slider")


def small_settings(page, url: str, drop_16: bool = True) -> None:
    """Open the page and set small settings like a person would: 5 requests, at most 10 tokens each, and
    (``drop_16``) batch sizes 1, 2, 4, 8."""
    page.goto(f"{url}/{URL}")
    wait_idle(page)
    close_dialogs(page)
    assert_no_error(page)
    page.get_by_text("Settings: the requests and the server").click()
    _slider(page, "Requests").first.focus()
    for _ in range(3):
        page.keyboard.press("ArrowLeft")
    wait_idle(page)
    _slider(page, "Tokens to generate").last.focus()
    for _ in range(14):
        page.keyboard.press("ArrowLeft")
    wait_idle(page)
    if drop_16:
        page.locator('[data-testid="stMultiSelect"]').get_by_text("16", exact=True).locator("..").get_by_role(
            "button").first.click()
        wait_idle(page)


def test_batching_results_in_browser(app_server, page):
    small_settings(page, app_server.url)
    page.get_by_role("button", name="Run on the real model").click()
    wait_idle(page, timeout=300)
    assert_no_error(page)
    assert page.locator('[data-testid="stPlotlyChart"]').count() == 10
    body = page.inner_text("body")
    assert "Static vs continuous batching" in body and "Your request on a quiet" in body
    assert "exactly the same tokens" in body
    screenshot(page, f"{URL}-results")
