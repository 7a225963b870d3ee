"""Figure builders for the batching page, on records from a real (tiny-model) run."""
import pytest

from engine.batching.experiment import decode_sweep, load_sweep, serve
from engine.batching.workload import POLICIES, WorkloadSettings, make_workload
from ui.batching.figures import (gantt, kv_over_time, latency_bars, load_chart, occupancy_chart, sweep_step_time,
                                 sweep_throughput_bar, workload_chart)


@pytest.fixture(scope="module")
def runs(tiny_lm):
    reqs = make_workload(tiny_lm.tokenizer, WorkloadSettings(n_requests=5, rate_per_s=30.0, min_new_tokens=1,
                                                             max_new_tokens=6, seed=2))
    return reqs, [serve(tiny_lm, reqs, p, max_batch=3, batch_timeout_s=0.02) for p in POLICIES]


def _titled(fig):
    assert fig.layout.title.text
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    return fig


def test_workload_chart(runs):
    reqs, _ = runs
    fig = _titled(workload_chart(reqs))
    assert list(fig.data[0].x) == [r.arrival_s for r in reqs]
    assert "(s" in fig.layout.xaxis.title.text


def test_gantt_segments_cover_each_request(runs):
    _, results = runs
    for res in results:
        fig = _titled(gantt(res, x_max=5.0))
        bars = [t for t in fig.data if t.type == "bar"]
        for r in res.requests:
            label = f"req {r.rid} ({r.max_new_tokens} tok)"
            total = sum(x for t in bars for x, y in zip(t.x, t.y) if y == label)
            assert total == pytest.approx(r.released_s - r.arrival_s, abs=1e-6)
        held = next(t for t in bars if t.name.startswith("done"))
        # A slot is held after its request is done only under static batching (how long depends on the
        # real timing of the batch); continuous batching frees it at once.
        held_s = sum(r.released_s - r.done_s for r in res.requests)
        assert sum(held.x) == pytest.approx(held_s, abs=1e-6)
        if res.policy != "static":
            assert held_s == pytest.approx(0.0, abs=1e-9)


def test_occupancy_counts_rows(runs):
    _, results = runs
    for res in results:
        fig = _titled(occupancy_chart(res, 3))
        useful, wasted, pre = fig.data
        dec = [s for s in res.steps if s.phase == "decode"]
        assert list(useful.y) == [s.useful_rows for s in dec]
        assert sum(wasted.y) == res.metrics()["wasted_decode_slots"]
        assert sum(pre.y) == len(res.requests)


def test_occupancy_ticks_stay_readable_for_a_class(runs):
    """A class's batch of 20 drew 21 row labels in 300 px: one per row only up to 8 rows, then every 2nd or 5th."""
    _, results = runs
    assert [occupancy_chart(results[0], m).layout.yaxis.dtick for m in (3, 8, 12, 20, 32)] == [1, 1, 2, 5, 5]


def test_kv_and_latency_charts(runs):
    _, results = runs
    fig = _titled(kv_over_time(results))
    assert [t.name for t in fig.data] == list(POLICIES)
    assert max(fig.data[1].y) * 1024 == max(s.kv_bytes for s in results[1].steps)
    assert "KiB" in fig.layout.yaxis.title.text
    fig = _titled(latency_bars(results))
    assert list(fig.data[0].y) == [r.latency_s for r in results[0].requests]


def test_sweep_and_load_charts(tiny_lm):
    pts = decode_sweep(tiny_lm, [1, 2], steps=1, warmup=0)
    fig = _titled(sweep_throughput_bar(pts))
    assert list(fig.data[0].y) == [p.tokens_per_s for p in pts]
    fig = _titled(sweep_step_time(pts))
    assert "ms" in fig.layout.yaxis.title.text
    load = load_sweep(tiny_lm, WorkloadSettings(n_requests=2, rate_per_s=40.0, min_new_tokens=1, max_new_tokens=2),
                      rates=(0.0, 40.0), probe_tokens=2)
    fig = _titled(load_chart(load))
    assert list(fig.data[0].x) == ["alone", "40 req/s"]
    for p, a, b in zip(load, fig.data[0].y, fig.data[1].y):
        assert a + b == pytest.approx(p.probe.latency_s)


def test_workload_bubbles_and_their_labels_fit_inside_the_plot(runs):
    """The first arrival (0 s) and the last one's "N tok" label were cut at the plot's edges; every request is
    labelled on the y axis, one row each."""
    reqs, _ = runs
    fig = workload_chart(reqs)
    lo, hi = fig.layout.xaxis.range
    xs = list(fig.data[0].x)
    span = max(xs) - min(xs)
    assert lo < min(xs) - 0.05 * max(span, 0.1) and hi > max(xs) + 0.15 * max(span, 0.1)
    assert fig.data[0].cliponaxis is False
    assert fig.layout.yaxis.dtick == 1 and fig.layout.height >= 120 + 24 * len(reqs) - 1
