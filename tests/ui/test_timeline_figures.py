"""Figure builders of the prefill-vs-decode page: titles, axis units, one mark per measured thing."""
import math

import pytest

from engine.timeline import experiment as T

from engine.timeline import memory as M

from engine.timeline import roofline as R
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from ui.timeline import figures as F


def sp(m, lo=None, hi=None, n=3):
    return T.Spread(m, m if lo is None else lo, m if hi is None else hi, n)


def _labelled(fig, x=True, y=True):
    assert fig.layout.title.text
    if x:
        assert "(" in fig.layout.xaxis.title.text  # a unit in brackets
    if y:
        assert "(" in fig.layout.yaxis.title.text


def test_gantt_one_bar_per_pass(tiny_lm):
    tr = run_trace(tiny_lm, "Hello there", SamplingSettings(), 5, use_chat_template=False, analyse=False)
    tl = T.timeline(tr)
    fig = F.gantt(tl)
    _labelled(fig, y=False)
    pre, dec = fig.data
    assert len(pre.x) == 1 and len(dec.x) == len(tr.steps) - 1
    assert list(dec.base) == pytest.approx([b.start_ms for b in tl.bars[1:]])
    assert fig.layout.xaxis.range[1] >= tl.total_ms


def test_sweep_chart_error_bars():
    rows = (T.SweepRow(16, sp(100, 90, 130), sp(20, 19, 22)), T.SweepRow(64, sp(300, 280, 350), sp(21, 20, 25)))
    fig = F.sweep_chart(T.Sweep(rows, 4, 3))
    _labelled(fig)
    ttft, tpot = fig.data
    assert list(ttft.y) == [100, 300] and list(ttft.error_y.array) == [30, 50] and list(ttft.error_y.arrayminus) == [10, 20]
    assert list(tpot.x) == [16, 64]


def test_cache_chart_two_lines():
    cc = T.CacheComparison(10, (1, 2, 3), (1, 2, 3), (50.0, 5.0, 5.0), (50.0, 52.0, 55.0), True, ("a", "b", "c"))
    fig = F.cache_chart(cc)
    _labelled(fig)
    assert {d.name for d in fig.data} == {"with KV cache", "without cache"}
    assert all(len(d.y) == 3 for d in fig.data)


def test_breakdown_chart_shares_add_to_100():
    def pb(phase, n):
        stages = {s: sp(float(i + 1)) for i, s in enumerate(T.STAGES)}
        return T.PassBreakdown(phase, n, stages, sp(30.0), sp(28.0))
    bd = T.Breakdown(pb("prefill", 20), pb("decode", 1), 3, {"attention": 2})
    fig = F.breakdown_chart(bd)
    _labelled(fig, y=False)
    assert [d.name for d in fig.data] == list(T.STAGES)
    for row in range(2):
        assert sum(d.x[row] for d in fig.data) == pytest.approx(100.0)


def test_roofline_log_axes_and_points(tiny_lm):
    hp = R.HardwareProbe("cpu", 2, sp(20.0, 18, 22), sp(15.0), sp(100.0, 90, 110), 256.0, 1024)
    pts = [R.roofline_point(tiny_lm, "prefill", 32, 0, 5.0), R.roofline_point(tiny_lm, "decode", 1, 32, 1.0)]
    fig = F.roofline_chart(hp, pts)
    _labelled(fig)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    roof = fig.data[0]
    assert max(roof.y) == pytest.approx(100.0) and min(roof.y) == pytest.approx(20.0 * min(roof.x))
    assert [d.name for d in fig.data[1:]] == ["prefill", "decode"]
    assert fig.data[1].x[0] > fig.data[2].x[0]


def test_floor_and_memory_charts():
    fc = R.FloorCheck("cpu", 540_000_000, 515.0, sp(60.0, 55.0, 80.0, 5), sp(20.0, 18.0, 21.0, 5),
                      sp(27.0, 25.7, 30.0, 5))
    fig = F.floor_chart(fc)
    _labelled(fig, x=False)
    assert list(fig.data[0].y) == [27.0, 60.0] and fig.data[0].error_y.array[1] == pytest.approx(20.0)
    assert fig.data[0].error_y.arrayminus[0] == pytest.approx(1.3) and "beside" in fig.layout.title.text
    mem = M.MemoryComparison(32, "m", 4 * 2**20, 10, 0, 6 * 2**20, 2 * 2**20, 7 * 2**20, 3 * 2**20, 2 * 2**20)
    fig = F.memory_chart(mem)
    _labelled(fig, x=False)
    peak, held = fig.data
    assert list(peak.y) == [7.0, 3.0] and list(held.y) == [6.0, 2.0]
    assert not any(math.isnan(v) for v in peak.y)


def test_kernel_lanes_draw_every_span_on_its_lane_to_scale():
    from engine.timeline.profile import Span, StepProfile

    spans = (Span("host", "aten::linear", 0.0, 1.0), Span("host", "aten::add", 1.5, 0.2),
             Span("device", "aten::mm", 0.1, 0.8), Span("device", "aten::add", 1.55, 0.1))
    p = StepProfile("decode", "eager", "cpu", 1, 9, 2.0, 1.5, 2, 0.9, spans, ())
    fig = F.kernel_lanes(p, "Eager decode step: host vs device")
    _labelled(fig, y=False)
    host, device = fig.data
    assert [x for x in host.x if x is not None] == pytest.approx([0.0, 1.0, 1.5, 1.7])
    assert [x for x in device.x if x is not None] == pytest.approx([0.1, 0.9, 1.55, 1.65])
    assert set(y for y in device.y if y) == {"device: operators"} and fig.layout.xaxis.range[1] >= p.wall_ms


def test_climb_text_says_where_prefill_started_to_climb_and_how_far_the_sweep_went():
    from ui.timeline import view as V

    flat = (T.SweepRow(16, sp(20), sp(5)), T.SweepRow(512, sp(21), sp(5)), T.SweepRow(1024, sp(31), sp(5)),
            T.SweepRow(2048, sp(60), sp(6)))
    text = V.climb_text(T.Sweep(flat, 4, 1), {"extended": [1024, 2048], "memory_short_at": None}, "cuda:0")
    assert "doubling the prompt, to 2,048" in text and "started to climb at 1,024" in text and "3.0" in text
    none = V.climb_text(T.Sweep(flat[:2], 4, 1), {"extended": [], "memory_short_at": 1024}, "cuda:0")
    assert "has not started to climb" in none and "1,024 tokens did not fit" in none


def test_the_bandwidth_card_shows_the_bandwidth_the_floor_divides_by():
    """One figure per page: the card, the floor and the floor chart use the bandwidth measured beside the step (a
    walkthrough saw the card at 11.3 GB/s beside a floor computed from 10.0 GB/s)."""
    from ui.timeline import view as V

    hp = R.HardwareProbe("cpu", 2, sp(11.3, 11, 12), sp(15.0), sp(100.0, 90, 110), 256.0, 1024)
    fc = R.FloorCheck("cpu", 538_000_000, 513.0, sp(87.0, 80.0, 95.0, 5), sp(10.0, 9.8, 10.2, 5),
                      sp(53.8, 52.7, 54.9, 5))
    cards = dict((label, value) for label, value, _ in V.probe_metrics(hp, fc))
    assert cards["Memory bandwidth (read)"] == "10.0 GB/s" and cards["Decode-step floor"] == "53.80 ms"
    assert "11.3 GB/s" in V.probe_metrics(hp, fc)[0][2]  # the probe on its own, said in the help
