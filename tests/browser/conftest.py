"""One app server and one Chromium per test session, shared by every browser test."""
import pytest

from tests.browser.harness import App, launch


@pytest.fixture(scope="session")
def app_server(embedded_lm):  # embedded_lm: the model is converted before the server starts
    app = App()
    yield app
    app.stop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(180_000)
    yield pg
    ctx.close()
