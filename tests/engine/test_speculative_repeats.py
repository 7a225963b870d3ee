"""A race a lesson can stand on (engine.speculative.repeats): the prefill both lanes pay never decides it, identical
work timed more than 1.5x apart makes it noise, its figures are medians of 5 runs (ILE_RACE_REPEATS) after a
warm-up race, and the command line warms up and repeats as the page does."""
import json
import math

import pytest
import torch

from engine.core.prompt import encode_prompt
from engine.core.sampling import SamplingSettings
from engine.measure import noise
from engine.speculative import repeats as R
from engine.speculative.records import SpecRun
from tests.spec_runs import spec_run
from ui.speculative import view as race_view


def _with(run: SpecRun, plain_prefill: float, spec_prefill: float, scale_plain: float = 1.0,
          scale_spec: float = 1.0) -> SpecRun:
    """``run`` with these prefill times and its decode times scaled (as a busier or quieter moment does)."""
    rounds = tuple(r.__class__(**{**r.__dict__, "verify_seconds": r.verify_seconds * scale_spec,
                                  "draft_seconds": r.draft_seconds * scale_spec}) for r in run.rounds)
    plain = (plain_prefill,) + tuple(s * scale_plain for s in run.plain_step_seconds[1:])
    return SpecRun(**{**run.__dict__, "plain_step_seconds": plain, "spec_prefill_seconds": spec_prefill,
                      "rounds": rounds})


def _quiet() -> noise.Calibration:
    return noise.Calibration(0.0, 1.0, 0.01, 0.01, 0.01, 0.0, 0.1)


# The race of issue 52: speculation slower decode only (about 0.73x), but the plain lane's prefill timed 2,630 ms
# and the speculative lane's 723 ms: one race with those clocks read 1.22x "as fast" on the wall clock.
BASE = spec_run([(8, 1, 0.002)] * 16, step=0.05, k=8)
SLOW_SPEC = _with(BASE, 2.630, 0.723, scale_spec=2.6)
GOOD = spec_run([(4, 3, 0.002)] * 8, step=0.05, k=4)  # 4 tokens per round: about 3x faster decode only


def test_the_issue_race_read_as_a_win_on_its_own_wall_clock():
    """The premise: the old headline (each lane's own prefill) turned this loss into a win."""
    assert SLOW_SPEC.decode_speedup < 1.0 < SLOW_SPEC.speedup


def test_a_prefill_pair_far_apart_makes_the_race_noise_not_a_win():
    series = R.RaceRepeats((SLOW_SPEC,) * R.LESSON_RUNS)
    assert series.is_noise and any("prefill is the same work" in f and "3.6x apart" in f for f in series.flags)
    result = race_view.judge(series, _quiet())
    box, text, _ = race_view.verdict(result)
    assert "Noise, not a result" in text and "as fast" not in text and "slower" not in text
    assert "3.6x apart" in text and race_view.flags_apart(result) == ()  # said once, in the verdict


def test_the_shared_prefill_cannot_decide_the_wall_clock():
    """One prefill time for both lanes: the wall-clock speedup follows the decode, whichever lane's prefill the
    machine slowed, and equals the speedup both lanes would show with equal prefills."""
    plain_slow = R.RaceRepeats((_with(BASE, 2.630, 0.723, scale_spec=2.6),) * 5)
    spec_slow = R.RaceRepeats((_with(BASE, 0.723, 2.630, scale_spec=2.6),) * 5)
    assert plain_slow.speedup.median == pytest.approx(spec_slow.speedup.median)
    assert plain_slow.speedup.median < 1.0  # decode was slower: so is the wall clock once the prefill is shared
    p = plain_slow.shared_prefill_seconds
    equal = _with(BASE, p, p, scale_spec=2.6)
    assert plain_slow.speedup.median == pytest.approx(equal.speedup)


def test_a_quiet_race_is_a_lesson_with_its_median_and_spread():
    runs = tuple(_with(GOOD, 0.5, 0.52, scale_spec=s) for s in (1.2, 1.3, 1.4, 1.25, 1.35))
    series = R.RaceRepeats(runs)
    assert not series.flags and not series.is_noise
    decode = [r.decode_speedup for r in runs]
    assert series.decode_speedup.median == pytest.approx(sorted(decode)[2])
    assert (series.decode_speedup.lo, series.decode_speedup.hi) == (min(decode), max(decode))
    assert series.shown is runs[[r.decode_speedup for r in runs].index(sorted(decode)[2])]  # the median run
    result = race_view.judge(series, _quiet())
    box, text, _ = race_view.verdict(result)
    assert box == "success" and f"{series.decode_speedup.median:.2f}x" in text and "median of 5 runs" in text
    assert f"{series.decode_speedup.lo:.2f}x to {series.decode_speedup.hi:.2f}x" in text


def test_one_lane_timed_far_apart_over_its_runs_is_noise():
    runs = tuple(_with(GOOD, 0.5, 0.5, scale_plain=s, scale_spec=1.3) for s in (1.0, 1.0, 1.7, 1.0, 1.0))
    series = R.RaceRepeats(runs)
    assert series.is_noise and any(f.startswith("The plain lane did the same work") for f in series.flags)


def test_fewer_runs_than_a_lesson_needs_are_flagged():
    series = R.RaceRepeats((_with(GOOD, 0.5, 0.5, scale_spec=1.3),) * (R.LESSON_RUNS - 1))
    assert series.is_noise and any("at least 5" in f for f in series.flags)


def test_disagreement_is_the_ratio_above_its_threshold_only():
    assert noise.DISAGREE == 1.5
    assert noise.disagreement(1.0, 1.5) == 0.0 and noise.disagreement(2.0, 1.0) == 2.0
    assert noise.disagreement(float("nan"), 1.0) == 0.0 and noise.disagreement(0.0, 1.0) == 0.0


def test_race_repeats_warms_up_then_measures_every_run(tiny_lm, monkeypatch):
    """A warm-up race of at most WARM_UP_TOKENS, then ILE_RACE_REPEATS full races; greedy, so every run writes plain
    greedy's tokens (float32)."""
    calls = []
    real = R.race
    monkeypatch.setattr(R, "race", lambda *a, **kw: calls.append(a[5]) or real(*a, **kw))
    ids = list(encode_prompt(tiny_lm.tokenizer, "the cat sat on the mat, the cat sat on the", False).ids)
    series = R.race_repeats(tiny_lm, ids, "lookup", 3, SamplingSettings(), 24, 0)
    n = R.default_repeats()
    assert calls == [R.WARM_UP_TOKENS] + [24] * n
    assert series.n == n and all(r.identical for r in series.runs)
    assert len({r.spec_ids for r in series.runs}) == 1
    assert math.isfinite(series.shared_prefill_seconds) and series.shown in series.runs


def test_the_race_command_warms_up_and_reports_medians(monkeypatch, capsys):
    """`python -m engine race` ran one cold race; now it runs the page's warm-up and ILE_RACE_REPEATS races and writes
    their medians, spread and noise flags beside the median run."""
    from engine.__main__ import main

    calls = []
    real = R.race
    monkeypatch.setattr(R, "race", lambda *a, **kw: calls.append(a[5]) or real(*a, **kw))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["race", "--model", "tiny-random", "--json", "--prompt", "the cat sat on the mat, the cat sat on",
                     "--drafter", "lookup", "--k", "3", "--max-new-tokens", "20"]) == 0
    finally:
        torch.set_num_threads(before)
    d = json.loads(capsys.readouterr().out)
    n = R.default_repeats()
    assert calls == [R.WARM_UP_TOKENS] + [20] * n
    rep = d["repeats"]
    assert rep["n"] == n and rep["warmed_up"] and len(rep["decode_speedup"]["values"]) == n
    assert rep["decode_speedup"]["lo"] <= rep["decode_speedup"]["median"] <= rep["decode_speedup"]["hi"]
    assert rep["noise"] == bool(rep["flags"]) and set(rep["flags"]) <= set(d["flags"])
    assert d["identical_output"] is True


def test_a_slow_machine_may_time_fewer_races_and_is_told_they_are_too_few(tiny_lm, monkeypatch):
    monkeypatch.delenv("ILE_RACE_REPEATS", raising=False)
    assert R.default_repeats() == R.LESSON_RUNS == 5
    monkeypatch.setenv("ILE_RACE_REPEATS", "2")
    calls = []
    real = R.race
    monkeypatch.setattr(R, "race", lambda *a, **kw: calls.append(a[5]) or real(*a, **kw))
    ids = list(encode_prompt(tiny_lm.tokenizer, "the cat sat on the mat, the cat sat on the", False).ids)
    series = R.race_repeats(tiny_lm, ids, "lookup", 3, SamplingSettings(), 8, 0)
    assert calls == [8, 8, 8] and series.n == 2  # the warm-up is cut to the tokens asked for
    assert series.is_noise and any("at least 5" in f for f in series.flags)


def test_the_race_command_refuses_no_repeats(capsys):
    from engine.__main__ import main

    with pytest.raises(SystemExit) as refused:  # argparse refuses it before any model loads
        main(["race", "--model", "tiny-random", "--prompt", "hi", "--repeats", "0"])
    assert refused.value.code == 2 and "--repeats" in capsys.readouterr().err
