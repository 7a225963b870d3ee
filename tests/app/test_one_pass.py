"""One analysis per prompt: the sampling and attention pages read per-position predictions, attention weights and
the logit lens from the trace's one analysis pass; opening them after the home page runs no pass at all."""
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.test_pages import errors
from ui import nav


@pytest.mark.parametrize("page", ["pages/sampling.py", "pages/attention.py"])
def test_page_runs_no_second_pass_for_the_prompt(passes, page):
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    for k, v in {"model": "tiny-random", "max_new_tokens": "3", "temperature": "0",
                 "prompt": f"one pass only, please ({page})"}.items():
        at.query_params[k] = v
    at.run()  # the home page: the trace (prefill, decode steps, ONE analysis pass) and its block walk
    assert not errors(at), errors(at)
    home = passes["n"]
    assert home >= 3 + 1
    at.switch_page(page)
    at.run()
    assert not errors(at), errors(at)
    assert passes["n"] == home, f"{page} ran {passes['n'] - home} more forward pass(es) for the same prompt"
