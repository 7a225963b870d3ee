"""Screenshots of every page at 1366x768 (a classroom projector), for docs/screenshots/ and the README.

    python3 scripts/screenshots.py [page ...]      # all pages when none named; needs Chromium (scripts/install.sh --test)

For each page: the first screen exactly as a projector shows it (<page>.png, 1366x768) and the whole page
(<page>-full.png). The race page is shown after pressing Start; the serving page before connecting (it needs a
server you name). Greedy decoding and few new tokens, so the pictures are reproducible.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.browser.harness import App, launch, wait_idle  # noqa: E402
from ui.frame import nav  # noqa: E402

OUT = ROOT / "docs" / "screenshots"
SIZE = {"width": 1366, "height": 768}


def shoot(page, name: str) -> None:
    page.wait_for_timeout(1500)  # charts and tables draw after the run ends
    page.screenshot(path=str(OUT / f"{name}.png"))
    height = page.evaluate("() => { const m = document.querySelector('[data-testid=\"stMain\"]') || document.body;"
                           " return Math.max(m.scrollHeight, document.body.scrollHeight); }")
    page.set_viewport_size({"width": SIZE["width"], "height": min(9000, max(SIZE["height"], height + 40))})
    page.wait_for_timeout(1500)
    page.screenshot(path=str(OUT / f"{name}-full.png"), full_page=True)
    page.set_viewport_size(SIZE)


def main(names: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    specs = [s for s in nav.available() if not names or (s.url or "loop") in names]
    app = App()
    try:
        with sync_playwright() as p:
            browser = launch(p)
            page = browser.new_context(viewport=SIZE).new_page()
            page.set_default_timeout(300_000)
            for spec in specs:
                name = spec.url or "loop"
                path = "" if spec == nav.PAGES[0] else spec.url  # the home page lives at "/" ("/loop" is not a page)
                page.goto(f"{app.url}/{path}?temperature=0&max_new_tokens=8")
                wait_idle(page, timeout=300)
                if name == "speculative":
                    page.get_by_role("button", name="Start the race").click()
                    page.wait_for_function("() => document.body.innerText.includes('Measured speedup')",
                                           timeout=600_000)
                    wait_idle(page, timeout=300)
                shoot(page, name)
                print(f"{name}: {OUT / (name + '.png')}")
            browser.close()
    finally:
        app.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
