"""Figure builders of the sampling page: titled, axes labelled with units, and showing the right things."""
import numpy as np
import torch

from engine.core.sampling import SamplingSettings
from engine.sampling.stages import draw_counts, stages
from ui.frame.figures import COLORS, unique_labels
from ui.sampling.figures import (
    cumulative_curve, draws_vs_probs, position_probs, removed_by, stage_bars, step_chart,
)

LOGITS = (torch.randn(2000, generator=torch.Generator().manual_seed(0)) * 2.5).numpy()


def test_stage_bars_four_panels_with_units_and_the_chosen_token_in_red():
    st = stages(LOGITS, SamplingSettings(0.8, 8, 0.9, 0.05), show=12)
    tokens = [f"tok{i}" for i in st.ids]
    chosen = int(st.ids[1])
    fig = stage_bars(st, tokens, chosen)
    assert fig.layout.title.text
    titles = [fig.layout[f"xaxis{'' if i == 1 else i}"].title.text for i in range(1, 5)]
    assert all(titles) and "logit" in titles[0] and all("probability" in t for t in titles[2:])
    assert fig.layout.yaxis.title.text == "token"
    final = fig.data[-1]
    red = [y for y, c in zip(final.y, final.marker.color) if c == COLORS["accent"]]
    assert red == ["tok" + str(chosen)]
    # Panel 3 has one legend entry per reason a shown token was removed, and every shown token once.
    panel3 = [t for t in fig.data if t.xaxis == "x3"]
    reasons = {r for r in removed_by(st) if r}
    assert {t.name for t in panel3} == {"kept"} | {f"removed by {r}" for r in reasons}
    assert sum(x is not None for t in panel3 for x in t.x) == len(tokens)
    # A removed token stays visible: an outlined bar with a length above zero, its real p in the hover data.
    for t in panel3:
        if t.name != "kept":
            assert t.marker.line.width > 0 and all(x > 0 for x in t.x if x is not None)
    assert "greedy" in stage_bars(stages(LOGITS, SamplingSettings(0.0)), tokens[:15], chosen).layout.annotations[1].text


def test_cumulative_curve_marks_the_top_p_cut():
    st = stages(LOGITS, SamplingSettings(1.0, 0, 0.6))
    fig = cumulative_curve(st)
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
    notes = " ".join(a.text for a in fig.layout.annotations)
    assert "top-p = 0.6" in notes and f"keeps {st.top_p_keep:,}" in notes
    ys = np.asarray(fig.data[0].y)
    assert np.all(np.diff(ys) >= -1e-7)
    off = cumulative_curve(stages(LOGITS, SamplingSettings(1.0, 0, 1.0)))
    assert not off.layout.shapes and "top-p" not in " ".join(a.text for a in off.layout.annotations)


def test_draws_vs_probs_and_labels():
    s = SamplingSettings(1.0, 5, 1.0)
    d = draw_counts(LOGITS, s, 2000, seed=0)
    fig = draws_vs_probs([f"t{i}" for i in d.ids], d.probs, d.counts, d.n)
    assert len(fig.data) == 2 and abs(sum(fig.data[1].y) - 1.0) < 1e-9
    assert "(0 to 1)" in fig.layout.yaxis.title.text
    assert unique_labels(["a", "a", " b"]) == ["a", "a (2)", "\u00b7b"]


def test_position_and_step_charts():
    fig = position_probs(["a", "b", "c"], ["b", "c", "d"], [0.5, 1e-4, 0.2], [1, 40, 3])
    assert fig.layout.yaxis.type == "log" and fig.layout.xaxis.title.text and fig.layout.xaxis.dtick == 1
    assert list(fig.data[0].marker.color) == [COLORS["good"], COLORS["warn"], COLORS["primary"]]
    fig = step_chart(["The", " cat"], [0.2, 0.9], [0.3, 0.9], [4.0, 0.5])
    assert fig.layout.yaxis2.title.text == "entropy (bits)" and fig.layout.yaxis.title.text
    assert [t.name for t in fig.data] == ["most likely token", "appended token", "entropy (bits)"]


def test_stage_bars_label_every_token_and_keep_their_numbers_readable():
    """Every token is named on the axis (plotly dropped every other label: 8 of 15 shown on a projector), and the
    numbers inside the bars keep a readable size (plotly shrank them to the bars' thickness, ~9 px): each row is
    tall enough for the bar's text, normal and presenter sizes."""
    for large, show in ((False, 15), (True, 10)):
        st = stages(LOGITS, SamplingSettings(0.7, 50, 0.95), show=show)
        fig = stage_bars(st, [f"tok{i}" for i in st.ids], int(st.ids[0]), large=large)
        assert list(fig.layout.yaxis.tickvals) == list(fig.data[0].y) and len(fig.layout.yaxis.tickvals) == show
        texts = [t for t in fig.data if t.text is not None and any(t.text)]
        assert texts and all(t.constraintext == "none" and t.textfont.size >= 15 for t in texts)
        rows = (fig.layout.height - fig.layout.margin.t - fig.layout.margin.b) / show
        assert rows >= 1.5 * max(t.textfont.size for t in texts), rows


def test_cumulative_curve_at_temperature_0_says_greedy_keeps_one():
    """At T 0 the token is the argmax: the chart said "top-p keeps 32 tokens" from a top-p that is never applied."""
    st = stages(LOGITS, SamplingSettings(0.0, 0, 0.9))
    assert st.top_p_keep > 1  # the cut top-p would make: the chart must not report it
    notes = " ".join(a.text for a in cumulative_curve(st).layout.annotations)
    assert "greedy (T = 0) keeps 1 token" in notes and "top-p keeps" not in notes and "top-p =" not in notes
