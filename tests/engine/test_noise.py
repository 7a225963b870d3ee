"""The noise guard: spreads, calibration verdicts and every bound check, each shown to pass and to fail."""
import os
import subprocess
import sys
import time

import pytest

from engine.measure import noise


def test_summarize_median_quartiles_and_wide_spread():
    r = noise.summarize([1.0, 2.0, 3.0, 4.0, 100.0], "x")
    assert (r.median, r.lo, r.hi, r.n) == (3.0, 1.0, 100.0, 5)
    assert r.q1 == 2.0 and r.q3 == 4.0
    assert r.flags and "67%" in r.flags[0]  # IQR 2 of median 3 is wide
    # a tight set is not flagged, a wide one is
    assert noise.summarize([10, 10.1, 9.9, 10.05]).flags == ()
    assert noise.summarize([10, 20, 5, 30, 12]).flags


def test_summarize_empty_is_flagged():
    assert noise.summarize([]).flags and noise.summarize([]).n == 0


def test_speedup_above_k_plus_one_is_impossible():
    bad = noise.check_speedup(17.5, k=4, accepted=30, tokens_per_pass=4.0)
    assert any("Impossible" in f and "k + 1 = 5" in f for f in bad.flags)
    ok = noise.check_speedup(2.4, k=4, accepted=30, tokens_per_pass=3.0)
    assert ok.flags == () and ok.shown == "2.40x" and not ok.no_gain


def test_speedup_with_nothing_accepted_is_no_gain():
    r = noise.check_speedup(1.32, k=4, accepted=0, tokens_per_pass=1.0)
    assert r.no_gain and r.shown == "no gain"
    assert any("no gain, within noise" in f for f in r.flags)
    # a real loss at 0% acceptance is not a gain either, but not an impossible figure
    loss = noise.check_speedup(0.8, k=4, accepted=0, tokens_per_pass=1.0)
    assert loss.no_gain and loss.flags == ()


def test_speedup_beyond_tokens_per_pass_is_noise():
    r = noise.check_speedup(3.0, k=4, accepted=10, tokens_per_pass=1.5, noise=0.1)
    assert any("tokens per target pass" in f for f in r.flags)
    assert noise.check_speedup(1.5, k=4, accepted=10, tokens_per_pass=1.5).flags == ()


def test_speedup_near_one_reads_as_no_gain_only_when_few_tokens_per_pass():
    assert noise.check_speedup(1.04, 4, 3, 1.05).no_gain  # hardly more than one token per pass
    assert not noise.check_speedup(1.4, 4, 8, 1.6).no_gain
    assert not noise.check_speedup(1.08, 4, 24, 4.0).no_gain  # 4 tokens per pass: a real (if small) gain


def test_bigger_batch_faster_per_step_is_flagged():
    s = noise.summarize
    ok = noise.check_batch_steps([(1, s([0.040, 0.041, 0.042])), (8, s([0.060, 0.061, 0.065]))])
    assert ok.flags == ()
    overlap = noise.check_batch_steps([(8, s([0.050, 0.060, 0.070])), (16, s([0.045, 0.055, 0.071]))])
    assert len(overlap.flags) == 1 and "noise" in overlap.flags[0]
    apart = noise.check_batch_steps([(8, s([0.090, 0.095, 0.1])), (16, s([0.050, 0.055, 0.06]))])
    assert "busy" in apart.flags[0]


def test_bigger_batch_with_fewer_tokens_per_second_is_flagged():
    s = noise.summarize
    # the busy laptop's run: 320 ms at batch 8, 7,109 ms at batch 16
    bad = noise.check_batch_throughput([(16, s([7.0, 7.109, 7.2])), (8, s([0.31, 0.32, 0.33])), (1, s([0.1] * 3))])
    assert len(bad.flags) == 1 and bad.flags[0].startswith("Batch 16 gave fewer tokens per second than batch 8")
    # a CPU at its compute limit: throughput flat or a little lower is the machine's real shape, not a flag
    flat = noise.check_batch_throughput([(8, s([0.300, 0.31, 0.32])), (16, s([0.64, 0.66, 0.68]))])
    assert flat.flags == ()
    rising = noise.check_batch_throughput([(1, s([0.06] * 3)), (8, s([0.09] * 3)), (16, s([0.15] * 3))])
    assert rising.flags == ()
    # just past the slack: 16 rows in more than 2 / 0.85 times batch 8's step
    assert noise.check_batch_throughput([(8, s([0.3] * 3)), (16, s([0.72] * 3))]).flags


def test_busier_server_faster_is_flagged():
    assert noise.check_busier_slower([(0, 1.0), (4, 1.5), (12, 2.0)]).flags == ()
    f = noise.check_busier_slower([(0, 1.0), (4, 1.5), (12, 1.45)]).flags
    assert len(f) == 1 and "within noise" in f[0]
    f = noise.check_busier_slower([(0, 1.0), (4, 2.5), (12, 1.2)]).flags
    assert "probably busy" in f[0]


def test_judge_thresholds():
    assert noise.judge(0.01, 0.0105, 0.01, 0.1) == ()
    assert noise.judge(0.01, 0.01, 0.01, 0.9)  # other programs on most of a core
    assert noise.judge(0.01, 0.02, 0.01, None)  # probe twice as slow after
    assert noise.judge(0.03, 0.03, 0.01, 0.0)  # both probes 3x the quietest seen


def test_calibration_flags_a_busy_neighbour():
    """A real busy process beside the measurement: its CPU time shows up as other programs' cores."""
    proc = subprocess.Popen([sys.executable, "-c", "import time\nend=time.time()+20\nwhile time.time()<end: pass"])
    try:
        time.sleep(0.3)
        with noise.calibrated() as cal:
            time.sleep(1.0)  # the measured work: idle here, so only the neighbour's CPU is counted
    finally:
        proc.kill()
        proc.wait()
    c = cal.result
    assert c.other_cores is not None and c.other_cores >= 0.5, c
    assert c.disturbed and noise.BUSY_MESSAGE
    assert "measured at" in c.describe()


def test_calibration_leaves_out_a_lower_priority_neighbour():
    """The same busy process at nice 19 is not counted: it gives its core up to the measurement the moment the
    measurement wants it, and the thread policy leaves it out too (engine.measure.cpu_time). A planted version that
    counts the nice time reads about one core here."""
    if not hasattr(os, "nice"):
        pytest.skip("no nice here")
    proc = subprocess.Popen([sys.executable, "-c", "import os, time\nos.nice(19)\nend=time.time()+20\n"
                             "while time.time()<end: pass"])
    try:
        time.sleep(0.3)
        with noise.calibrated() as cal:
            time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    assert cal.result.other_cores is not None and cal.result.other_cores < 0.4, cal.result


def test_one_summary_type_for_repeats():
    """summarize and Spread.of give the same type (engine.measure.spread.Spread): median and range alike; summarize
    adds the quartiles and the flags."""
    from engine.measure.spread import Spread

    a, b = noise.summarize([1.0, 2.0, 3.0, 4.0, 100.0], "x"), Spread.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert type(a) is type(b) is Spread
    assert (a.median, a.lo, a.hi, a.n) == (b.median, b.lo, b.hi, b.n) == (3.0, 1.0, 100.0, 5)
    assert a.q1 == 2.0 and a.q3 == 4.0 and a.iqr == 2.0 and a.flags and b.flags == ()
    assert a.scaled(2).q3 == 8.0 and a.overlaps(b)


def test_the_serving_records_write_a_spread_as_before():
    from engine.measure.spread import Spread

    assert Spread.of([1.0, 3.0]).range_dict() == {"median": 2.0, "lo": 1.0, "hi": 3.0, "n": 2}
