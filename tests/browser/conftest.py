"""One app server and one Chromium per test session, shared by every browser test."""
import pytest

from tests.browser.harness import App, count_runs, launch, new_tab

PAGE_SIZE = {"width": 1400, "height": 900}

KEEPER_URL = "http://127.0.0.1:9/"  # the app's site; port 9 (discard) is never reached: the page is routed


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture(scope="session")
def app_server(embedded_lm, browser):  # embedded_lm: the model is converted before the server starts
    """The app, opened once at its home page: that first run loads the model and ends Streamlit's legacy
    pages/ mode for the process (see app.py), as a person's first visit would."""
    from tests.browser.harness import wait_idle

    app = App()
    ctx = browser.new_context()
    first = ctx.new_page()
    first.goto(app.url + "/?max_new_tokens=2")
    wait_idle(first, timeout=300)
    ctx.close()
    yield app
    app.stop()


@pytest.fixture(scope="session")
def tabs(browser):
    """One browser profile for the tests that act as one person: each test opens its own tab in it (its own
    Streamlit session, as a new tab is). A test that plays several people (a class, tabs at once) opens a profile
    for each instead.

    Tabs of one site share one renderer process in a profile (``launch``), and one blank tab of the app's site
    (http://127.0.0.1, any port: its page is answered by Playwright, no server) stays open all session, so the
    process and the frontend code compiled in it outlive each test's tab: a page load then costs Chromium about
    4 CPU-s instead of 8 on 2 cores. The profile prefers reduced motion, as a person may: no animation frames (the
    running indicator, skeletons) drawn in software while the app computes (about a sixth less Chromium CPU)."""
    ctx = browser.new_context(viewport=PAGE_SIZE, reduced_motion="reduce")
    count_runs(ctx)
    keeper = ctx.new_page()
    keeper.route(KEEPER_URL + "**", lambda route: route.fulfill(body="<!doctype html><title>keeper</title>",
                                                                content_type="text/html"))
    keeper.goto(KEEPER_URL)
    yield ctx
    ctx.close()


@pytest.fixture
def page(tabs):
    pg = new_tab(tabs, PAGE_SIZE)
    yield pg
    pg.close()
