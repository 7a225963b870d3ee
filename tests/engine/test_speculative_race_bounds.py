"""The round-by-round formula (SpecRun.predicted.rounds) and the race's speedup bounds, on records built
by hand (pure arithmetic, no model)."""
import math

from engine.measure import noise
from engine.speculative.records import SpecRun, expected_speedup
from tests.spec_runs import spec_run


def test_round_by_round_formula_equals_the_paper_when_every_round_drafts_k():
    run = spec_run([(4, 2, 0.004)] * 10)  # every round: 4 drafted at c = 0.025 each
    a, c = run.acceptance_rate, run.c
    assert math.isclose(run.predicted.rounds, expected_speedup(a, 4, c), rel_tol=1e-9)


def test_a_drafter_that_drafts_little_is_not_predicted_slower_than_plain():
    """Prompt lookup on an open prompt: 2 of 20 rounds drafted; the search time of the empty rounds inflates c,
    so thm. 3.8 with k = 4 predicts a loss the run did not have; round by round it predicts about 1x."""
    run = spec_run([(0, 0, 0.0005)] * 18 + [(2, 0, 0.0005)] * 2)
    assert run.predicted.paper < 0.9
    assert 0.95 < run.predicted.rounds <= 1.0
    assert run.drafted_per_round == 0.2 and run.rounds_with_drafts == 2


def test_drafts_cut_by_the_tokens_requested_lower_the_formula():
    full = spec_run([(12, 12, 0.0)] * 2, k=12)
    cut = spec_run([(12, 12, 0.0), (3, 3, 0.0)], k=12)  # the last round could only draft 3 of 12
    assert cut.predicted.rounds < full.predicted.rounds == full.predicted.paper


def test_speedup_check_reads_the_race_bounds():
    assert noise.check_speedup(6.0, 4, 30, 4.5).flags  # above k + 1 = 5
    assert noise.check_speedup(1.3, 4, 0, 1.0).shown == "no gain"


def test_decode_only_speedup_leaves_the_shared_prefill_out():
    """A long prefill both lanes pay pulls the wall clock toward 1x; the decode-only number keeps the rounds'
    own gain, and the round-by-round formula with the measured verify cost predicts it exactly when the
    acceptance rate is 1 (nothing is left to luck)."""
    run = spec_run([(4, 4, 0.0)] * 5, step=0.04)  # 5 tokens per verify pass that costs one plain step
    assert math.isclose(run.decode_speedup, 5.0, rel_tol=1e-9)
    assert math.isclose(run.predicted.as_run, run.decode_speedup, rel_tol=1e-9)
    slow_prefill = SpecRun(**{**run.__dict__, "spec_prefill_seconds": 5.0,
                              "plain_step_seconds": (5.0,) + run.plain_step_seconds[1:]})
    assert slow_prefill.speedup < 1.5 < slow_prefill.decode_speedup == run.decode_speedup
    assert slow_prefill.plain_prefill_share > 0.5 and slow_prefill.spec_prefill_share > 0.9
    one = spec_run([], step=0.04)  # one token: nothing decoded, nothing to compare
    assert math.isnan(one.decode_speedup)


def test_the_predicted_speedups_keep_the_names_saved_runs_use():
    """SpecRun.predicted groups the formula's four steps; a saved race and the race's JSON still name them as
    before (expected_speedup, _measured_verify, _drafted, _as_run), so files written earlier read the same."""
    from engine.record.speculative import race_summary

    run = spec_run([(4, 3, 0.001)] * 4 + [(2, 2, 0.001)])
    p, d, saved = run.predicted, run.to_dict(), race_summary(run)
    assert (d["expected_speedup"], d["expected_speedup_measured_verify"], d["expected_speedup_drafted"],
            d["expected_speedup_as_run"]) == (p.paper, p.measured_verify, p.rounds, p.as_run)
    assert (saved["expected_speedup"], saved["expected_speedup_drafted"], saved["expected_speedup_as_run"]) == \
        (p.paper, p.rounds, p.as_run)
    assert p.paper == expected_speedup(run.acceptance_rate, run.k, run.c)
