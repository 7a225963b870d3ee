"""Real browser: a click on a cell of the layers x heads overview opens that head (tiny model, fast)."""
from tests.browser.harness import assert_no_error, screenshot, wait_idle
from ui.frame import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/attention.py")


def _header(page) -> str:
    return page.locator("h2", has_text="who looks at whom").first.inner_text()


def test_click_overview_cell_opens_that_head(app_server, page):
    page.goto(f"{app_server.url}/{URL}?model=tiny-random&max_new_tokens=2")
    wait_idle(page)
    assert_no_error(page)
    assert _header(page).startswith("2. Layer 1, head 0")
    area = page.locator('[data-testid="stPlotlyChart"]').first.locator(".nsewdrag").first
    box = area.bounding_box()  # the plot area: heads -0.5..3.5 across, layers -0.5..1.5 upwards
    n_heads, n_layers, head, layer = 4, 2, 2, 0
    area.click(position={"x": box["width"] * (head + 0.5) / n_heads,
                         "y": box["height"] * (1 - (layer + 0.5) / n_layers)})
    page.wait_for_timeout(500)
    wait_idle(page)
    assert_no_error(page)
    assert _header(page).startswith(f"2. Layer {layer}, head {head}"), _header(page)
    # the map and the GQA text follow the click
    assert f"Head {head} reads K/V head 1" in page.inner_text("body")
    assert f"layer={layer}" in page.url and f"head={head}" in page.url  # a copied link opens this head
    screenshot(page, "attention-tiny-selected")
