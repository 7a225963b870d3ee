"""Race figures and replay: legends below the plot (never on the title), the verify-time line labelled in the
legend (not over the bars), and a replay that follows the engine's clocks and draws both lanes every frame."""
from tests.spec_runs import spec_run
from ui.speculative import view as race_view
from ui.frame.figures import progress_lines
from ui.speculative.figures import round_times_bar, rounds_bar


def test_race_legends_sit_below_the_plot():
    run = spec_run([(4, 2, 0.004)] * 6)
    for fig in (progress_lines(run), rounds_bar(run), round_times_bar(run)):
        assert fig.layout.legend.y < 0 and fig.layout.legend.yanchor == "top"
        assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_verify_time_line_is_a_legend_entry_not_a_label_on_the_bars():
    fig = round_times_bar(spec_run([(4, 2, 0.004)] * 6))
    assert not fig.layout.annotations
    assert any("median plain decode step" in (t.name or "") for t in fig.data)


class _Slot:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def html(self, text):
        self.log.append((self.name, text))


def test_replay_draws_both_lanes_each_frame_at_the_measured_pace():
    run = spec_run([(4, 2, 0.004)] * 6, step=0.04)
    plain = [(str(i), "plain") for i in range(len(run.plain_ids))]
    spec = [(str(i), "accepted") for i in range(len(run.spec_ids) + 12)]
    log, sleeps = [], []
    factor = race_view.replay(run, plain, spec, *(_Slot(log, n) for n in ("pl", "pc", "sl", "sc")),
                              sleep=sleeps.append)
    assert factor == 1.0  # a short race replays in real time
    frames = len(sleeps) + 1
    assert len(log) == 4 * frames and [n for n, _ in log[:4]] == ["pl", "pc", "sl", "sc"]
    end = max(run.plain_seconds, run.spec_seconds)
    assert abs(sum(sleeps) - end) < 2 / race_view.FPS  # the replay lasts as long as the race was measured
    assert "\u258c" not in log[-4][1]  # the last frame shows the finished plain lane
    plain_t, spec_t = race_view.schedule(run, spec)
    assert plain_t[-1] == run.plain_seconds and abs(spec_t[-1] - run.spec_seconds) < 1e-9


def test_gap_rows_walk_from_the_formula_to_the_clock():
    """A drafter that drafts in 2 of 20 rounds, with a verify pass dearer than a plain step: every gap has its
    own line, the formula's last line is set beside the decode-only number, and the wall clock comes last."""
    run = spec_run([(0, 0, 0.0005)] * 18 + [(2, 0, 0.0005)] * 2)
    rows = race_view.gap_rows(run)
    assert [r[0] for r in rows] == ["Paper's formula", "+ rounds as they happened", "+ measured verify cost",
                                    "Measured, decode only", "Measured, wall clock"]
    assert "2 of 20" in rows[1][2] and "c looks large" in rows[1][2]
    assert rows[3][1] == f"{run.decode_speedup:.2f}x" and rows[4][1] == f"{run.speedup:.2f}x"
    table = race_view.gap_table(run)
    assert table.count("\n| ") == 6 and "decode-only" in table  # header + 5 rows, one line each
    full = race_view.gap_rows(spec_run([(4, 2, 0.004)] * 6))
    assert "every round drafted k = 4" in full[1][2]
    short = race_view.gap_rows(spec_run([(4, 4, 0.0), (1, 1, 0.0)]))  # the last draft cut to the tokens still wanted
    assert "every round drafted, but 2.5 tokens per round" in short[1][2]


def test_a_decode_only_speedup_above_k_plus_one_is_flagged():
    """The wall clock can stay under k + 1 while the decode-only number (prefill left out) passes it."""
    from engine.measure import noise
    from engine.speculative.records import SpecRun

    run = spec_run([(4, 4, 0.0)] * 6, step=0.04)
    fast = SpecRun(**{**run.__dict__, "rounds": tuple(r.__class__(**{**r.__dict__, "verify_seconds": 0.005})
                                                      for r in run.rounds), "spec_prefill_seconds": 2.0,
                      "plain_step_seconds": (2.0,) + run.plain_step_seconds[1:]})
    assert fast.decode_speedup > fast.k + 1 >= fast.speedup
    result = race_view.RaceResult(fast, noise.Calibration(0.0, 0.0, 0.0, 0.0, 0.0, None, None),
                                  noise.check_speedup(fast.speedup, fast.k, fast.accepted, fast.tokens_per_pass))
    flags = race_view.decode_flags(result)
    assert flags and "Decode only" in flags[0] and "k + 1" in flags[0]


def test_sweep_figure_sets_the_decode_only_line_beside_the_formula():
    from engine.speculative.records import SweepPoint
    from ui.speculative.figures import sweep_figure

    pts = [SweepPoint(k, 0.9, 2.0, 0.01, 1.4, 2.2, True, 10, 1.9) for k in (1, 2, 4)]
    names = [t.name for t in sweep_figure(pts, "lookup").data]
    assert any("wall clock" in n for n in names) and any("decode only" in n for n in names)
    assert race_view.sweep_flags(pts) == []
    wild = [SweepPoint(2, 0.9, 2.0, 0.01, 1.4, 2.2, True, 10, 4.5)]  # decode only above k + 1 = 3
    assert any("decode only" in f and "k + 1 = 3x" in f for f in race_view.sweep_flags(wild))


def test_a_race_where_nothing_was_drafted_is_drawn_as_noise_not_a_win():
    """Nothing drafted: both lanes ran one target pass per token, so whatever gap their clocks show is noise; the
    chart must not show a winner: its title and a note say the gap is noise, and the speculative line is not
    drawn in the winner's colour."""
    run = spec_run([(0, 0, 0.0)] * 8, step=0.04)
    assert run.same_work and run.drafted == 0 and len(run.spec_ids) == len(run.plain_ids)
    fig = progress_lines(run)
    assert "noise" in fig.layout.title.text and "same work" in fig.layout.title.text
    assert any("noise" in a.text for a in fig.layout.annotations)
    plain, spec = fig.data
    assert spec.line.color == plain.line.color
    result = race_view.judge(run, _quiet())
    assert result.same_work is not None and any("noise" in f for f in result.flags)
    box, text, _ = race_view.verdict(result)
    assert "no speedup to measure" in text and "noise" in text
    drafting = spec_run([(4, 2, 0.004)] * 6)
    assert not drafting.same_work and race_view.judge(drafting, _quiet()).same_work is None
    assert "noise" not in progress_lines(drafting).layout.title.text


def _quiet():
    from engine.measure.noise import Calibration

    return Calibration(0.0, 1.0, 0.01, 0.01, 0.01, 0.0, 0.1)


def test_a_sweep_whose_plain_lane_was_timed_far_apart_names_no_best_k():
    """The plain lane is re-measured for every k: the same work each time. Timed more than 1.5x apart, the sweep
    is noise, and its verdict names no best k (one race per k cannot carry that lesson)."""
    from engine.speculative.records import SweepPoint

    quiet = [SweepPoint(k, 0.9, 2.0, 0.01, s, 2.2, True, 10, s, 1.0 + k / 100) for k, s in ((1, 1.3), (2, 1.6))]
    assert race_view.sweep_flags(quiet) == [] and "Best k" in race_view.sweep_verdict(quiet, "lookup")
    noisy = quiet + [SweepPoint(4, 0.9, 2.0, 0.01, 1.9, 2.2, True, 10, 1.9, 1.6)]
    assert any("1.6x" in f and "same work" in f for f in race_view.sweep_flags(noisy))
    verdict = race_view.sweep_verdict(noisy, "lookup")
    assert "noise" in verdict and "Best k" not in verdict


def test_the_self_draft_answer_never_reads_a_noisy_race():
    from engine.speculative.records import SpecRun
    from engine.speculative.repeats import RaceRepeats

    run = spec_run([(4, 4, 0.2)] * 6, step=0.04)  # model:self: drafting costs more than a target step per token
    run = SpecRun(**{**run.__dict__, "drafter": "model:m"})
    assert run.decode_speedup < 1
    quiet = race_view.judge(RaceRepeats((run,) * 5), _quiet())
    assert "Your run agrees" in race_view.self_draft_answer(quiet)
    noisy = race_view.judge(RaceRepeats((SpecRun(**{**run.__dict__, "spec_prefill_seconds": 0.05}),) * 5), _quiet())
    answer = race_view.self_draft_answer(noisy)
    assert "cannot say" in answer and "agrees" not in answer and "not slower" not in answer
