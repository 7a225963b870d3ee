"""Real browser at 1366x768 (a classroom projector): the attention, sampling, prefill-vs-decode, KV-cache and
batching pages show their key chart on the first screen, without scrolling."""
from tests.browser.harness import assert_no_error, new_tab, wait_idle

PROJECTOR = {"width": 1366, "height": 768}
PAGES = ["attention", "sampling", "timeline", "kv_cache", "batching"]


def test_key_chart_on_the_first_screen(app_server, tabs):
    page = new_tab(tabs, PROJECTOR)
    try:
        for name in PAGES:
            page.goto(f"{app_server.url}/{name}?temperature=0&max_new_tokens=4")
            wait_idle(page, timeout=300)
            assert_no_error(page)
            chart = page.locator('[data-testid="stPlotlyChart"]').first
            chart.wait_for(state="visible")
            box = chart.bounding_box()
            # the chart's plot area starts on the first screen and at least 200 px of it are visible there
            assert box and box["y"] < PROJECTOR["height"] - 200, (name, box)
    finally:
        page.close()
