"""Real browser on Gemma 3 270M (every page on it renders: tests/app/test_pages.py), the views that are special to
it: a sliding layer beside a global one past the 512-token window, the KV cache measured past the
window, and the two-models page. Pictures at 1366x768 (a projector's first screen) go to docs/screenshots/."""
import pytest

from tests.browser.harness import ROOT, assert_no_error, new_tab, screenshots_wanted, wait_idle, wait_text

DOCS = ROOT / "docs" / "screenshots"
SIZE = {"width": 1366, "height": 768}


@pytest.fixture(scope="module")
def gemma_installed():
    from engine.models import catalog, packaged

    if not packaged.installed(catalog.row(catalog.GEMMA)) or not packaged.is_converted(catalog.row(catalog.GEMMA)):
        pytest.skip("Gemma 3 270M is not installed and prepared (scripts/install.sh does both)")


def shot(page, locator, name: str) -> None:
    """The projector's view with ``locator`` at its top (pictures are never asserted)."""
    if not screenshots_wanted():
        return
    locator.scroll_into_view_if_needed()
    page.evaluate("(el) => el.scrollIntoView({block: 'start'})", locator.element_handle())
    page.wait_for_timeout(1500)  # charts and tables draw after scrolling
    DOCS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS / f"{name}.png"))


def test_gemmas_special_views(app_server, tabs, gemma_installed):
    page = new_tab(tabs, SIZE, timeout_s=300)
    try:
        # attention: a sliding-window layer beside a global one, past the window
        page.goto(f"{app_server.url}/attention?model=gemma3-270m&max_new_tokens=2&temperature=0")
        wait_idle(page, timeout=300)
        page.get_by_text("Run a 600-token prompt and record both layers").click()
        wait_text(page, "Layer 0: attention on keys 512+ back", "Layer 5: attention on keys 512+ back")
        wait_idle(page, timeout=300)
        assert_no_error(page)
        page.locator('[data-testid="stPlotlyChart"]').last.wait_for(state="attached")
        shot(page, page.get_by_role("heading", name="Local and global layers past the window"),
             "attention-gemma-local-global")

        # KV cache: both caches measured past the window
        page.goto(f"{app_server.url}/kv_cache?model=gemma3-270m&max_new_tokens=2&temperature=0")
        wait_idle(page, timeout=300)
        wait_text(page, "6. Past the sliding window")
        assert_no_error(page)
        assert "(measured, = formula)" in page.inner_text("body") or page.locator("canvas").count() > 0
        shot(page, page.get_by_role("heading", name="6. Past the sliding window", exact=False),
             "kv-cache-gemma-past-window")

        # the two models side by side
        page.goto(f"{app_server.url}/compare?max_new_tokens=2&temperature=0")
        wait_idle(page, timeout=300)
        wait_text(page, "5. The same prompt, the next token")
        assert_no_error(page)
        shot(page, page.get_by_role("heading", name="1. The architecture facts", exact=False), "compare")
        shot(page, page.get_by_role("heading", name="3. KV cache", exact=False), "compare-kv")
        shot(page, page.get_by_role("heading", name="4. One decode step", exact=False), "compare-decode")
    finally:
        page.close()
