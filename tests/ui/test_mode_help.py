"""The engine selector's help says how a class's answers run from the class batcher's own decision."""
from __future__ import annotations

import pytest

from engine.core.compiled import ModeError, to_mode
from engine.jobs.classbatch import group, how_served
from ui.frame.sidebar import mode_help


def _models(tiny_lm):
    out = [tiny_lm]
    try:
        out.append(to_mode(tiny_lm, "compiled"))  # compiles on first use only: building it is instant
    except ModeError:
        pass  # no C++ compiler here: the eager model still checks the rule
    return out


def test_the_help_follows_the_batchers_decision_in_each_mode(tiny_lm, monkeypatch):
    monkeypatch.delenv("ILE_BATCHING", raising=False)
    for lm in _models(tiny_lm):
        text = mode_help(lm)
        assert how_served(lm) in text
        assert ("one request at a time" in text) == (group(lm) is None), (lm.ref, text)
        assert "batches" not in text  # the old sentence: "batches ... run eager in both modes"


def test_batching_off_is_said_whatever_the_mode(tiny_lm):
    assert "batching is off" in how_served(tiny_lm, batching=False)
    assert "one batch" in how_served(tiny_lm, batching=True) and group(tiny_lm) is not None


@pytest.mark.parametrize("value", ["off", "0"])
def test_the_setting_turns_batching_off(tiny_lm, monkeypatch, value):
    monkeypatch.setenv("ILE_BATCHING", value)
    assert "batching is off" in how_served(tiny_lm)
