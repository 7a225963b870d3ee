"""Figure builders of the serving page, fed with records measured on a real (tiny) HTTP server on 127.0.0.1:
titles, axis units, one mark per measured thing, escaped token labels."""
import pytest

from engine.serving import config as K
from engine.serving import concurrency as Co
from engine.serving import measure as Me
from engine.serving.metrics import MetricsSample
from tests.serving_servers import OddServer
from ui.serving import figures as F
from ui.serving.view import concurrency_table, offers_table


def _labelled(fig, y=True):
    assert fig.layout.title.text
    assert "(" in fig.layout.xaxis.title.text  # a unit in brackets
    if y:
        assert "(" in fig.layout.yaxis.title.text


@pytest.fixture(scope="module")
def odd():
    with OddServer("metrics") as s:
        yield K.ServerConfig(s.base_url, "odd")


def test_timeline_one_bar_per_chunk(odd):
    tl = Me.measure_request(odd, "hi", 5)
    fig = F.request_timeline(tl)
    _labelled(fig, y=False)
    wait, chunks = fig.data
    assert list(wait.x) == pytest.approx([tl.ttft_s * 1000]) and len(chunks.x) == len(tl.chunk_s) == 5
    assert fig.layout.xaxis.range[1] >= tl.end_s * 1000
    itl = F.itl_chart(tl)
    _labelled(itl)
    assert len(itl.data[0].y) == 4


def test_concurrency_figures(odd):
    cs = Co.concurrency_sweep(odd, (1, 3), new_tokens=4, prompt_tokens=16)
    fig = F.concurrency_chart(cs)
    _labelled(fig)
    thr, lat = fig.data
    assert list(thr.x) == ["1", "3"] and list(lat.y) == [lv.latency_s.median for lv in cs.levels]
    g = F.concurrency_gantt(cs.levels[-1])
    assert len(g.data[0].y) == 3 and "(ms)" in g.layout.xaxis.title.text
    kv = F.kv_usage_chart(cs)  # the tiny server's /metrics reports 25 % KV usage and 3 running requests
    _labelled(kv)
    assert any(list(t.y) and max(t.y) == pytest.approx(25.0) for t in kv.data if "KV" in t.name)
    table = concurrency_table(cs)
    assert list(table["parallel requests"]) == [1, 3] and table["peak KV cache used"][0] == "25.0%"


def test_next_token_bars_escape_and_order():
    nt = Me.NextToken("p", (" Paris", "<b>x</b>", "\n"), (0.6, 0.3, 0.1), " Paris")
    fig = F.next_token_bars(nt)
    _labelled(fig, y=False)  # a categorical token axis
    bar = fig.data[0]
    assert list(bar.x) == [0.1, 0.3, 0.6]  # most likely drawn at the top
    assert bar.y[-1] == "\u00b7Paris" and bar.y[0] == "\u21b5"  # whitespace made visible
    assert bar.marker.color[-1] != bar.marker.color[0]  # the chosen token stands out


def test_prompt_sweep_chart_has_both_curves():
    p = lambda n, a, b: Me.PromptPoint(n, n, "usage", Me.Spread(a, a, a, 1), Me.Spread(b, b, b, 1), ())  # noqa
    fig = F.prompt_sweep_chart(Me.PromptSweep(4, 1, (p(16, 0.05, 0.01), p(256, 0.2, 0.011)), False, ()))
    _labelled(fig)
    ttft, tpot = fig.data
    assert list(ttft.y) == pytest.approx([50, 200]) and list(tpot.y) == pytest.approx([10, 11])


def test_offers_table_says_what_is_missing():
    from engine.serving import metrics as M
    from engine.serving.probe import ServerInfo

    info = ServerInfo("http://h", ("m",), "m", True, None, M.offer(None), ())
    t = offers_table(info)
    values = dict(zip(t["what"], t["this server"]))
    assert values["KV-cache usage"].startswith("missing") and values["Prometheus /metrics"] == "no"
    assert values["Slots (/slots)"] == "no"


def _tl(timings):
    chunks = (0.30, 0.35, 0.40, 0.45)
    return Me.RequestTimeline(0.0, 0.30, 0.46, chunks, (1, 1, 1, 1), "abcd", 4, "usage", 40, "usage", "length",
                              timings)


def test_timeline_puts_the_servers_clock_beside_the_clients():
    tl = _tl({"prompt_ms": 200.0, "prompt_n": 40, "cache_n": 0, "predicted_ms": 140.0, "predicted_n": 4})
    fig = F.request_timeline(tl)
    _labelled(fig, y=False)
    bars = {t.name: t for t in fig.data}
    prompt, outside = bars["server: prompt"], bars["outside the server's prompt time"]
    assert list(prompt.x) == pytest.approx([200.0]) and prompt.base[0] + prompt.x[0] == pytest.approx(300.0)
    assert list(outside.x) == pytest.approx([100.0])  # TTFT 300 ms - the server's 200 ms
    assert list(bars["server: generating"].base) == pytest.approx([300.0])
    assert "server's own timings" in fig.layout.title.text
    plain = F.request_timeline(_tl(None))
    assert len(plain.data) == 2  # no timings: nothing drawn for them


def test_speculative_figures_from_counters():
    s = lambda t, d, a: MetricsSample(t, None, None, None, 1.0, d, a, None)  # noqa: E731
    lv = Co.ConcurrencyLevel(2, (), 1.0, 1.0, *(Me.Spread(1, 1, 1, 1),) * 3, 0, (),
                             (s(0.25, 110, 105), s(0.5, 130, 120)))
    cs = Co.ConcurrencySweep(16, 8, (lv,), False, (), s(0.0, 100, 100), s(0.0, 130, 120))
    fig = F.spec_live_chart(cs)
    _labelled(fig)
    drafted, accepted = fig.data
    assert list(drafted.y) == [10, 30] and list(accepted.y) == [5, 20]
    nodraft = Co.ConcurrencySweep(16, 8, (Co.ConcurrencyLevel(2, (), 1.0, 1.0, *(Me.Spread(1, 1, 1, 1),) * 3, 0,
                                                               (), (MetricsSample(0.2, 0.1, 1, 0, None, None,
                                                                                     None, None),)),),
                                  False, ())
    assert F.spec_live_chart(nodraft) is None  # not exported: no line at 0
    pos = F.spec_per_position_chart((0.9, 0.6, 0.2))
    _labelled(pos)
    assert list(pos.data[0].y) == pytest.approx([90, 60, 20]) and list(pos.data[1].y) == pytest.approx([10, 40, 80])
