"""Real browser: a fresh server whose FIRST visitor arrives on a deep link (a tab reconnecting after a restart,
a shared link opened first). Streamlit's legacy pages/ router handles that one run; the page must still show
with the shared sidebar and no "Page not found" dialog."""
from tests.browser.harness import App, assert_no_error, wait_idle
from ui import nav

URL = next(p.url for p in nav.PAGES if p.path == "pages/kv_cache.py")


def test_first_visit_of_a_fresh_server_on_a_deep_link(embedded_lm, browser):
    app = App()
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = ctx.new_page()
        page.set_default_timeout(180_000)
        page.goto(f"{app.url}/{URL}?max_new_tokens=2")
        wait_idle(page, timeout=300)
        assert_no_error(page)
        body = page.inner_text("body")
        assert "Page not found" not in body and "does not seem to exist" not in body
        assert "KV cache" in page.locator("h1").first.inner_text()
        assert page.get_by_role("textbox", name="Prompt").is_visible()  # the shared sidebar ran too
        assert page.url.split("?")[0].endswith(f"/{URL}")
        # a second visitor (the legacy mode is now off for the process) lands on another page directly
        other = ctx.new_page()
        other.goto(f"{app.url}/tokenization?max_new_tokens=2")
        wait_idle(other, timeout=300)
        assert "Page not found" not in other.inner_text("body")
        assert "Tokeni" in other.locator("h1").first.inner_text()
    finally:
        ctx.close()
        app.stop()
