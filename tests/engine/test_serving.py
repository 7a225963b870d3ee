"""The serving client and measurements against real HTTP servers on 127.0.0.1: llama-cpp-python's server running
the embedded GGUF (session fixture ``llama_server``, for what it does differently from llama.cpp's own server,
which test_llama_server.py tests), and for the answers no real server here can be made to give, a tiny real
http.server (tests/serving_servers.OddServer). No mocks: every request crosses a socket."""
import json
import math
import time

import pytest

from engine.serving import client as C
from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import concurrency as Co
from engine.serving import measure as Me
from engine.serving import metrics as M
from engine.serving.probe import probe
from tests.serving_servers import OddServer, crash_of, free_port, unavailable


def cfg_of(server, **kw):
    return K.ServerConfig(server.base_url, getattr(server, "model", "odd"), **kw)


# ------------------------------------------------------------------------------------------------ URLs
@pytest.mark.parametrize("raw,want", [
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
    ("https://gpu.example.org/prefix/v1", "https://gpu.example.org/prefix"),
    ("http://[::1]:30000/v1/completions", "http://[::1]:30000"),
])
def test_base_url_normalized(raw, want):
    assert K.normalize_base_url(raw) == want


@pytest.mark.parametrize("raw,words", [
    ("", "base URL"), ("ftp://host", "http://"), ("http://user:secret@host:8000", "API key field"),
    ("http://host:8000/?key=abc", "query"), ("http://host:99999", "not a valid URL"),
])
def test_bad_base_urls_explain_themselves(raw, words):
    with pytest.raises(E.BadURL, match=words):
        K.normalize_base_url(raw)


def test_api_key_stays_out_of_repr_and_dict():
    cfg = K.ServerConfig("http://127.0.0.1:1", "m", "sk-secret")
    assert "sk-secret" not in repr(cfg) and "sk-secret" not in json.dumps(cfg.to_dict())
    assert cfg.headers()["Authorization"] == "Bearer sk-secret"


# ------------------------------------------------------------------------------------------------ bad answers
def test_refused_connection_is_explained_without_saying_the_port_is_closed():
    cfg = K.ServerConfig(f"http://127.0.0.1:{free_port()}", "m", connect_timeout_s=2)
    with pytest.raises(E.ServerUnreachable, match="Could not connect") as e:
        probe(cfg)
    assert "refused" not in str(e.value) and "nothing listens" not in str(e.value)
    with pytest.raises(E.ServerUnreachable, match="Is the server running"):
        C.stream(cfg, "hi", 4)


def test_unknown_model_gives_404_message():
    with OddServer("plain") as s:
        cfg = K.ServerConfig(s.base_url, "no-such-model")
        info = probe(cfg)
        assert not info.model_listed and any("not among the server's models" in n for n in info.notes)
        with pytest.raises(E.ModelNotFound, match="no model named 'no-such-model'.*does not exist"):
            C.stream(cfg, "hi", 4)


def test_non_streaming_reply_is_refused_clearly():
    with OddServer("json") as s:
        with pytest.raises(E.NotStreaming, match="one whole reply.*cannot be measured"):
            C.stream(cfg_of(s), "hi", 4)


def test_server_without_logprobs():
    with OddServer("plain") as s:
        tl = Me.measure_request(cfg_of(s), "hi", 5, top_logprobs=5)
        assert tl.completion_tokens == 5 and tl.token_source.startswith("chunks")
        assert any("no" in n and "log-prob" in n for n in tl.notes)
        with pytest.raises(E.NoLogprobs, match="no log-probabilities"):
            Me.next_token(cfg_of(s), "The capital of France is", 5)


def test_garbage_stream_is_unexpected_reply():
    with OddServer("garbage") as s:
        with pytest.raises(E.UnexpectedReply, match="not JSON"):
            C.stream(cfg_of(s), "hi", 4)


def test_silent_server_times_out():
    with OddServer("slow") as s:
        with pytest.raises(E.ServerTimeout, match="sent nothing for 0.5 s"):
            C.stream(cfg_of(s, read_timeout_s=0.5), "hi", 4)


def test_missing_api_key_is_explained():
    with OddServer("auth") as s:
        with pytest.raises(E.AuthFailed, match="wants an API key"):
            probe(cfg_of(s))
        assert probe(cfg_of(s, api_key="k")).models == ("odd",)


def test_metrics_parsed_with_prometheus_parser():
    with OddServer("metrics") as s:
        cfg = cfg_of(s)
        info = probe(cfg)
        assert info.offer.kv_usage == "vllm:kv_cache_usage_perc" and info.engine == "vLLM"
        assert set(info.offer.spec) >= {"vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens"}
        a, b = M.sample_metrics(cfg), M.sample_metrics(cfg)
        assert a.kv_usage == pytest.approx(0.25) and a.running == 3 and a.waiting == 1
        d = M.spec_delta(a, b)  # the page's counters grow by 40 drafted, 30 accepted per scrape
        assert d["drafted"] == 40 and d["accepted"] == 30 and d["acceptance"] == pytest.approx(0.75)


def test_metrics_that_are_not_prometheus_text_are_refused():
    with pytest.raises(E.UnexpectedReply, match="Prometheus"):
        M.parse("this is { not metrics\n")


def test_multi_token_chunks_use_the_servers_count():
    res = C.StreamResult(10, 8, (C.Chunk(0.1, "a", 1, False), C.Chunk(0.2, "b", 1, False), C.Chunk(0.3, "c", 1, False)),
                         0.31, "length", {"prompt_tokens": 7, "completion_tokens": 6}, None, 0.0)
    tl = Me.timeline(res)
    assert tl.completion_tokens == 6 and sum(tl.chunk_tokens) == 6 and tl.token_source == "usage"
    assert tl.tpot_s == pytest.approx(0.2 / (6 - tl.chunk_tokens[0]))
    assert any("more than one token" in n for n in tl.notes)


# ------------------------------------------------------------------------------------------------ llama-cpp-python
# llama.cpp's own server (the reference) is tested in test_llama_server.py; llama-cpp-python's Python server stays
# for what it does differently: no /metrics and no /slots, and one request at a time.
def test_llama_cpp_python_probe_says_what_it_lacks(llama_server):
    info = probe(cfg_of(llama_server))
    assert info.models == (llama_server.model,) and info.model_listed
    assert not info.offer.has_metrics and info.offer.slots is None and info.offer.kv_usage is None
    assert any("no /metrics endpoint" in n for n in info.notes)


@pytest.mark.serial  # its batching verdict compares two measured throughputs: starved at idle priority, it misread
def test_llama_cpp_python_concurrency_sweep_serializes(llama_server):
    """llama-cpp-python's server runs one request at a time: of 4 requests sent together, each streams only after
    the previous one has finished (checked on the arrival order of chunks, not on a speed)."""
    try:
        cs = Co.concurrency_sweep(cfg_of(llama_server), (1, 4), new_tokens=6, prompt_tokens=24)
    except Exception:
        time.sleep(1.0)  # the process may still be dying
        why = crash_of(llama_server)
        if why:  # this machine's build of llama.cpp faulted (a signal), not the sweep: a failure under CI
            unavailable(why)
        raise
    one, four = cs.levels
    assert one.failed == four.failed == 0 and len(four.requests) == 4
    assert all(r.completion_tokens == 6 for r in four.requests)
    abs_first = sorted((r.start_s + r.chunk_s[0], r.start_s + r.chunk_s[-1]) for r in four.requests)
    assert max(r.start_s for r in four.requests) < min(end for _, end in abs_first)  # all sent before any finished
    for (_, prev_last), (next_first, _) in zip(abs_first, abs_first[1:]):
        assert next_first >= prev_last - 0.05  # no two requests stream at the same time
    assert "batches requests" not in Co.batching_verdict(cs.levels)
    assert cs.metrics_before is None  # no /metrics, no /slots: nothing sampled, nothing invented
    assert all(Me.server_split(r) is None for r in four.requests)  # and no timings of its own


def _level(n, lat, thr):
    sp = Me.Spread(lat, lat, lat, n)
    return Co.ConcurrencyLevel(n, (), lat, thr, sp, sp, sp, 0, (), ())


def test_implausible_concurrency_numbers_are_flagged():
    assert Co.concurrency_flags([_level(1, 1.0, 30), _level(4, 1.1, 100)]) == []
    faster = Co.concurrency_flags([_level(1, 1.0, 30), _level(4, 0.5, 100)])
    assert len(faster) == 1 and faster[0].startswith("implausible: 4 parallel requests each took less time")
    superlinear = Co.concurrency_flags([_level(1, 1.0, 30), _level(2, 1.0, 80)])
    assert len(superlinear) == 1 and "more than 2" in superlinear[0]
    assert "batches requests" in Co.batching_verdict([_level(1, 1.0, 30), _level(8, 1.5, 150)])
    assert "one after another" in Co.batching_verdict([_level(1, 1.0, 30), _level(8, 8.0, 31)])


@pytest.mark.parametrize("lo,hi,ratio", [(1, 4, 4), (1, 2, 2), (1, 8, 8), (2, 8, 4)])
def test_batching_verdict_needs_half_the_ideal_rise(lo, hi, ratio):
    """llama-cpp-python's server (one request at a time) once showed 1.31x from 1 to 4 requests and was
    called batching. The bar is half of the ideal rise (and above noise): just under it gets no batching verdict,
    just over it does; a flat rise says one after another."""
    bar = Co.batching_bar(ratio)
    assert bar == pytest.approx(max(1 + 0.5 * (ratio - 1), 1 + 2 * Me.NOISE))
    verdict = lambda gain: Co.batching_verdict([_level(lo, 1.0, 30), _level(hi, 2.0, 30 * gain)])  # noqa: E731
    assert "batches requests" in verdict(bar * 1.02)
    below = verdict(bar * 0.98)
    assert "batches requests" not in below and "No clear batching" in below
    assert "one after another" in verdict(1.05)
    assert "batches requests" not in verdict(1.31)


def test_batching_verdict_is_noise_aware():
    """A level whose requests disagree among themselves by +-40% raises the noise, and the bar with it: a 1.55x
    rise from 1 to 2 requests is batching in a quiet sweep, but no clear verdict in that noisy one."""
    quiet = [_level(1, 1.0, 30), _level(2, 1.2, 30 * 1.55)]
    assert "batches requests" in Co.batching_verdict(quiet)
    noisy_tpot = Me.Spread(0.05, 0.03, 0.07, 2)  # half range 0.02 / median 0.05 = 40 %
    sp = Me.Spread(1.2, 1.2, 1.2, 2)
    rt = object()
    noisy2 = Co.ConcurrencyLevel(2, (rt, rt), 1.2, 30 * 1.55, sp, sp, noisy_tpot, 0, (), ())
    v = Co.batching_verdict([_level(1, 1.0, 30), noisy2])
    assert "batches requests" not in v and "No clear batching" in v


def test_implausible_prompt_numbers_are_flagged():
    p = lambda n, pt, t: Me.PromptPoint(n, pt, "usage", Me.Spread(t, t, t, 1), Me.Spread(.01, .01, .01, 1), ())  # noqa
    assert Me.prompt_flags([p(16, 20, 0.05), p(512, 520, 0.4)]) == []
    flags = Me.prompt_flags([p(16, 20, 0.5), p(512, 20, 0.1)])
    assert len(flags) == 2 and "shorter time to first token" in flags[0] and "no more prompt tokens" in flags[1]
    q = lambda n, tpot: Me.PromptPoint(n, n, "usage", Me.Spread(n / 1e3, n / 1e3, n / 1e3, 1),  # noqa: E731
                                       Me.Spread(tpot, tpot, tpot, 1), ())
    noisy = Me.prompt_flags([q(16, 0.02), q(256, 0.06), q(1024, 0.03)])
    assert len(noisy) == 1 and noisy[0].startswith("noisy: the time per output token ranged from 20 to 60 ms")


def test_serve_bench_cli_refused(capsys):
    from engine.__main__ import main

    assert main(["serve-bench", "--base-url", f"http://127.0.0.1:{free_port()}"]) == 2
    assert "error (unreachable): Could not connect" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ capacity
def _req(tpot_ms: float, n: int = 10, ttft_s: float = 0.1, timings=None, start=0.0):
    chunks = tuple(ttft_s + i * tpot_ms / 1000 for i in range(n))
    return Me.RequestTimeline(start, ttft_s, chunks[-1], chunks, (1,) * n, "x" * n, n, "usage", 20, "usage",
                              "length", timings)


def _lv(n, tpots, metrics=(), timings=None, wall=None, failed=0):
    reqs = tuple(_req(t, timings=timings) for t in tpots)
    sp = lambda xs: Me.Spread.of(xs)  # noqa: E731
    wall = wall if wall is not None else max(r.end_s for r in reqs)
    return Co.ConcurrencyLevel(n, reqs, wall, 1.0, sp(r.latency_s for r in reqs), sp(r.ttft_s for r in reqs),
                               sp(r.tpot_s for r in reqs), failed, ("boom",) if failed else (), tuple(metrics))


def _sample(**kw):
    base = dict(t_s=0.0, kv_usage=None, running=None, waiting=None, spec_drafts=None, spec_draft_tokens=None,
                spec_accepted=None, spec_accept_length=None)
    return M.MetricsSample(**{**base, **kw})


def test_p90_interpolates_and_ignores_nan():
    assert Co.p90([10.0] * 9 + [100.0]) == pytest.approx(19.0)  # rank 8.1 of 0..9
    assert Co.p90([5.0]) == 5.0 and math.isnan(Co.p90([])) and Co.p90([1.0, math.nan, 3.0]) == pytest.approx(2.8)


def test_capacity_counts_the_levels_under_the_target():
    levels = [_lv(1, [20] * 3), _lv(2, [30, 32]), _lv(4, [60, 70, 80, 150])]
    cap = Co.capacity(levels, 50)
    assert cap.users == 2 and cap.tried == 4 and "**2 users at once**" in cap.text and "under **50 ms**" in cap.text
    assert cap.p90_ms[4] == pytest.approx(Co.p90([60, 70, 80, 150]), rel=1e-6)
    assert cap.reason.startswith("decoding")
    assert Co.capacity(levels, 10).users == 0 and "cannot give even 1 user" in Co.capacity(levels, 10).text
    top = Co.capacity(levels, 1000)
    assert top.users == 4 and top.reason is None and "may give more" in top.text
    # a level that passes after one that failed does not count: capacity is the run from the bottom
    assert Co.capacity([_lv(1, [20]), _lv(2, [90]), _lv(4, [40] * 4)], 50).users == 1


@pytest.mark.parametrize("metrics,timings,wall,failed,word", [
    ((_sample(kv_usage=0.97),), None, None, 0, "the KV cache was full"),
    ((), {"prompt_ms": 400.0, "predicted_ms": 10.0}, 1.0, 0, "prompt processing"),
    ((_sample(n_slots=2, waiting=2.0),), None, None, 0, "slots: the server has only 2 slots"),
    ((), None, None, 1, "1 of 4 requests failed"),
])
def test_capacity_says_why_not(metrics, timings, wall, failed, word):
    levels = [_lv(1, [20]), _lv(4, [90] * 4, metrics, timings, wall, failed)]
    cap = Co.capacity(levels, 50)
    assert cap.users == 1 and cap.reason.startswith(word) and word in cap.text


def test_slots_and_per_position_counters_are_read():
    text = ("# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n"
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 3\n')
    assert M.parse(text).per_label(M.SPEC_ACCEPTED_PER_POS, "position") == (
        "llamacpp:spec_decode_num_accepted_tokens_per_pos", (9.0, 0.0, 3.0))
    s = M.parse_slots([{"id": 0, "n_ctx": 100, "is_processing": True, "n_prompt_tokens": 30},
                       {"id": 1, "n_ctx": 100, "is_processing": False}])
    assert (s.n_slots, s.busy, s.cached) == (2, 1, (30, 0)) and s.kv_usage == pytest.approx(0.15)
    smp = M.summarize(None, 0.0, s)
    assert smp.kv_usage == pytest.approx(0.15) and smp.kv_name == M.SLOTS_KV and smp.running == 1
    assert smp.spec_draft_tokens is None  # not exported: missing, not 0
    with pytest.raises(E.UnexpectedReply):
        M.parse_slots({"not": "a list"})
