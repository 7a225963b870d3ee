"""Real browser: the home page's loop picture shows the current prompt's real chosen token and steps it round
the loop; stepping is fragment-scoped (no full script run); the presenter view round-trips through the URL."""
import time

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from tests.browser.harness import assert_no_error, new_tab, screenshot, wait_idle, wait_text
from ui.frame.html import visible
from ui.frame.state import DEFAULT_PROMPT


def _loop(page):
    return page.locator('[data-testid="ile-loop"]')


def test_loop_picture_shows_real_token_and_steps_without_rerunning_page(app_server, tabs, embedded_lm):
    want = run_trace(embedded_lm, DEFAULT_PROMPT, SamplingSettings(0.0, 50, 0.95), 6, 0, True)  # greedy
    page = new_tab(tabs, {"width": 1366, "height": 768})
    try:
        page.goto(f"{app_server.url}/?temperature=0&max_new_tokens=6")
        wait_idle(page)
        assert_no_error(page)
        loop = _loop(page)
        assert loop.get_attribute("data-token") == "0"
        assert page.locator('[data-testid="ile-chosen"]').inner_text() == visible(want.steps[0].token)
        softmax = page.locator('.ile-box[data-stage="softmax"]').inner_text()
        assert visible(want.steps[0].top_tokens[0]) in softmax
        assert page.locator('.ile-box[data-stage="ids"]').get_attribute("href").startswith("tokenization?")
        screenshot(page, "loop-glance", max_height=768)

        before = app_server.runs()
        page.get_by_role("button", name="Next stage").click()  # appended -> the new token's id enters pass 2
        page.wait_for_selector('[data-testid="ile-loop"][data-token="1"][data-stage="ids"]')
        ids_box = page.locator('.ile-box[data-stage="ids"]').inner_text()
        assert str(want.generated_ids[0]) in ids_box and "reads 1" in ids_box
        page.get_by_role("button", name="Next token").click()
        page.wait_for_selector('[data-testid="ile-loop"][data-token="2"][data-stage="appended"]')
        wait_idle(page)
        assert page.locator('[data-testid="ile-chosen"]').inner_text() == visible(want.steps[2].token)
        assert app_server.runs() == before, "stepping the loop reran the whole page script"
        assert_no_error(page)
    finally:
        page.close()


def test_presenter_view_round_trips_through_url(app_server, page):
    page.goto(f"{app_server.url}/?present=1&max_new_tokens=4")
    wait_idle(page)
    assert_no_error(page)
    assert page.locator('[data-testid="stSidebar"][data-collapsed="true"]').count() == 1, "sidebar not collapsed"
    assert "present=1" in page.url
    assert page.locator("h2").filter(has_text="1. Text").count() == 0  # one section at a time
    page.get_by_role("button", name="Next section").click()
    wait_idle(page)
    assert page.locator("h2").filter(has_text="1. Text").count() == 1
    assert page.locator('[data-testid="ile-loop"]').count() == 0
    page.reload()  # a shared link opens in presenter view again
    wait_idle(page)
    assert "present=1" in page.url
    assert page.locator('[data-testid="stSidebar"][data-collapsed="true"]').count() == 1


CHARTS = '[data-testid="stPlotlyChart"]'


def test_a_new_answer_takes_the_old_pages_place_and_a_kept_run_updates_it_in_place(app_server, page):
    """While a new answer is computed, the previous answer's page (its charts and tables) is gone from the tab,
    not kept below the progress box, faded, until the new page is drawn: a class asking together draws its
    progress and answers on a page of a few elements. A run that is kept (greedy: top-k changes no token) redraws
    the page in place: the charts are the same elements, updated, not drawn anew."""
    page.goto(f"{app_server.url}/?temperature=0&max_new_tokens=3&prompt=Name+a+colour.")
    wait_text(page, "times in all")
    wait_idle(page)
    n = page.locator(CHARTS).count()
    assert n >= 3
    page.evaluate(f"() => document.querySelectorAll('{CHARTS}').forEach(e => e.dataset.drawn = 'before')")
    box = page.get_by_role("spinbutton", name="Top-k (0 = off)")
    box.fill("7")
    box.press("Enter")
    page.wait_for_function("() => location.search.includes('top_k=7')")
    wait_idle(page)
    assert page.locator(f'{CHARTS}[data-drawn="before"]').count() == n, "a kept run redrew its charts anew"
    page.get_by_role("textbox", name="Prompt").fill(f"Name a planet. [{time.time():.0f}]")
    page.get_by_role("textbox", name="Prompt").press("Control+Enter")
    page.wait_for_function(f"() => document.body.innerText.includes('Generating') && "
                           f"document.querySelectorAll('{CHARTS}').length === 0", timeout=60_000, polling=50)
    wait_text(page, "times in all")
    wait_idle(page)
    assert page.locator(CHARTS).count() == n
