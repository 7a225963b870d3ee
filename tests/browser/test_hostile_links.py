"""Real browser: hostile shared links give short messages with user text shown literally, an
unexpected error shows no traceback or server path, and a nested path is not a blank page."""
import urllib.parse

import pytest

from tests.browser.harness import ROOT, App, assert_no_error, new_tab, screenshot, wait_idle

LINK = "[official instructions](https://example.invalid/login)"


def _sidebar(page) -> str:
    return page.inner_text('[data-testid="stSidebar"]')


def test_markdown_in_a_model_name_is_shown_as_text(app_server, page):
    page.goto(f"{app_server.url}/?{urllib.parse.urlencode(dict(model=LINK, max_new_tokens=2))}")
    wait_idle(page)
    assert_no_error(page)
    assert page.locator('a[href*="example.invalid"]').count() == 0
    assert LINK in _sidebar(page).replace("\u2060", "")  # an invisible word joiner keeps the URL from linking
    screenshot(page, "hostile-markdown-name")


def test_a_model_name_over_255_bytes_gives_a_message_without_paths(app_server, page):
    page.goto(f"{app_server.url}/?model={'a' * 256}&max_new_tokens=2")
    wait_idle(page)
    assert_no_error(page)
    body = page.inner_text("body")
    assert "too long" in _sidebar(page)
    assert str(ROOT) not in body and "site-packages" not in body and "Errno" not in body
    assert page.locator("h1").first.inner_text().startswith("The loop")


@pytest.mark.xfail(strict=True, reason="Streamlit 1.67 serves index.html for /loop/extra, whose relative assets "
                   "(./static/js/...) then resolve under /loop/ and are answered with index.html again: not fixed")
def test_a_nested_path_is_not_a_blank_page(app_server, page):
    page.goto(f"{app_server.url}/loop/extra?max_new_tokens=2")
    wait_idle(page, timeout=5)  # a working page shows its app frame within a second or two
    assert_no_error(page)
    main = page.inner_text('[data-testid="stMain"]') if page.locator('[data-testid="stMain"]').count() else ""
    body = page.inner_text("body")
    assert main.strip() or "not found" in body.lower(), f"blank page:\n{body[:500]}"
    screenshot(page, "hostile-nested-path")


def test_an_unexpected_error_shows_no_traceback_or_server_path(tabs):
    app = App("tests/browser/apps/fault.py")
    page = new_tab(tabs, {"width": 1366, "height": 768})
    try:
        page.goto(app.url)
        wait_idle(page, timeout=300)
        body = page.inner_text("body")
        assert "Fault test" in body  # the script ran
        assert "Something went wrong on this page" in body  # the page's own short message
        for leak in ("Traceback", str(ROOT), "secret_page", "secret_module", "RuntimeError", "OSError"):
            assert leak not in body, f"{leak!r} shown in the browser:\n{body[:1500]}"
        screenshot(page, "hostile-error-hidden")
    finally:
        page.close()
        app.stop()
    log = open(app.log.name).read()
    assert "secret_page" in log and "secret_module" in log  # the details are in the server log
