"""Real browser: the app is offline by default. Every request a page load makes stays on this machine (the tab's
icon, a material icon, was fetched from Google's font host on every load), and the tab's icon is the app's own."""
import base64
from urllib.parse import urlparse

from tests.browser.harness import assert_no_error, new_tab, wait_idle
from ui.frame import nav

SIZE = {"width": 1366, "height": 768}
LOCAL = {"127.0.0.1", "localhost", "::1", "[::1]"}


def test_no_request_leaves_this_machine(app_server, tabs):
    page = new_tab(tabs, SIZE, timeout_s=300)
    outside: list[str] = []

    def record(route):
        url = route.request.url
        if url.startswith(("http", "ws")) and urlparse(url).hostname not in LOCAL:
            outside.append(url)
            return route.abort()  # refused as well as recorded: the test never depends on a network
        return route.continue_()

    page.route("**/*", record)
    try:
        for path in ("/?model=tiny-random&max_new_tokens=2", "/sampling?model=tiny-random&max_new_tokens=2&present=1"):
            page.goto(app_server.url + path)
            wait_idle(page)
            assert_no_error(page)
        icon = page.evaluate("() => [...document.querySelectorAll('link[rel~=icon]')].map(l => l.href)")[-1]
        assert icon.startswith("data:image/svg+xml;base64,"), icon[:80]  # the app's own, inside the page
        assert base64.b64decode(icon.split(",", 1)[1]) == nav.ICON.read_bytes()
        assert outside == [], outside
    finally:
        page.close()
