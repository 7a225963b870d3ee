"""Batching: every request gets exactly its tokens, the same tokens as alone (greedy), under both policies."""
from types import SimpleNamespace

import numpy as np
import pytest

from engine.batching import bench as bench_batching
from engine.batching.experiment import decode_sweep, load_sweep, serve, solo_tokens
from engine.batching.workload import POLICIES, Request, WorkloadSettings, make_workload, scale_arrivals
from engine.core.kv import kv_bytes_for


@pytest.fixture(scope="module")
def tiny_reqs(tiny_lm):
    # Fast arrivals and a 1..9 token spread: batches mix prompt lengths and finish at different steps.
    return make_workload(tiny_lm.tokenizer, WorkloadSettings(n_requests=7, rate_per_s=40.0, min_new_tokens=1,
                                                             max_new_tokens=9, seed=3))


@pytest.fixture(scope="module")
def tiny_runs(tiny_lm, tiny_reqs):
    return {p: serve(tiny_lm, tiny_reqs, p, max_batch=3, batch_timeout_s=0.05) for p in POLICIES}


def test_workload_is_seeded_and_within_settings(tiny_lm):
    s = WorkloadSettings(n_requests=9, rate_per_s=5.0, min_new_tokens=3, max_new_tokens=7, seed=11)
    a, b = make_workload(tiny_lm.tokenizer, s), make_workload(tiny_lm.tokenizer, s)
    assert a == b
    assert a[0].arrival_s == 0.0
    arr = [r.arrival_s for r in a]
    assert arr == sorted(arr)
    assert all(3 <= r.max_new_tokens <= 7 for r in a)
    assert len({r.prompt for r in a}) > 1  # prompt lengths vary, so padding is exercised
    assert make_workload(tiny_lm.tokenizer, WorkloadSettings(n_requests=9, seed=12)) != a
    faster = scale_arrivals(a, 2.0)
    assert [r.arrival_s for r in faster] == pytest.approx([t / 2 for t in arr])
    with pytest.raises(ValueError):
        make_workload(tiny_lm.tokenizer, WorkloadSettings(rate_per_s=0.0))


@pytest.mark.parametrize("policy", POLICIES)
def test_tokens_exact_count_and_equal_to_alone(tiny_lm, tiny_reqs, tiny_runs, policy):
    res = tiny_runs[policy]
    assert [r.rid for r in res.requests] == [q.rid for q in tiny_reqs]
    lengths = {len(q.prompt_ids) for q in tiny_reqs}
    assert len(lengths) > 1
    for rec, req in zip(res.requests, tiny_reqs):
        assert len(rec.token_ids) == req.max_new_tokens
        assert list(rec.token_ids) == solo_tokens(tiny_lm, req), f"request {req.rid} differs from running alone"


@pytest.mark.parametrize("policy", POLICIES)
def test_times_are_ordered_and_nothing_runs_before_arrival(tiny_runs, policy):
    res = tiny_runs[policy]
    for r in res.requests:
        assert r.arrival_s <= r.admitted_s < r.first_token_s <= r.done_s <= r.released_s
    for s in res.steps:
        assert s.start_s < s.end_s
        for rid in s.rids:
            assert res.requests[rid].arrival_s <= s.start_s
    starts = [s.start_s for s in res.steps]
    assert starts == sorted(starts)  # one forward pass at a time


def test_static_wastes_slots_and_continuous_does_not(tiny_runs, tiny_reqs):
    st, co = tiny_runs["static"].metrics(), tiny_runs["continuous"].metrics()
    assert st["wasted_decode_slots"] > 0  # output lengths differ inside a static batch
    assert co["wasted_decode_slots"] == 0
    for m in (st, co):
        assert m["tokens"] == sum(r.max_new_tokens for r in tiny_reqs)
        assert m["decode_slots"] - m["wasted_decode_slots"] == m["tokens"] - len(tiny_reqs)
    # static: rows of a batch are released together, at the end of the batch
    res = tiny_runs["static"]
    for s in res.steps:
        if s.phase == "prefill":
            assert len({res.requests[i].released_s for i in s.rids}) == 1
    # continuous: a row is never carried past its last token
    for r in tiny_runs["continuous"].requests:
        assert r.released_s == r.done_s


@pytest.mark.parametrize("policy", POLICIES)
def test_kv_bytes_measured_match_the_batch_shape(tiny_lm, tiny_runs, policy):
    per_token = kv_bytes_for(tiny_lm.info, 1)
    for s in tiny_runs[policy].steps:
        assert s.kv_bytes % (per_token * len(s.rids) if s.phase == "decode" else per_token) == 0
        assert s.kv_real_tokens * per_token <= s.kv_bytes


def test_max_batch_is_respected(tiny_runs):
    for res in tiny_runs.values():
        assert max(len(s.rids) for s in res.steps) <= 3


def test_decode_sweep_tiny(tiny_lm):
    pts = decode_sweep(tiny_lm, [4, 1, 2], steps=2, warmup=1)
    assert [p.batch for p in pts] == [1, 2, 4]
    for p in pts:
        assert p.timed_steps == 2 and len(p.step_seconds) == 2 and p.median_s > 0
        # cache after the run: context + timed steps, per row, measured == formula
        assert p.kv_bytes == kv_bytes_for(tiny_lm.info, p.context_tokens + 2, p.batch)
        assert p.tokens_per_s == pytest.approx(p.batch / p.median_s)


def test_load_sweep_tiny(tiny_lm):
    base = WorkloadSettings(n_requests=3, rate_per_s=50.0, min_new_tokens=2, max_new_tokens=4, seed=0)
    pts = load_sweep(tiny_lm, base, rates=(0.0, 50.0), probe_tokens=3, max_batch=4)
    assert [p.background for p in pts] == [0, 3]
    alone = pts[0]
    assert alone.mean_batch_while_decoding == 1.0
    assert all(len(p.probe.token_ids) == 3 for p in pts)
    assert pts[0].probe.token_ids == pts[1].probe.token_ids  # batching never changes greedy tokens


def test_serve_rejects_bad_input(tiny_lm, tiny_reqs):
    with pytest.raises(ValueError):
        serve(tiny_lm, tiny_reqs, "fifo")
    with pytest.raises(ValueError):
        serve(tiny_lm, tiny_reqs, "static", max_batch=0)


def test_single_token_requests_and_idle_gaps(tiny_lm):
    ids = make_workload(tiny_lm.tokenizer, WorkloadSettings(n_requests=1)).__getitem__(0).prompt_ids
    reqs = (Request(0, 0.0, "a", ids, 1), Request(1, 0.15, "b", ids[:5], 2))
    for p in POLICIES:
        res = serve(tiny_lm, reqs, p, max_batch=2, batch_timeout_s=0.01)
        assert [len(r.token_ids) for r in res.requests] == [1, 2]
        assert res.requests[1].admitted_s >= 0.15  # the server idled until the request arrived


def test_bench_tiny():
    args = SimpleNamespace(batch_sizes="1,2", steps=1, warmup=0, requests=3, rate=50.0, min_new=1, max_new=3,
                           max_batch=2, timeout=0.02, seed=0, check=True)
    from engine.core.loaded import ModelRef
    from engine.models.loading import load_model

    r = bench_batching.run(load_model(ModelRef("tiny-random"), device="cpu"), args)
    assert [p["batch"] for p in r["decode_sweep"]] == [1, 2]
    assert r["every_request_got_its_tokens"]
    assert r["same_tokens_as_alone"] == {"static": True, "continuous": True}
    assert np.isfinite(r["throughput_ratio_continuous_vs_static"])
    assert "continuous" in bench_batching.summary(r)


def test_embedded_short_run_equals_alone(embedded_lm):
    """The real model in fp32: left padding, masks and positions keep greedy tokens identical to alone."""
    reqs = make_workload(embedded_lm.tokenizer, WorkloadSettings(n_requests=3, rate_per_s=100.0, min_new_tokens=2,
                                                                 max_new_tokens=5, seed=1))
    assert len({len(r.prompt_ids) for r in reqs}) > 1
    solo = {r.rid: solo_tokens(embedded_lm, r) for r in reqs}
    for p in POLICIES:
        res = serve(embedded_lm, reqs, p, max_batch=2, batch_timeout_s=0.01)
        for rec in res.requests:
            assert list(rec.token_ids) == solo[rec.rid], (p, rec.rid)


def test_continuous_arrivals_never_stall_the_rows_decoding(tiny_lm, monkeypatch):
    """A request arrives during every prefill (each prefill slowed to 30 ms, arrivals 10 ms apart): the rows
    already in the batch still take a decode step after each join, as the class batcher does, so no two prefill
    passes run back to back while rows are decoding, and the first request is done before the last arrival's
    own prefill has finished."""
    from engine.batching import experiment

    # A virtual clock: each prefill costs 30 ms and each decode step 5 ms of it, whatever the machine's load (on
    # the real clock a loaded machine let every arrival in before the first prefill ended, and nothing joined).
    clock = [0.0]
    real_prefill, real_decode = experiment.prefill_rows, experiment.decode_rows

    def costs(seconds, real):
        def run(*a, **k):
            out = real(*a, **k)
            clock[0] += seconds
            return out
        return run

    monkeypatch.setattr(experiment, "now", lambda device=None: clock[0])
    monkeypatch.setattr(experiment, "prefill_rows", costs(0.03, real_prefill))
    monkeypatch.setattr(experiment, "decode_rows", costs(0.005, real_decode))
    monkeypatch.setattr(experiment._Server, "wait_until", lambda self, t: clock.__setitem__(0, max(clock[0], t)))
    ids = (5, 6, 7, 8)
    reqs = tuple(Request(i, 0.01 * i, f"r{i}", ids, 3) for i in range(8))
    res = serve(tiny_lm, reqs, "continuous", max_batch=8, batch_timeout_s=0.0)
    phases = [s.phase for s in res.steps]
    assert "prefill" in phases[1:], "requests joined a running batch"
    assert all(not (a == b == "prefill") for a, b in zip(phases, phases[1:])), phases
    first = next(r for r in res.requests if r.rid == 0)
    assert len(first.token_ids) == 3 and first.done_s < max(r.first_token_s for r in res.requests)
