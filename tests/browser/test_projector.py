"""Real browser at a projector's 1366x768: what a class sees without scrolling. Presenter view has one section bar,
on the first screen (the home page's loop picture filled it) and in view while a section scrolls, brings the new
section's heading into view after Next (the view stayed at the bar), and prints a metric's value well above its label's size; after "Start the
race" the lanes and then the scoreboard's numbers are on screen (the controls fill the first screen)."""
from tests.browser.harness import assert_no_error, new_tab, wait_idle, wait_text

SIZE = {"width": 1366, "height": 768}
HEADER = 60  # Streamlit's top bar lies over the top of the page


def _on_screen(page, locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= HEADER - 5 and box["y"] + box["height"] <= SIZE["height"]


def _sizes(page) -> list[tuple[str, float, float]]:
    """(label, label px, value px) of every metric on the page, from the innermost text element of each."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid="stMetric"]')].map(m => {
        const px = sel => { let e = m.querySelector(sel); while (e && e.firstElementChild) e = e.firstElementChild;
                            return e ? parseFloat(getComputedStyle(e).fontSize) : 0; };
        return [m.querySelector('[data-testid="stMetricLabel"]').innerText, px('[data-testid="stMetricLabel"]'),
                px('[data-testid="stMetricValue"]')]; })""")


def test_presenter_view_on_a_projector(app_server, tabs):
    page = new_tab(tabs, SIZE, timeout_s=300)
    try:
        page.goto(f"{app_server.url}/?model=tiny-random&max_new_tokens=4&present=1")
        wait_idle(page)
        assert_no_error(page)
        nxt = page.locator(".st-key-present_next button")
        assert _on_screen(page, nxt), "no Next on the first screen"
        assert page.locator(".st-key-present_prev button").count() == 1 and nxt.count() == 1  # one bar
        page.mouse.move(600, 500)
        page.mouse.wheel(0, 700)  # down the tall first section: the bar stays in view under the header
        page.wait_for_timeout(1000)
        assert _on_screen(page, nxt), "the section bar scrolled away"
        nxt.click()
        wait_text(page, "Section 2 of")
        wait_idle(page)
        page.wait_for_timeout(2000)  # the scroll back to the top runs as the page is drawn
        assert _on_screen(page, page.get_by_role("heading", name="1. Text")), "the new section's heading is cut"

        page.goto(f"{app_server.url}/kv_cache?model=tiny-random&max_new_tokens=4&present=1")
        wait_idle(page)
        page.locator(".st-key-present_next button").click()
        wait_text(page, "Steps where they agree")
        wait_idle(page)
        sizes = _sizes(page)
        assert sizes and all(value >= 1.5 * label for _, label, value in sizes), sizes  # it was 23 px, as its label
    finally:
        page.close()


def test_the_race_is_on_screen_after_start(app_server, tabs):
    page = new_tab(tabs, SIZE, timeout_s=300)
    try:
        page.goto(f"{app_server.url}/speculative?model=tiny-random&max_new_tokens=16")
        wait_idle(page)
        lanes = page.get_by_role("heading", name="Plain decoding")
        assert not _on_screen(page, lanes)  # the controls fill the first screen: the lanes start below it
        page.get_by_role("button", name="Start the race").click()
        wait_text(page, "Acceptance rate a")
        wait_idle(page)
        page.wait_for_timeout(1000)
        assert_no_error(page)
        assert _on_screen(page, lanes), "the lanes are not on screen after Start"
        first = page.locator('[data-testid="stMetric"]').first
        assert _on_screen(page, first), "the scoreboard's numbers are below the screen"
    finally:
        page.close()


def test_the_race_lanes_clear_the_section_bar_in_presenter_view(app_server, tabs):
    """Presenter view's section bar stays in view under Streamlit's header; the scroll that brings the lanes up
    after Start stopped under the header alone, so the bar covered the lanes' headings (walkthrough 2026-11-29)."""
    page = new_tab(tabs, SIZE, timeout_s=300)
    try:
        page.goto(f"{app_server.url}/speculative?model=tiny-random&max_new_tokens=16&present=1")
        wait_idle(page)
        page.mouse.move(600, 500)
        page.mouse.wheel(0, 300)  # wherever the person had scrolled to
        page.wait_for_timeout(500)
        page.get_by_role("button", name="Start the race").click()
        wait_text(page, "How they ran")
        wait_idle(page)
        page.wait_for_timeout(1000)
        assert_no_error(page)
        bar = page.locator('[data-testid="stLayoutWrapper"]:has(> .st-key-present_bar)').bounding_box()
        for name in ("Plain decoding", "Speculative: lookup"):
            heading = page.get_by_role("heading", name=name).bounding_box()
            assert heading is not None and heading["y"] >= bar["y"] + bar["height"], (name, heading, bar)
            assert heading["y"] + heading["height"] <= SIZE["height"], (name, heading)
    finally:
        page.close()


def _metric(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text().strip()


def test_the_class_view_numbers_on_the_first_screen_without_the_teachers_tabs(app_server, tabs):
    """Presenter view put the class view's live numbers below the class links, off a projector's first screen, and
    "sessions connected" counted the teacher's own tabs: a second tab of the class view leaves the count as it was."""
    import re

    token = re.search(r"/batching\?teacher=([\w-]+)", open(app_server.log.name).read()).group(1)
    url = f"{app_server.url}/batching?model=tiny-random&present=1&teacher={token}"
    first, second = new_tab(tabs, SIZE, timeout_s=300), None
    try:
        first.goto(url)
        wait_idle(first)
        assert_no_error(first)
        students = first.locator('[data-testid="stMetric"]').filter(has_text="Student sessions").first
        assert _on_screen(first, students), "the class view's numbers are below the first screen"
        before = _metric(first, "Student sessions")
        second = new_tab(tabs, SIZE, timeout_s=300)
        second.goto(url)
        wait_idle(second)
        first.wait_for_timeout(5000)  # the numbers refresh every 2 s
        assert _metric(first, "Student sessions") == before == _metric(second, "Student sessions")
    finally:
        first.close()
        if second is not None:
            second.close()
