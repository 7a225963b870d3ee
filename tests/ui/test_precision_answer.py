"""The precision answer is written from medians of at least 5 alternating repeats, with their range; a speedup from
fewer repeats, or from two repeats more than 1.5x apart, is never made into a verdict (on a GPU a 2-repeat median of
19.3 and 59.2 ms once read "bfloat16 runs at 0.53x of float32" where the decode benchmark measured 0.99x)."""
from engine.measure.spread import Spread
from engine.precision import experiment as P
from ui.precision.sections import answer_text

AGREE = P.Agreement(10, 1.0, 0.0, 0.0)


def row(precision, wbytes, lo, med, hi, n):
    return P.PrecisionRow(precision, "float32", wbytes, 1.0, Spread(5.0, 5.0, 5.0, n), Spread(med, lo, hi, n), (1,),
                          "x", 1, AGREE)


def comparison(bf16):
    return P.PrecisionComparison((row("float32", 538, 19.8, 20.0, 20.5, 5), bf16), "float32", 4.0, 8, 16,
                                 bf16.decode_ms.n, 10, 2)


def test_a_speedup_is_a_verdict_with_its_spread():
    text = answer_text(comparison(row("bfloat16", 269, 19.9, 20.2, 20.6, 5)), "cuda:0")
    assert "**0.99\u00d7**" in text and "range 19.90 to 20.60, n=5" in text and "not a lesson" not in text


def test_a_noisy_or_short_comparison_makes_no_verdict():
    noisy = answer_text(comparison(row("bfloat16", 269, 19.3, 20.0, 59.2, 5)), "cuda:0")
    assert "not a lesson yet" in noisy and "differ by 3.1" in noisy and "\u00d7** as fast" not in noisy
    short = answer_text(comparison(row("bfloat16", 269, 19.3, 39.25, 59.2, 2)), "cuda:0")
    assert "not a lesson yet" in short and "only 2 run(s)" in short and "0.51" not in short


def test_the_gpu_answer_follows_the_engine_mode():
    """Eager on a GPU, the answer tells of launches and suggests the compiled engine; compiled, it must not."""
    cmp = comparison(row("bfloat16", 269, 19.9, 20.2, 20.6, 5))
    assert "Switch the sidebar's engine to **compiled**" in answer_text(cmp, "cuda:0", "eager")
    compiled = answer_text(cmp, "cuda:0", "compiled")
    assert "Switch the sidebar" not in compiled and "one CUDA graph" in compiled
    assert "CUDA" not in answer_text(cmp, "cpu", "compiled")


def test_the_measured_bars_label_sits_inside_its_bar_not_on_its_whisker():
    """The whisker (the repeats' range) rises from the top of the measured bar: a label written above the bar
    covered it (walkthrough 2026-11-29, "60.1 ms" over its whisker)."""
    from ui.precision.figures import decode_vs_floor

    fig = decode_vs_floor(comparison(row("bfloat16", 269, 19.9, 20.2, 26.6, 5)))
    measured = [t for t in fig.data if t.error_y is not None and t.error_y.array is not None]
    assert measured and all(t.textposition == "inside" for t in measured)
