"""AppTest: every registered page renders without an exception, on the embedded and the tiny model."""
import re

import pytest
from streamlit.testing.v1 import AppTest

from ui.frame import nav
from ui.frame.html import WJ

PAGES = [p.path for p in nav.available()]


def run_page(path: str, model: str = "embedded", timeout: int = 240, **query) -> AppTest:
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=timeout)
    at.query_params["model"] = model
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    # Always switch, even to the first page: AppTest then keeps requesting the navigation page on every
    # rerun. Otherwise it reruns the page it finished on, and because a pages/ folder sits beside app.py
    # (legacy multipage layout) that runs the page file alone, without app.py and its sidebar.
    at.switch_page(path)
    at.run()
    return at


def shown(markdown: str) -> str:
    """The text a reader sees of markdown written with ui.frame.html.md_escape: escapes resolved, word joiners gone."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", str(markdown)).replace(WJ, "")


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.exception]


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_on_embedded_model(path, embedded_lm):
    at = run_page(path, max_new_tokens="8")
    assert not errors(at), errors(at)
    assert at.title, "page has no title"


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_on_gemma(path, gemma_lm):
    """Every page on Gemma 3 270M (sliding-window layers, a 262k vocabulary); the browser test keeps its special
    views (tests/browser/test_gemma.py)."""
    at = run_page(path, model="gemma3-270m", max_new_tokens="2", temperature="0")
    assert not errors(at), errors(at)
    assert not [e.value for e in at.error if "Something went wrong" in str(e.value)]
    assert at.title, "page has no title"
    assert at.query_params.get("model") in ("gemma3-270m", ["gemma3-270m"]), at.query_params  # no fall-back


@pytest.mark.parametrize("path", PAGES)
def test_page_renders_on_tiny_model(path):
    at = run_page(path, model="tiny-random", max_new_tokens="6")
    assert not errors(at), errors(at)
