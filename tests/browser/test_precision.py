"""Real browser: "Fewer bytes, faster decode" on the embedded model, run by clicking, at 1366x768."""
from tests.browser.harness import (SHOTS, assert_no_error, close_dialogs, screenshot, screenshots_wanted,
                                   wait_idle)
from ui.frame import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/timeline.py")


def test_precision_section_in_browser(app_server, page):
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(f"{app_server.url}/{URL}?max_new_tokens=3&temperature=0")
    wait_idle(page)
    close_dialogs(page)
    assert_no_error(page)
    page.get_by_text("7. Fewer bytes, faster decode").scroll_into_view_if_needed()
    for label in ("Tokens per run", "Repeats (alternating)"):  # the smallest run: keyboard Home on each slider
        page.get_by_role("slider", name=label).focus()
        page.keyboard.press("Home")
        wait_idle(page)
    page.get_by_role("button", name="Compare the precisions").click()
    wait_idle(page, timeout=400)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Decode step per precision vs the floor" in body or page.locator(
        '[data-testid="stPlotlyChart"]').count() >= 2
    for word in ("float32: decode", "bfloat16: decode (", "int8: decode (", "What each one wrote"):
        assert word in body, word
    if not screenshots_wanted():
        return
    page.get_by_text("Made your prediction? Reveal what happens").last.scroll_into_view_if_needed()
    head = page.get_by_text("7. Fewer bytes, faster decode")
    head.scroll_into_view_if_needed()
    page.evaluate("() => { const h = [...document.querySelectorAll('h2')].find(e => e.innerText.includes("
                  "'Fewer bytes')); h.scrollIntoView({block: 'start'}); }")
    page.wait_for_timeout(1500)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "precision-section-1366x768.png"))
    page.mouse.wheel(0, 700)
    page.wait_for_timeout(1000)
    page.screenshot(path=str(SHOTS / "precision-section-1366x768-2.png"))
    screenshot(page, "precision-measured")
