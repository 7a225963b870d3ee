"""The grading rules of the "Try this" questions: each measurable question is graded right on synthetic measured
runs made to come out each way, and a run whose spread straddles a boundary grades nothing."""
import pytest

from engine.predictions import grading as G
from engine.predictions.grading import Outcome


def _around(ms: float, n: int = 8, jitter: float = 0.02) -> list[float]:
    """n steps near ``ms`` (a small, symmetric spread)."""
    return [ms * (1 + jitter * ((i % 3) - 1)) for i in range(n)]


@pytest.mark.parametrize("prefill, step, n, want", [
    (60.0, 30.0, 40, "narrower"),  # a CPU: 40 tokens in 60 ms vs 40 x 30 ms of steps
    (1200.0, 30.0, 40, "as wide"),
    (4000.0, 30.0, 40, "wider"),
])
def test_prefill_vs_decode_each_way(prefill, step, n, want):
    v = G.prefill_vs_decode([prefill], _around(step), n)
    assert v.outcome is Outcome.DECIDED and v.answer == want
    assert v.evidence[-1].unit == "x" and v.evidence[-1].lo <= v.evidence[-1].median <= v.evidence[-1].hi


def test_prefill_vs_decode_noisy_grades_nothing():
    # decode steps from 20 to 60 ms: 40 of them are 800..2400 ms, and a 1,000 ms prefill is within 1.5x of part of
    # that range and not of the rest
    v = G.prefill_vs_decode([1000.0], [20.0, 20.0, 60.0, 60.0, 20.0, 60.0], 40)
    assert v.outcome is Outcome.NOISY and v.answer is None


def test_prefill_vs_decode_not_measured():
    assert G.prefill_vs_decode([10.0], [], 40).outcome is Outcome.NOT_MEASURED


@pytest.mark.parametrize("ttft, tpot, want", [
    ((20.0, 400.0), (30.0, 33.0), "first token"),  # a CPU: prefill grows with the prompt, steps hardly
    ((21.0, 23.0), (8.0, 8.2), "neither"),  # an H200: 20-23 ms from 16 to 4,096 tokens
    ((20.0, 400.0), (10.0, 40.0), "both"),
    ((20.0, 22.0), (10.0, 40.0), "per token"),
])
def test_climbing_curve_each_way(ttft, tpot, want):
    v = G.climbing_curve((_around(ttft[0], 3), _around(ttft[1], 3)), (_around(tpot[0], 3), _around(tpot[1], 3)))
    assert v.answer == want and v.decided


def test_climbing_curve_at_the_edge_is_noisy():
    v = G.climbing_curve(([10.0, 12.0, 14.0], [18.0, 24.0, 30.0]), ([5.0] * 3, [5.0] * 3))
    assert v.outcome is Outcome.NOISY


@pytest.mark.parametrize("f32, half, want", [(40.0, 20.0, "twice"), (40.0, 30.0, "faster"), (40.0, 42.0, "not faster")])
def test_half_precision_each_way(f32, half, want):
    v = G.half_precision(_around(f32, 3), _around(half, 3))
    assert v.answer == want


def test_half_precision_noisy():
    assert G.half_precision([40.0, 40.0, 40.0], [22.0, 26.0, 30.0]).outcome is Outcome.NOISY


@pytest.mark.parametrize("speedup, want", [(1.6, "faster"), (0.7, "slower")])
def test_speculation_each_way(speedup, want):
    assert G.speculation_wins(speedup, 0.1).answer == want


def test_speculation_within_noise_and_other_drafter():
    assert G.speculation_wins(1.03, 0.1).outcome is Outcome.NOISY
    assert G.speculation_wins(0.5, 0.1, drafter_matches=False).outcome is Outcome.NOT_MEASURED


@pytest.mark.parametrize("one, many, want", [(30.0, 33.0, "about t"), (30.0, 90.0, "less"), (30.0, 240.0, "about bt"),
                                             (30.0, 400.0, "more")])
def test_batch_step_each_way(one, many, want):
    assert G.batch_step(_around(one), _around(many), 8).answer == want


def test_batch_step_noisy():
    assert G.batch_step([30.0] * 6, [30.0, 45.0] * 3, 8).outcome is Outcome.NOISY


def test_same_tokens_and_rope():
    assert G.same_tokens([5, 6, 7]).answer == "different"
    assert G.same_tokens([5, 5, 7]).answer == "some"
    assert G.same_tokens([5, 5, 5]).answer == "same"
    assert G.rope_shift(0.12345, 0.12346).answer == "same"
    assert G.rope_shift(0.12345, 0.2).answer == "changes"


def test_every_rule_can_return_only_its_answers():
    """RULES lists each rule's answers: the lesson checker relies on it (a rule returning an unlisted key would be
    a choice no student could pick)."""
    seen = {G.prefill_vs_decode([60.0], _around(30.0), 40).answer, G.prefill_vs_decode([1200.0], _around(30.0), 40).answer,
            G.prefill_vs_decode([4000.0], _around(30.0), 40).answer}
    assert seen == set(G.RULES["prefill_vs_decode"].answers)


def test_band_uses_quartiles_from_four_samples():
    m, lo, hi, n = G.band([1, 2, 3, 4, 100])
    assert (m, n) == (3, 5) and hi < 100 and lo >= 1
    assert G.band([1.0, 5.0]) == (3.0, 1.0, 5.0, 2)


# ------------------------------------------------------------------ from the pages' own records (built synthetic)

import numpy as np  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from engine.batching.records import SweepPoint  # noqa: E402
from engine.measure.spread import Spread  # noqa: E402
from engine.predictions import records as R  # noqa: E402
from engine.timeline.experiment import Sweep, SweepRow, Timeline, TimelineBar  # noqa: E402


def _timeline(prefill_ms, step_ms, prompt=40, steps=8):
    bars = [TimelineBar(0, "prefill", prompt, 0.0, prefill_ms, "a")]
    bars += [TimelineBar(i, "decode", 1, 0.0, step_ms * (1 + 0.01 * (i % 2)), "b") for i in range(1, steps)]
    return Timeline(tuple(bars), prompt, steps, prefill_ms, Spread.of([b.ms for b in bars[1:]]), 0.0, 0.0, 0.0)


def test_timeline_record_graded_each_way():
    assert R.timeline_verdict(_timeline(60.0, 30.0)).answer == "narrower"
    assert R.timeline_verdict(_timeline(1200.0, 30.0)).answer == "as wide"
    assert R.timeline_verdict(_timeline(60.0, 30.0, steps=1)).outcome is Outcome.NOT_MEASURED  # no decode step


def test_sweep_record_graded_each_way():
    def row(n, ttft, tpot):
        return SweepRow(n, Spread(ttft, ttft * 0.97, ttft * 1.03, 3), Spread(tpot, tpot * 0.97, tpot * 1.03, 3))
    cpu = Sweep((row(512, 900.0, 35.0), row(16, 30.0, 30.0)), 6, 3)  # rows in any order
    h200 = Sweep((row(16, 21.0, 8.0), row(4096, 23.0, 8.3)), 6, 3)
    assert R.sweep_verdict(cpu).answer == "first token" and R.sweep_verdict(h200).answer == "neither"
    assert R.sweep_verdict(Sweep((row(16, 21.0, 8.0),), 6, 3)).outcome is Outcome.NOT_MEASURED


def _cmp(f32, half, name="bfloat16"):
    rows = {"float32": SimpleNamespace(precision="float32", decode_ms=Spread(f32, f32 * 0.98, f32 * 1.02, 3)),
            name: SimpleNamespace(precision=name, decode_ms=Spread(half, half * 0.98, half * 1.02, 3))}
    return SimpleNamespace(rows=tuple(rows.values()), row=rows.__getitem__)


def test_precision_record_graded_each_way():
    assert R.precision_verdict(_cmp(40.0, 20.0)).answer == "twice"
    assert R.precision_verdict(_cmp(40.0, 44.0)).answer == "not faster"
    assert R.precision_verdict(_cmp(40.0, 20.0, "float16")).answer == "twice"
    assert R.precision_verdict(_cmp(40.0, 20.0, "int8")).outcome is Outcome.NOT_MEASURED
    assert R.precision_verdict(None).outcome is Outcome.NOT_MEASURED


def test_race_record_graded_only_for_model_self():
    run = SimpleNamespace(measurable=True, speedup=0.7, drafter="model:embedded", model="embedded")
    assert R.race_verdict(run, 0.1).answer == "slower"
    assert R.race_verdict(SimpleNamespace(**{**vars(run), "speedup": 1.5}), 0.1).answer == "faster"
    assert R.race_verdict(SimpleNamespace(**{**vars(run), "drafter": "lookup"}), 0.1).outcome is Outcome.NOT_MEASURED


def test_batch_record_graded_each_way():
    def pt(b, ms):
        return SweepPoint(b, np.array([ms / 1000 * (1 + 0.01 * (i % 3)) for i in range(6)]), 16, 0, 6)
    assert R.batch_verdict([pt(1, 30.0), pt(8, 60.0)]).answer == "less"
    assert R.batch_verdict([pt(1, 30.0), pt(8, 245.0)]).answer == "about bt"
    assert R.batch_verdict([pt(1, 30.0), pt(4, 60.0)]).outcome is Outcome.NOT_MEASURED  # no batch of 8 measured


def test_a_noisy_sweep_grades_nothing():
    """Time to first token 30 -> 55-70 ms: the longest / shortest interval (1.6-2.5x) straddles the 2x line."""
    def row(n, ttft, lo, hi, tpot):
        return SweepRow(n, Spread(ttft, lo, hi, 3), Spread(tpot, tpot * 0.97, tpot * 1.03, 3))
    v = R.sweep_verdict(Sweep((row(16, 30.0, 28.0, 34.0, 30.0), row(512, 62.0, 55.0, 70.0, 31.0)), 6, 3))
    assert v.outcome is Outcome.NOISY and v.answer is None


def _att(first: int, near: int, other: int, m: int = 6):
    """Attention [1, heads, m, m] whose last query reads position 0 in ``first`` heads, its own position in
    ``near`` heads and position 2 in the others (each row a distribution)."""
    import numpy as np

    heads = first + near + other
    att = np.full((1, heads, m, m), 0.1 / (m - 1), dtype=np.float32)
    for h in range(heads):
        top = 0 if h < first else m - 1 if h < first + near else min(2, m - 1)
        att[0, h, -1, :] = 0.1 / (m - 1)
        att[0, h, -1, top] = 0.9
    return att


def test_the_attention_sink_question_graded_each_way():
    assert R.attention_verdict(_att(7, 1, 1)).answer == "first"
    assert R.attention_verdict(_att(1, 7, 1)).answer == "near"
    assert R.attention_verdict(_att(1, 1, 7)).answer == "word"
    tie = R.attention_verdict(_att(4, 4, 1))
    assert tie.outcome is Outcome.UNDECIDED and tie.answer is None  # exact counts that tie: not "too noisy"
    assert R.attention_verdict(_att(1, 1, 1, m=2)).outcome is Outcome.NOT_MEASURED


def test_the_kv_bytes_question_graded_by_the_measured_growth():
    # SmolLM2's shape in float32: 30 layers, 9 query heads, 3 KV heads, 64 values per head, 4 bytes
    shape = dict(layers=30, heads=9, kv_heads=3, head_dim=64, bytes_per_value=4)
    assert R.kv_verdict((46_080,) * 5, **shape).answer == "kv heads"  # 2 x 30 x 3 x 64 x 4
    assert R.kv_verdict((138_240,) * 5, **shape).answer == "query heads"
    assert R.kv_verdict((23_040,) * 5, **shape).answer == "keys only"
    assert R.kv_verdict((1_536,) * 5, **shape).answer == "one layer"
    assert R.kv_verdict((), **shape).outcome is Outcome.NOT_MEASURED
    assert R.kv_verdict((46_080, 999), **shape).outcome is Outcome.UNDECIDED  # the steps disagree: nothing graded
    assert R.kv_verdict((12_345,) * 3, **shape).outcome is Outcome.UNDECIDED  # no formula matches: nothing graded


def test_numbers_that_name_no_choice_are_not_called_noisy():
    from ui.frame import predict
    from ui.frame import questions as Q

    q = next(q for q in Q.all_questions().values() if q.topic == "kv_cache" and q.decider is Q.Decider.MEASURED)
    words = predict.grade_words(q, None, G.Verdict(Outcome.UNDECIDED, None), None)
    assert "name no single choice" in words and "noisy" not in words.lower().replace("not noisy", "")


def test_the_learned_positions_question_graded_each_way():
    assert G.nearer_alike(0.9, 0.2).answer == "more" and G.nearer_alike(0.1, 0.5).answer == "less"
    assert G.nearer_alike(float("nan"), 0.5).outcome is Outcome.NOT_MEASURED
