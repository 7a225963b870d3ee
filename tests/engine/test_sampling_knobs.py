"""A sampling knob is declared once, in engine.core.sampling.SamplingSettings (its default and its range): the
record clamps it into that range, and a saved run's ``settings`` are checked against the same declaration (every
knob present, within its range, no other name) before the run is trusted. A planted knob shows both follow."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
from jsonschema import Draft202012Validator

from engine.core.sampling import SamplingSettings, knob
from engine.record import format as F


@dataclass(frozen=True)
class WithTypicalP(SamplingSettings):
    typical_p: float = knob(1.0, 0.0, 1.0)  # a planted fifth knob: 1 = off


def test_a_planted_knob_is_clamped_into_its_declared_range():
    s = WithTypicalP(temperature=50.0, top_k=-3, typical_p=7.0).clamp()
    assert isinstance(s, WithTypicalP) and (s.temperature, s.top_k, s.typical_p) == (10.0, 0, 1.0)
    with pytest.raises(ValueError, match="typical_p is not a number"):
        WithTypicalP(typical_p=float("nan"))


def test_a_planted_knob_is_in_the_saved_runs_schema_and_checked():
    check = Draft202012Validator(F.settings_schema(WithTypicalP)).is_valid
    good = {"temperature": 0.7, "top_k": 50, "top_p": 0.95, "min_p": 0.0, "typical_p": 0.9}
    assert check(good)
    assert not check({k: v for k, v in good.items() if k != "typical_p"})  # every knob present
    assert not check({**good, "typical_p": 1.5})  # within its range
    assert not check({**good, "top_k": 2.5})  # an int knob takes whole numbers
    assert not check({**good, "other_p": 0.1})  # no other name


def test_the_saved_run_checks_the_records_own_knobs():
    assert F.schema()["$defs"]["settings"] == F.settings_schema(SamplingSettings)
    assert F.settings_schema(SamplingSettings)["required"] == ["temperature", "top_k", "top_p", "min_p"]


@pytest.mark.parametrize("settings, words", [
    ({"temperature": 0.0, "top_k": 0, "top_p": 1.0}, "'min_p' is a required property"),
    ({"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0}, "('typical_p')"),
    ({"temperature": 11.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}, "out of bounds"),
])
def test_a_saved_run_with_other_settings_is_refused_in_one_line(tiny_lm, settings, words):
    from engine.core.trace import run_trace
    from engine.record import build
    from tests.engine.test_record import machine_of

    tr = run_trace(tiny_lm, "hello", SamplingSettings(), max_new_tokens=2, seed=0)
    rec = copy.deepcopy(build.trace_record(tr, tiny_lm.tokenizer, build.model_identity(tiny_lm), machine_of(tiny_lm),
                                           "test"))
    rec["trace"]["settings"] = settings
    with pytest.raises(F.RecordError) as exc:
        F.load(F.dumps(rec))
    assert words in str(exc.value) and "trace/settings" in str(exc.value) and "\n" not in str(exc.value)
