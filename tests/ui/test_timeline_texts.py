"""The prefill-vs-decode page's sentences follow its measurements and its device: the floor sentence from the pace
measured beside the step (a step below its floor explained as the two-models page does, never as overhead), the
regime from numbers that are medians of at least 5 runs, and nothing made into a lesson from runs that disagree."""
from engine.timeline import experiment as T
from engine.timeline import roofline as R
from engine.timeline.profile import Regime, StepProfile
from ui.frame.lessons import lesson
from ui.timeline import view as V


def sp(m, lo=None, hi=None, n=5):
    return T.Spread(m, m if lo is None else lo, m if hi is None else hi, n)


def check(device, step_ms, floor_ms, n=5, step_hi=None):
    return R.FloorCheck(device, 538_000_000, 513.0, sp(step_ms, hi=step_hi, n=n), sp(538e6 / floor_ms / 1e6, n=n),
                        sp(floor_ms, n=n))


def test_a_step_below_its_floor_is_explained_with_the_two_models_pages_words():
    """The audit's case: a 69 ms step against a 126.5 ms floor read "uses 183% of the measured bandwidth: the rest
    goes to overheads"."""
    text, is_lesson = V.floor_text(check("cpu", 69.0, 126.5))
    assert is_lesson and lesson("timeline", "below floor") in text and "overheads" not in text
    assert "183%" not in text and "69.00 ms" in text and "126.50 ms" in text


def test_the_floor_sentence_follows_the_device_and_the_pace():
    gpu, _ = V.floor_text(check("cuda:0", 22.4, 0.09))  # eager decode on an H200: 0.4% of its floor's pace
    assert "0.4%" in gpu and "kernels" in gpu and "CUDA graph" in gpu and "server" not in gpu
    cpu, _ = V.floor_text(check("cpu", 60.0, 20.0))
    assert "33%" in cpu and "overheads" in cpu and "GPU" not in cpu
    near, _ = V.floor_text(check("cuda:0", 0.15, 0.10))
    assert "67%" in near and "close to it" in near and "launch" not in near
    for text in (gpu, cpu, near):
        assert "range" in text and "n=5" in text  # every figure with its spread and count


def test_runs_that_disagree_or_are_too_few_make_no_floor_lesson():
    noisy, is_lesson = V.floor_text(check("cuda:0", 20.0, 0.1, step_hi=59.2))  # two repeats, 19.3 and 59.2 ms
    assert not is_lesson and "differ by 3.0" in noisy and "Measure again" in noisy and "kernels" not in noisy
    assert "(20 to 59.2 ms)" in noisy and "The decode step:" in noisy and "e+" not in noisy
    few, is_lesson = V.floor_text(check("cpu", 60.0, 20.0, n=2))
    assert not is_lesson and "only 2 run(s)" in few


def _step(plain, mode="eager"):
    return StepProfile("decode", mode, "cuda", 1, 10, 25.0, plain.median, 400, 2.0, (), (), mode == "compiled",
                       plain)


def test_a_regime_is_named_with_its_spread_and_not_at_all_from_runs_that_disagree():
    probe = sp(4000.0)  # GB/s, measured beside the step
    verdict = Regime("launch/dispatch-bound", "the step runs at 0.4% of its floor's pace")
    good = V.regime_text([(_step(sp(22.4, 21.9, 23.0)), verdict)], "cuda:0", probe)
    assert "launch/dispatch-bound" in good and "range 21.90 to 23.00, n=5" in good
    bad = V.regime_text([(_step(sp(22.4, 19.3, 59.2)), verdict)], "cuda:0", probe)
    assert "launch/dispatch-bound" not in bad and "not named" in bad and "3.1" in bad
    few = V.regime_text([(_step(sp(22.4, 21.9, 23.0, n=2)), verdict)], "cuda:0", probe)
    assert "not named" in few and "only 2 run(s)" in few


def test_compiled_against_eager_compares_counts_always_and_times_only_when_both_are_steady():
    probe = sp(4.0)
    verdict = Regime("bandwidth-bound", "close to its floor")
    steady = V.regime_text([(_step(sp(22.4, 21.9, 23.0)), verdict), (_step(sp(2.4, 2.3, 2.5), "compiled"), verdict)],
                           "cpu", probe)
    assert "runs **400** kernels instead of 400 and takes 2.40 ms instead of 22.40 ms" in steady
    noisy = V.regime_text([(_step(sp(22.4, 10.0, 23.0)), verdict), (_step(sp(2.4, 2.3, 2.5), "compiled"), verdict)],
                          "cpu", probe)
    assert "instead of 400 (their times are too noisy" in noisy and "22.40 ms untraced" not in noisy


def test_a_noisy_bandwidth_names_no_regime():
    verdict = Regime("bandwidth-bound", "close to its floor")
    text = V.regime_text([(_step(sp(22.4, 21.9, 23.0)), verdict)], "cpu", sp(4.0, 1.2, 4.4))
    assert "not named" in text and "The bandwidth probe: two runs differ by 3.7" in text and "GB/s" in text
