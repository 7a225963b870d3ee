"""Attention-page figure builders: masked cells are masked (not zero), labels escaped, rows sum to 1, the
reference curve and the GQA wiring say what the data says."""
import numpy as np
import plotly.graph_objects as go

from ui.attention.figures import (MASKED, attention_map, cost_chart, final_prob_line, gqa_diagram, head_overview,
                                  kv_saving_bar, labels, lens_grid, query_bar, residual_norms_chart)


def _causal(m, seed=0):
    rng = np.random.default_rng(seed)
    a = np.tril(rng.random((m, m)) + 0.01)
    return (a / a.sum(-1, keepdims=True)).astype(np.float16)


def _titled(fig: go.Figure):
    assert fig.layout.title.text and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_attention_map_masks_the_future_and_escapes_labels():
    m = 6
    head = _causal(m)
    toks = ["<b>", " the", "\n", "cat", " sat", "<|im_end|>"]
    fig = attention_map(head, toks, "Attention weights", query=3)
    _titled(fig)
    masked, weights = fig.data[0], fig.data[1]
    mz, wz = np.array(masked.z, dtype=float), np.array(weights.z, dtype=float)
    upper = np.triu(np.ones((m, m), dtype=bool), k=1)
    assert np.all(np.isnan(wz[upper])) and not np.any(np.isnan(wz[~upper])), "future cells must not be weights"
    assert np.all(mz[upper] == 1) and np.all(np.isnan(mz[~upper]))
    assert masked.colorscale[0][1] == MASKED
    np.testing.assert_allclose(np.nansum(wz, axis=1), 1.0, atol=5e-3)
    assert list(weights.x) == list(weights.y) == labels(toks)
    assert weights.x[0] == "0: &lt;b&gt;" and weights.x[1] == "1: \u00b7the" and weights.x[2] == "2: \u21b5"
    assert any(t.name and "masked" in t.name for t in fig.data), "a legend entry explains the grey cells"
    assert len(fig.layout.shapes) == 1  # the selected query row


def test_attention_map_draws_a_window():
    head = _causal(10)
    fig = attention_map(head, [f"t{i}" for i in range(10)], "w", start=4, size=3)
    z = np.array(fig.data[1].z, dtype=float)
    assert z.shape == (3, 3)
    assert fig.data[1].x[0] == "4: t4"
    np.testing.assert_allclose(z[0, 0], float(head[4, 4]))


def test_query_bar_is_one_row_summing_to_one():
    head = _causal(8, seed=3)
    fig = query_bar(head, [f"w{i}" for i in range(8)], 5, "layer 1, head 2")
    _titled(fig)
    y = np.array(fig.data[0].y)
    assert len(y) == 6 and abs(y.sum() - 1) < 5e-3
    colors = list(fig.data[0].marker.color)
    assert colors.count(colors[int(np.argmax(y))]) == 1  # the largest bar alone is highlighted
    assert "w5" in fig.layout.title.text and "layer 1, head 2" in fig.layout.title.text


def test_head_overview_cells_are_selectable():
    vals = np.arange(12, dtype=float).reshape(3, 4)
    fig = head_overview(vals, "Attention entropy", "bits", selected=(2, 1), kv_groups=[[0, 1], [2, 3]])
    _titled(fig)
    assert "bits" in fig.layout.title.text or "bits" in fig.data[0].colorbar.title.text
    pick = fig.data[1]
    assert len(pick.x) == 12
    for x, y, (layer, head, value) in zip(pick.x, pick.y, pick.customdata):
        assert (x, y) == (head, layer) and value == vals[int(layer), int(head)]
    assert fig.data[0].hoverinfo == "skip"  # clicks land on the markers, which carry (layer, head)
    rect = [s for s in fig.layout.shapes if s.type == "rect"][0]
    assert (rect.x0, rect.y0) == (0.5, 1.5)


def test_gqa_diagram_wires_query_heads_to_their_kv_head():
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    fig = gqa_diagram(groups, selected_head=4)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len(lines) == 9
    kv_x = {k: [t for t in fig.data if t.mode == "markers+text" and t.y == (0,)][k].x[0] for k in range(3)}
    for t in lines:
        h = t.x[0]
        assert t.x[1] == kv_x[h // 3]
    assert [t.line.width for t in lines if t.x[0] == 4] == [4]


def test_kv_saving_bar_ratio():
    fig = kv_saving_bar([100, 2048], [300, 6144], [900, 18432], 9, 3)
    _titled(fig)
    mha, gqa = np.array(fig.data[0].y), np.array(fig.data[1].y)
    np.testing.assert_allclose(mha / gqa, 3.0)


def test_cost_chart_reference_curve_is_c_n_squared():
    n = [16, 32, 64]
    fwd = [[0.010, 0.012, 0.011], [0.02, 0.021, 0.019], [0.04, 0.05, 0.041]]
    att = [[1e-4] * 3, [4e-4] * 3, [1.6e-3] * 3]
    fig = cost_chart(n, fwd, att, n2_scale=1.6e-3 / 64**2)
    _titled(fig)
    ref = fig.data[2]
    assert "reference" in ref.name
    assert abs(ref.y[-1] - 1.6) < 1e-9  # ms at n = 64
    np.testing.assert_allclose(fig.data[0].y, [11, 20, 41])  # medians in ms
    np.testing.assert_allclose(fig.data[0].error_y.array, [1, 1, 9], atol=1e-9)


def test_lens_grid_text_and_colour():
    L1, P = 4, 5
    probs = np.tile(np.linspace(0.1, 0.9, L1)[:, None, None], (1, P, 3)).astype(np.float32)
    probs[..., 1:] /= 10
    toks = tuple(tuple((f"<L{l}p{j}xyz>", "b", "c") for j in range(P)) for l in range(L1))
    fig = lens_grid(toks, probs, [f"in{j}" for j in range(P)], list(range(10, 15)), last=3)
    _titled(fig)
    hm = fig.data[0]
    z = np.array(hm.z)
    assert z.shape == (L1, 3)
    np.testing.assert_allclose(z[:, 0], np.linspace(0.1, 0.9, L1), rtol=1e-6)
    assert hm.text[-1][-1] == "&lt;L3p4xyz"  # escaped, cut to 8 characters
    assert list(hm.x) == ["12: in2", "13: in3", "14: in4"]
    assert list(hm.y)[0] == "embed" and list(hm.y)[-1] == "layer 2"  # after the last of 3 layers, numbered from 0


def test_norm_and_final_prob_charts():
    norms = np.abs(np.random.default_rng(0).normal(size=(5, 7))) + 1
    norms[:, 0] *= 100
    fig = residual_norms_chart(norms)
    _titled(fig)
    assert fig.layout.yaxis.type == "log"
    names = [t.name for t in fig.data]
    assert "first position (0)" in names and "last position" in names
    fig2 = final_prob_line(np.array([0.0, 0.1, 0.7]), "<x>")
    _titled(fig2)
    assert "&lt;x&gt;" in fig2.layout.title.text


def test_overview_marks_global_layers_among_sliding_ones():
    import numpy as np

    from ui.attention.figures import head_overview

    windows = (512, 512, None, 512, None)
    fig = head_overview(np.zeros((5, 4)), "entropy", "bits", windows=windows)
    ticks = list(fig.layout.yaxis.ticktext)
    assert ticks == ["0 local 512", "1 local 512", "2 global", "3 local 512", "4 global"]
    outlined = sorted(round(sh.y0 + 0.5) for sh in fig.layout.shapes if sh.line.dash == "dash")
    assert outlined == [2, 4]
    plain = head_overview(np.zeros((5, 4)), "entropy", "bits", windows=(None,) * 5)  # all global: nothing marked
    assert plain.layout.yaxis.ticktext is None and not [sh for sh in plain.layout.shapes if sh.line.dash == "dash"]
