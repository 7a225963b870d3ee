"""The two-models page on a server where Gemma 3 270M is not installed (its package hidden from this process):
the install command, in the page's own words, never the "Something went wrong" line."""
import importlib.util

import pytest

import engine.settings as settings
from engine.models import background
from engine.models import catalog
from engine.models.catalog import GEMMA
from tests.app.test_pages import errors, run_page


@pytest.fixture
def no_gemma(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == catalog.row(GEMMA).module
                        else real(name, *a, **k))
    monkeypatch.setenv(settings.PREPARE_GEMMA.name, "1")  # as a served app runs: the background preparation is on
    monkeypatch.setattr(background, "_CURRENT", {})


def test_compare_without_gemma_says_how_to_install_it(no_gemma):
    at = run_page("pages/compare.py", model="tiny-random", max_new_tokens="2")
    at.selectbox(key="compare_b").set_value(GEMMA).run()
    assert not errors(at), errors(at)
    shown = " ".join(w.value for w in at.warning) + " ".join(e.value for e in at.error)
    assert "Something went wrong" not in shown
    assert "not installed" in shown and catalog.row(GEMMA).install in shown
