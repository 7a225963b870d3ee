"""Chart text readable from the back of a room: every axis's tick labels at least 14 px and dark, on every figure
shown (ui.frame.figures.readable, applied by ui.frame.layout.chart), and log axes labelled at powers of ten only."""
import re

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ui.frame import figures
from ui.frame.figures import MIN_TICK_SIZE, readable


def dark(colour: str) -> bool:
    """A #rrggbb colour with relative luminance under 0.2 (plotly's default tick grey #2a3f5f passes barely; the
    Streamlit theme's light grey does not)."""
    m = re.fullmatch(r"#([0-9a-fA-F]{2})([0-9a-fA-F]{2})([0-9a-fA-F]{2})", colour or "")
    if not m:
        return False
    r, g, b = (int(x, 16) / 255 for x in m.groups())
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2] < 0.2


def axes_of(layout: dict):
    """(name, axis dict) of every x/y axis in a figure's layout (as plotly JSON)."""
    return [(k, v) for k, v in layout.items() if re.fullmatch(r"[xy]axis\d*", k)]


def assert_readable(spec: dict, where: str = "") -> None:
    layout = spec.get("layout", {})
    axes = axes_of(layout)
    assert axes, f"{where}: no axes"
    for name, ax in axes:
        font = ax.get("tickfont", {})
        assert font.get("size", 0) >= MIN_TICK_SIZE, f"{where} {name}: tick font {font}"
        assert dark(font.get("color")), f"{where} {name}: tick colour {font.get('color')}"
        if ax.get("type") == "log":
            assert ax.get("minor", {}).get("ticks", "") == "", f"{where} {name}: minor ticks on a log axis"
    for t in spec.get("data", []):
        if "colorbar" in t:
            assert t["colorbar"].get("tickfont", {}).get("size", 0) >= MIN_TICK_SIZE, f"{where}: colour bar"


def test_dark_tells_dark_from_light_grey():
    assert dark(figures.INK) and dark("#000000")
    assert not dark("#a3a8b8") and not dark("#808495") and not dark("") and not dark("grey")


def test_readable_reaches_every_axis_and_colour_bar():
    fig = make_subplots(rows=1, cols=3)
    fig.add_trace(go.Scatter(x=[1, 2, 3], y=[0.001, 0.1, 10]), row=1, col=1)
    fig.add_trace(go.Heatmap(z=np.eye(3)), row=1, col=2)
    fig.add_trace(go.Bar(x=["a", "b"], y=[1, 2]), row=1, col=3)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(tickfont=dict(size=11, color="#aaaaaa"), row=1, col=3)  # a builder's small grey ticks
    assert_readable(readable(fig).to_plotly_json())
    assert fig.layout.xaxis3.tickfont.size >= MIN_TICK_SIZE
    assert fig.layout.yaxis.dtick == 1  # 4 decades: ticks at powers of ten only


def test_a_log_axis_within_one_decade_or_with_its_own_ticks_keeps_them():
    narrow = go.Figure(go.Scatter(x=[1, 2], y=[2, 7]))
    narrow.update_yaxes(type="log")
    assert readable(narrow).layout.yaxis.dtick is None  # dtick=1 would leave it without a single label
    own = go.Figure(go.Scatter(x=[16, 64, 256], y=[1, 2, 3]))
    own.update_xaxes(type="log", tickvals=[16, 64, 256])
    assert readable(own).layout.xaxis.dtick is None and list(own.layout.xaxis.tickvals) == [16, 64, 256]


def test_readable_never_shrinks_a_larger_font():
    fig = go.Figure(go.Bar(x=["a"], y=[1]))
    fig.update_xaxes(tickfont=dict(size=22))
    assert readable(fig).layout.xaxis.tickfont.size == 22
    assert readable(go.Figure(go.Bar(x=["a"], y=[1])), size=8).layout.xaxis.tickfont.size == MIN_TICK_SIZE


def test_every_chart_call_goes_through_readable():
    """The only two st.plotly_chart calls (ui.frame.layout.chart and the attention overview) apply the rule: a new
    direct call would escape it, so it fails here."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    calls = {}
    for path in list((root / "ui").rglob("*.py")) + list((root / "pages").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "st.plotly_chart(" in text:
            calls[path.relative_to(root / path.relative_to(root).parts[0]).as_posix()] = text
    assert set(calls) == {"frame/layout.py", "attention/runs.py"}, sorted(calls)
    for name, text in calls.items():
        body = text.split("st.plotly_chart(")[0].rsplit("def ", 1)[1]
        assert "readable(fig" in body, name
