"""The saved-run page's timings chart: its ratio labels (here / recorded) at a readable size. Plotly shrinks a bar's
outside text to the bar's width unless told not to: with 24 pairs the labels came out tiny."""
from types import SimpleNamespace

from ui.frame.figures import MIN_TICK_SIZE
from ui.record.figures import SHOWN_TIMINGS, timings_chart


def test_ratio_labels_keep_their_size():
    ts = [SimpleNamespace(what=f"step {i}", recorded_s=0.02, here_s=0.021 + i * 1e-4, ratio=1.05 + i * 0.005)
          for i in range(SHOWN_TIMINGS)]
    fig = timings_chart(ts, "a laptop")
    here = fig.data[1]
    assert here.text[0] == "x1.05" and fig.layout.title.text and fig.layout.yaxis.title.text == "wall time (ms)"
    assert here.constraintext == "none" and here.textfont.size >= MIN_TICK_SIZE and here.cliponaxis is False
