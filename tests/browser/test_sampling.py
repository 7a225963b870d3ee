"""Real browser: the sampling page's dice respond instantly and the loop can be stepped by hand."""
import re
import time

from tests.browser.harness import assert_no_error, screenshot, wait_idle


def metric_value(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text()


def test_sampling_dice_and_stepping(app_server, page):
    # Open the app and go to the page through the sidebar, as a person would.
    page.goto(f"{app_server.url}/?temperature=0.7&max_new_tokens=4")
    wait_idle(page)
    page.get_by_role("link", name=re.compile("Logits & sampling")).first.click()
    wait_idle(page)
    assert page.get_by_role("heading", name=re.compile("Logits & sampling")).count() >= 1
    assert_no_error(page)
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 4
    entropy = metric_value(page, "Entropy drawn from")
    n_prompt = int(re.search(r"of the prompt's (\d+) tokens", page.inner_text("body")).group(1))

    # Nudge the temperature slider with the keyboard, like a person on a projector laptop.
    thumb = page.get_by_role("slider", name=re.compile("Temperature")).last
    thumb.focus()
    t0 = time.perf_counter()
    for _ in range(8):
        thumb.press("ArrowRight")
    wait_idle(page)
    resample_s = time.perf_counter() - t0
    assert_no_error(page)
    assert metric_value(page, "Entropy drawn from") != entropy
    print(f"re-sampling after 8 slider moves took {resample_s:.2f} s (incl. the 1 s idle wait)")

    # Append the sampled token twice: the text grows and a step chart appears.
    for _ in range(2):
        page.get_by_role("button", name=re.compile(r"^Append")).click()
        wait_idle(page)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Text generated here so far" in body
    assert "forward passes taken here: 2" in body
    assert f"KV cache: {n_prompt + 2} tokens" in body  # prompt + 2 appended tokens, each fed exactly once
    screenshot(page, "sampling-stepped")
