"""Cached work for the two-models page, keyed on plain values (model names, texts, lengths); every forward pass
runs on the engine worker. The page compares two models by name, each at the device's default precision in eager
mode (``_model``), whatever the sidebar's precision and mode."""
from __future__ import annotations

from engine.compare import analysis as C
from engine.timeline import experiment as T
from engine.core.sampling import SamplingSettings
from engine.core.loaded import ModelRef
from ui.frame import measured, work
from ui.frame.cache import memo
from ui.frame.models import get_model
from ui.timeline.runs import shared_probe

KV_LENGTHS = (64, 256, 511, 512, 600, 1024)  # measured: past the 512-token window of Gemma 3's sliding layers
KV_DERIVED = (4096, 8192, 32768)  # derived from the per-layer formula (too long to run on a laptop's page)
DECODE_PROMPT = 32  # tokens of context for the timed decode step


def _model(name: str):
    """The model the page names, at the device's default precision, eager."""
    return get_model(ModelRef(name))


def again_key() -> str:
    return "compare_again_decode"


@memo(16)
def facts(a: str, b: str) -> list[C.FactRow]:
    return C.fact_rows(_model(a).info, _model(b).info)


@memo(16)
def params(name: str) -> dict:
    return C.param_split(_model(name).model)


@memo(16)
def kv(name: str, lengths: tuple[int, ...] = KV_LENGTHS) -> list[C.KVPoint]:
    return work.run(C.kv_growth, _model(name), lengths)


@memo(32)
def top5(name: str, text: str) -> C.TopK:
    return work.run(C.next_token_top, _model(name), text)


def facts_info(name: str):
    return _model(name).info


def step_bytes(name: str, context: int) -> C.StepBytes:
    return C.step_bytes(_model(name), context)


def decode(name: str) -> measured.Measured:
    """Measured: one prefill of DECODE_PROMPT tokens then decode steps, timed per stage (greedy sampling)."""
    lm = _model(name)
    ids = T.sweep_prompt(lm, DECODE_PROMPT)
    return measured.measure(("compare_decode", name, tuple(ids)),
                            lambda: work.run(T.stage_breakdown, lm, ids, 3, SamplingSettings(0.0, 0, 1.0)),
                            again=measured.again_pressed(again_key()))


def bandwidth_gb_s(name: str) -> float:
    return shared_probe(str(_model(name).device)).read_gb_s.median
