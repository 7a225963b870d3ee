"""Real browser: the KV-cache page shows measured = formula, and its calculator answers Llama-3-70B correctly."""
import re

from tests.browser.harness import assert_no_error, screenshot, wait_idle
from ui.frame import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/kv_cache.py")


def test_kv_cache_page_calculator(app_server, page):
    page.goto(f"{app_server.url}/{URL}?max_new_tokens=6")
    wait_idle(page)
    assert_no_error(page)
    page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stPlotlyChart\"]').length >= 6",
                           timeout=180_000)
    body = page.inner_text("body")
    assert "agree exactly at every step" in body
    agree = re.search(r"Steps where they agree\s*(\d+) of (\d+)", body)
    assert agree and agree.group(1) == agree.group(2) and int(agree.group(1)) >= 2, body[:3000]
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 6
    # Pick Llama-3-70B in the calculator like a person: open the select box, type, choose.
    page.get_by_label("Model (published config)").click()
    page.keyboard.type("Llama-3-70B")
    page.keyboard.press("Enter")
    wait_idle(page)
    assert_no_error(page)
    metric = page.locator('[data-testid="stMetric"]', has_text="KV per token")
    assert "320.0 KiB" in metric.inner_text()
    screenshot(page, "kv-cache-llama70b")
