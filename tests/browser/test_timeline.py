"""Real browser: the prefill-vs-decode page on the embedded model, with two measurements run by clicking."""
from tests.browser.harness import assert_no_error, close_dialogs, new_tab, screenshot, wait_idle
from ui.frame import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/timeline.py")


def test_timeline_measurements_in_browser(app_server, page):
    page.goto(f"{app_server.url}/{URL}?max_new_tokens=6&temperature=0")
    wait_idle(page)
    close_dialogs(page)
    assert_no_error(page)
    main = page.locator('[data-testid="stMain"]')
    for text in ("Time to first token", "GB/s"):  # a busy server can look idle for 2 s mid-run: wait, then judge
        try:
            main.get_by_text(text).first.wait_for(timeout=60_000)
        except Exception:  # noqa: BLE001  say what the page shows instead
            raise AssertionError(f"{text!r} not on the page after 60 s:\n{main.inner_text()[:2500]}") from None
    page.get_by_role("button", name="Run with and without the cache").click()
    wait_idle(page)
    page.get_by_role("button", name="Measure the stages").click()
    wait_idle(page)
    page.get_by_role("button", name="Measure the memory of one pass").click()
    wait_idle(page)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "Same tokens out" in body
    assert "Saved for backward" in body
    # section 5: the step against the floor measured beside it, in words that follow the measured pace
    assert "measured beside it" in body or "Not a lesson yet" in body, body[:3000]
    assert "hides better" not in body
    # timeline, cache on/off, stage shares, floor, roofline, memory
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 6
    screenshot(page, "timeline-measured")


# Every text of the run's timeline chart with its box, the chart's box and the first-token line's x.
_GANTT_TEXTS = """() => {
  const c = [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].find(
      e => e.innerText.includes('Timeline of this run'));
  const svg = c.querySelector('.main-svg').getBoundingClientRect();
  const texts = [...c.querySelectorAll('text')].filter(t => t.textContent.trim()).map(t => {
    const b = t.getBoundingClientRect();
    return [t.textContent, b.left, b.right, b.top, b.bottom, !!t.closest('.annotation')]; });
  return [[svg.left, svg.right, svg.top, svg.bottom], c.querySelector('.shapelayer path').getBoundingClientRect().left,
          texts];
}"""


def test_the_timeline_labels_stay_in_the_chart(app_server, tabs):
    """At a projector's 1366x768, normal and presenter view, every label of the run's timeline lies inside the chart
    and none runs across the first-token line: "N prompt tokens in one pass" was written from the prefill bar's start
    and ran past a short bar, across the line (walkthrough 2026-11-29)."""
    page = new_tab(tabs, {"width": 1366, "height": 768})
    try:
        for view in ("", "&present=1"):
            page.goto(f"{app_server.url}/{URL}?model=tiny-random&max_new_tokens=8{view}")
            wait_idle(page)
            assert_no_error(page)
            page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
            (left, right, top, bottom), line, texts = page.evaluate(_GANTT_TEXTS)
            assert any("prompt tokens" in t[0] for t in texts), texts
            for text, x0, x1, y0, y1, note in texts:
                assert left <= x0 and x1 <= right and top <= y0 and y1 <= bottom, (view, text)
                if note:  # an annotation lies on one side of the line
                    assert x1 <= line + 1 or x0 >= line - 1, (view, text, x0, x1, line)
    finally:
        page.close()
