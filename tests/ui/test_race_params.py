"""The race samples with the sidebar's filters, min-p included (it once took temperature, top-k and top-p only)."""
from engine.core.loaded import ModelRef
from ui.speculative.runs import RaceParams


def _params(temperature: float, min_p: float) -> RaceParams:
    return RaceParams(ModelRef("tiny-random"), "a prompt", True, "lookup", 4, temperature, 40, 0.9, 0, 16,
                      min_p=min_p)


def test_a_sampled_race_uses_min_p_and_a_greedy_one_uses_no_filter():
    s = _params(0.8, 0.2).settings
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (0.8, 40, 0.9, 0.2)
    g = _params(0.0, 0.2).settings
    assert (g.top_k, g.top_p, g.min_p) == (0, 1.0, 0.0)
    assert _params(0.8, 0.2) != _params(0.8, 0.0)  # a kept race is not reused for another min-p
