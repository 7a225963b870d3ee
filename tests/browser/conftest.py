"""One app server and one Chromium per test session, shared by every browser test."""
import pytest

from tests.browser.harness import App, launch


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


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(180_000)
    yield pg
    ctx.close()
