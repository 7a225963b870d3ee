"""Figure builders of the KV-cache page: titled, labelled with units, and plotting the numbers given."""
from types import SimpleNamespace

import numpy as np

from engine.kv_cache import presets as kp
from engine.kv_cache.paging import allocate
from ui.kv_cache.figures import (cache_heatmap, context_sweep, fmt_bytes, growth_chart, memory_bar, paging_chart,
                           paging_totals, variants_bar)


def _labelled(fig, y=True):
    lay = fig.layout
    assert lay.title.text
    assert lay.xaxis.title.text and "(" in lay.xaxis.title.text  # a unit in brackets
    if y:
        assert lay.yaxis.title.text


def test_fmt_bytes():
    assert fmt_bytes(327_680) == "320.0 KiB"
    assert fmt_bytes(2_621_440) == "2.50 MiB"
    assert fmt_bytes(16_060_522_496) == "16.06 GB"
    assert fmt_bytes(12) == "12 bytes"


def test_heatmap_columns_are_positions():
    vals = np.arange(5 * 4, dtype=np.float32).reshape(5, 4) - 10  # [tokens, head_dim]
    fig = cache_heatmap(vals, ["a", " b", "c\n", "d", "e"], 3, "keys")
    _labelled(fig)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (4, 5) and np.array_equal(z, vals.T)
    assert fig.data[0].zmid == 0
    assert len(fig.layout.shapes) == 1  # the prompt / generated boundary


def test_growth_chart_plots_measured_and_formula():
    steps = [SimpleNamespace(index=i, kv_bytes=1024 * (10 + i), kv_tokens=10 + i) for i in range(4)]
    fig = growth_chart(steps, "+1,024 B per decode step", [1024 * (10 + i) for i in range(4)])
    _labelled(fig)
    formula, measured = fig.data
    assert list(measured.y) == [10, 11, 12, 13] and list(formula.y) == [10, 11, 12, 13]  # KiB
    assert "KiB" in fig.layout.yaxis.title.text


def test_memory_bar_and_sweep():
    fig = memory_bar(16 * 10**9, 4 * 10**9, (24, 80), "weights", "kv")
    assert [d.x[0] for d in fig.data] == [16, 4]  # GB
    assert len(fig.layout.shapes) == 2
    assert fig.layout.xaxis.range[1] >= 80
    _labelled(fig, y=False)
    sweep = context_sweep([512, 1024], [10**9, 2 * 10**9], 10**9, (24,), "m")
    _labelled(sweep)
    assert list(sweep.data[1].y) == [2, 3] and sweep.layout.xaxis.type == "log"


def test_variants_bar_marks_the_model():
    p = kp.preset("Llama-3-70B")
    vs = kp.attention_variants(p, 16)
    fig = variants_bar(vs, p.name)
    _labelled(fig, y=False)
    labels = list(fig.data[0].y)[::-1]
    own = [lab for lab in labels if "this model" in lab]
    assert own == [next(v.label for v in vs if v.is_model) + " \u2190 this model"]
    assert max(fig.data[0].x) == 2_621_440 / 1024  # MHA, KiB


def test_paging_figures():
    a = allocate([16, 17, 100], 128, 16)
    fig = paging_chart(a)
    _labelled(fig, y=False)
    assert [list(d.x) for d in fig.data] == [[128] * 3, [16, 32, 112], [16, 17, 100]]
    tot = paging_totals(a, 1024)
    assert tot.layout.title.text and tot.layout.xaxis.title.text and "(MiB)" in tot.layout.yaxis.title.text
    used, empty = tot.data
    assert list(used.y) == [133 / 1024] * 2
    assert list(empty.y) == [a.paged_waste / 1024, a.contiguous_waste / 1024]
