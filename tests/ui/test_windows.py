"""Sliding windows drawn, not hidden: the attention map masks keys outside a layer's window and
outlines its edge; the KV heatmap leaves positions a window dropped blank and scales by the held ones."""
import numpy as np

from ui.attention.figures import attention_map
from ui.kv_cache.figures import cache_heatmap


def test_attention_map_masks_and_outlines_the_window():
    m, w = 12, 4
    q, k = np.arange(m)[:, None], np.arange(m)[None, :]
    ok = (k <= q) & (q - k < w)
    att = np.where(ok, 1.0, 0.0) / ok.sum(-1, keepdims=True)
    fig = attention_map(att, [f"t{i}" for i in range(m)], "layer 0", query=m - 1, window=w)
    masked = np.asarray(fig.data[0].z, dtype=float)  # grey layer: 1 where masked
    shown = np.asarray(fig.data[1].z, dtype=float)
    assert np.array_equal(~np.isnan(shown), ok) and np.array_equal(masked == 1.0, ~ok)
    edges = [s for s in fig.layout.shapes if s.type == "line"]
    assert len(edges) == m - w + 1  # one edge segment per query row whose window starts inside the map
    assert any("window" in (t.name or "") for t in fig.data)
    plain = attention_map(att, [f"t{i}" for i in range(m)], "layer 0")  # a global layer: only the future masked
    assert np.array_equal(np.asarray(plain.data[0].z, dtype=float) == 1.0, k > q)


def test_kv_heatmap_leaves_dropped_positions_blank():
    v = np.random.default_rng(0).normal(size=(10, 4))
    v[:6] = np.nan  # a window of 5 holds the newest 4 positions
    fig = cache_heatmap(v, [str(i) for i in range(10)], 8, "layer 0")
    assert np.isfinite(fig.data[0].zmax) and fig.data[0].zmax > 0
