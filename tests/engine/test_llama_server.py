"""llama.cpp's own llama-server (built from the llama.cpp that llama-cpp-python vendors, tests/conftest.py
``llama_cpp_server``) as the reference the serving page must be right about: what its /metrics, /slots and
per-request ``timings`` really hold, read by the page's own code, and the names table checked against them (these
tests fail when the server's names change). No fakes: every answer here comes from the real server."""
import json
import math
import re
import time

import pytest

from engine.serving import config as K
from engine.serving import concurrency as Co
from engine.serving import measure as Me
from engine.serving import metrics as M
from engine.serving import names as N
from engine.serving.probe import probe


def cfg_of(server, **kw):
    return K.ServerConfig(server.base_url, server.model, **kw)


def type_names(text: str) -> set[str]:
    """Every metric name the server declares in a '# TYPE' line, as written."""
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


# ------------------------------------------------------------------------------------------------ names
def test_names_table_is_what_llama_server_exports(llama_cpp_server):
    text = llama_cpp_server.get("/metrics").decode()
    got = type_names(text)
    want = set(N.LLAMA_CPP.exports)
    assert got - {N.LLAMA_CPP.extra["per_pos_export"]} == want, (
        f"llama-server's metric names changed: new {sorted(got - want)}, gone {sorted(want - got)}; "
        "update engine/serving/names.py (and its table in docs/serving.md)")
    m = M.parse(text)
    assert m.engine == "llama.cpp server"
    for q, name in N.LLAMA_CPP.names.items():
        if q != "spec_accepted_per_pos":  # only once the server has drafted (see the speculative test)
            assert m.get((name,)) is not None, f"{q}: {name} is not in the real /metrics"
    # the gauge the page used to look for does not exist in this build: KV use must come from /slots
    assert m.get(M.KV_USAGE) is None and N.LLAMA_CPP.name("kv_usage") is None
    assert not any("kv_cache" in n for n in got)


def test_slots_and_timings_fields_are_what_the_table_says(llama_cpp_server):
    cfg = cfg_of(llama_cpp_server)
    tl = Me.measure_request(cfg, Me.unique_prompt(60, f"fields-{time.time_ns()}"), 8)
    assert set(N.TIMINGS_FIELDS) <= set(tl.server_timings), sorted(tl.server_timings)
    assert not set(N.TIMINGS_SPEC_FIELDS) & set(tl.server_timings)  # no drafting, no draft counts
    slots = json.loads(llama_cpp_server.get("/slots"))
    assert len(slots) == llama_cpp_server.parallel
    for s in slots:
        assert set(N.SLOTS_FIELDS) <= set(s), sorted(s)
    served = [s for s in slots if "id_task" in s]
    assert served and all(set(N.SLOTS_TASK_FIELDS) <= set(s) for s in served)


# ------------------------------------------------------------------------------------------------ reading it
def test_probe_reads_metrics_and_slots(llama_cpp_server):
    info = probe(cfg_of(llama_cpp_server))
    o = info.offer
    assert info.engine == "llama.cpp server" and o.has_metrics
    assert o.kv_usage == M.SLOTS_KV and o.running == "llamacpp:requests_processing"
    assert o.waiting == "llamacpp:requests_deferred"
    assert o.slots.n_slots == llama_cpp_server.parallel
    assert sum(o.slots.n_ctx) == llama_cpp_server.n_ctx  # the slots share the context
    assert "llamacpp:spec_decode_num_draft_tokens" in o.spec
    assert not any("no /metrics" in n for n in info.notes)
    json.dumps(info.to_dict())  # the CLI prints it


def test_timeline_with_the_servers_own_timings(llama_cpp_server):
    cfg = cfg_of(llama_cpp_server)
    prompt = Me.unique_prompt(80, f"tl-{time.time_ns()}")
    tl = Me.measure_request(cfg, prompt, 12)
    assert tl.completion_tokens == 12 and tl.token_source == "usage"
    assert 0 < tl.ttft_s <= tl.chunk_s[-1] <= tl.end_s and tl.text
    t = tl.server_timings
    assert t["predicted_n"] == 12 and t["prompt_n"] + t["cache_n"] == tl.prompt_tokens
    sp = Me.server_split(tl)
    # the server's prompt time is inside the client's wait for the first token (different clocks, same event
    # order): a server prompt time longer than the client's TTFT would mean the two are not what they claim
    assert 0 < sp["server_prompt_ms"] <= sp["ttft_ms"] + 1.0
    assert sp["outside_ms"] == pytest.approx(sp["ttft_ms"] - sp["server_prompt_ms"], abs=1.0)
    assert sp["server_predicted_ms"] <= (tl.end_s - tl.ttft_s) * 1000 + 50
    # the same prompt again: the slot's cache serves it, and the server says so
    again = Me.measure_request(cfg, prompt, 4).server_timings
    assert again["cache_n"] > 0 and again["prompt_n"] < t["prompt_n"]


def test_slots_show_the_cache_filling(llama_cpp_server):
    cfg = cfg_of(llama_cpp_server)
    before = M.fetch_slots(cfg)
    tl = Me.measure_request(cfg, Me.unique_prompt(300, f"kv-{time.time_ns()}"), 16)
    after = M.fetch_slots(cfg)
    assert after.n_slots == before.n_slots and after.busy == 0
    # one slot now holds the prompt and what it generated (the cache outlives the request)
    assert max(after.cached) >= tl.prompt_tokens
    assert max(after.cached) <= tl.prompt_tokens + tl.completion_tokens + 1
    assert after.kv_usage == pytest.approx(sum(after.cached) / sum(after.n_ctx))


def test_next_token_distribution(llama_cpp_server):
    nt = Me.next_token(cfg_of(llama_cpp_server), "The capital of France is", 8)
    assert 2 <= len(nt.tokens) <= 9
    assert list(nt.probs) == sorted(nt.probs, reverse=True) and 0 < nt.covered <= 1 + 1e-6
    assert nt.chosen == nt.tokens[0]  # greedy: the token sent is the most likely one


def test_prompt_sweep(llama_cpp_server):
    sw = Me.prompt_sweep(cfg_of(llama_cpp_server), (16, 320), new_tokens=4, repeats=2)
    short, long = sw.points
    assert long.prompt_tokens > 3 * short.prompt_tokens
    assert long.ttft_s.lo > short.ttft_s.lo  # prefill reads every prompt token


def test_concurrency_sweep_batches_and_kv_moves(llama_cpp_server):
    """4 slots: 4 requests sent together stream at the same time (continuous batching), /slots shows more of
    the KV cache in use, /metrics shows them running; the capacity verdict follows the p90 it measured."""
    cfg = cfg_of(llama_cpp_server)
    cs = Co.concurrency_sweep(cfg, (1, 4), new_tokens=12, prompt_tokens=450)
    one, four = cs.levels
    assert one.failed == four.failed == 0 and all(r.completion_tokens == 12 for r in four.requests)
    spans = [(r.start_s + r.chunk_s[0], r.start_s + r.chunk_s[-1]) for r in four.requests]
    assert max(a for a, _ in spans) < min(b for _, b in spans)  # every request streamed while the others did
    kv1 = [s.kv_usage for s in one.metrics if s.kv_usage is not None]
    kv4 = [s.kv_usage for s in four.metrics if s.kv_usage is not None]
    assert kv1 and kv4 and all(s.kv_name == M.SLOTS_KV for s in four.metrics)
    # the slots keep their caches between requests (other tests' too), so what moves is the total: four fresh
    # 450-token prompts hold more than one did beside what the other slots kept
    assert max(kv4) > max(kv1) and max(kv4) >= 4 * 450 / llama_cpp_server.n_ctx and max(kv4) > min(kv4)
    assert max(s.running for s in four.metrics) >= 2
    tight = Co.capacity(cs.levels, 0.5)
    assert tight.users == 0 and tight.reason and "cannot give even 1 user" in tight.text
    p = tight.p90_ms
    loose = Co.capacity(cs.levels, max(p.values()) + 1)
    assert loose.users == 4 and "**4 users at once**" in loose.text
    between = Co.capacity(cs.levels, (p[1] + p[4]) / 2) if p[4] > p[1] * 1.1 else None
    if between is not None:
        assert between.users == 1 and between.reason


def test_more_requests_than_slots_are_deferred(llama_cpp_server):
    """8 requests on 4 slots: /metrics counts the others as deferred, and the verdict says they queued."""
    cs = Co.concurrency_sweep(cfg_of(llama_cpp_server), (8,), new_tokens=16, prompt_tokens=32)
    lv = cs.levels[0]
    assert lv.failed == 0 and max(s.waiting for s in lv.metrics) >= 1
    assert max(s.busy_slots for s in lv.metrics) <= 4 == lv.metrics[0].n_slots
    cap = Co.capacity(cs.levels, 10_000)
    assert cap.users == 8 and "queued for a slot" in cap.text


def test_serve_bench_cli_json(llama_cpp_server, capsys):
    from engine.__main__ import main

    rc = main(["serve-bench", "--base-url", llama_cpp_server.base_url, "--model", llama_cpp_server.model,
               "--concurrency", "1,2", "--new-tokens", "4", "--prompt-tokens", "16", "--top-logprobs", "3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [lv["concurrency"] for lv in out["concurrency_sweep"]["levels"]] == [1, 2]
    assert out["timeline"]["completion_tokens"] == 4 and len(out["next_token"]["tokens"]) >= 2
    assert out["probe"]["engine"] == "llama.cpp server" and out["probe"]["offer"]["slots"]["n_slots"] == 4
    assert out["capacity"]["tried"] == 2 and "time per token under 100 ms" in out["capacity"]["text"]


# ------------------------------------------------------------------------------------------------ speculative
def test_speculative_counters_grow(llama_cpp_spec_server):
    """The model drafting for itself (-md, the same GGUF): the counters grow during a run, nearly every drafted
    token is accepted, accepted tokens are counted per draft position, and the names are what the table says."""
    cfg = cfg_of(llama_cpp_spec_server)
    sc = M.Scraper(cfg)
    before = sc.sample()
    tl = Me.measure_request(cfg, "Count: one, two, three, four, five, six,", 48)
    after = sc.sample()
    d = M.spec_delta(before, after)
    assert d["drafted"] > 0 and d["accepted"] > 0 and d["drafts"] > 0
    assert d["acceptance"] > 0.5  # the same model as its own draft
    t = tl.server_timings
    assert t["draft_n"] > 0 and t["draft_n_accepted"] <= t["draft_n"]
    # this request's own counts are within the server's counters' growth (they are the same drafts)
    assert t["draft_n"] <= d["drafted"] and t["draft_n_accepted"] <= d["accepted"]
    per = d["accepted_per_pos"]
    assert 1 <= len(per) <= 4 and sum(per) == pytest.approx(d["accepted"])
    assert all(a >= b for a, b in zip(per, per[1:]))  # a later position is accepted only after the earlier ones
    assert all(0 <= r <= 1 for r in d["accept_rate_per_pos"])
    text = llama_cpp_spec_server.get("/metrics").decode()
    assert type_names(text) == set(N.LLAMA_CPP.exports) | {N.LLAMA_CPP.extra["per_pos_export"]}
    slots = M.fetch_slots(cfg)
    assert slots.speculative and slots.n_slots == llama_cpp_spec_server.parallel
    assert not math.isnan(d["acceptance"])
