"""Compiled mode teaches every lesson (issue 50): the class batcher's padded batch steps and a speculative verify
pass run as compiled graphs on static caches, with answers equal to eager ones in float32, no compile inside a
measured pass, and a compile record a page can show. One compiled tiny model per module: each new graph costs
about a minute on a busy 2-core CPU (seconds once torch's compile cache on disk has it), so the tests use few."""
from __future__ import annotations

import threading

import pytest

from engine.core import compiled as C
from engine.core import compile_record as CR
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.core.request import RunRequest
from engine.jobs.classbatch import ANSWER, AnswerRequest, group
from engine.jobs.worker import Worker

GREEDY = SamplingSettings(temperature=0.0)
# similar lengths: they are prefilled as one group and decode as one batch of 3 (padded to 4) to the end
CLASS = ["the quick brown fox", "one two three four", "a cat on the mat"]


@pytest.fixture(scope="module")
def tiny_compiled(tiny_lm):
    return C.to_mode(tiny_lm, "compiled")


def _class_traces(lm, prompts, n):
    """The prompts asked at once, one session each, of a batching worker: their traces."""
    w = Worker()
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(60)), session="teacher")
    started.wait(60)
    jobs = [w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, p, False, n, GREEDY, 0), analyse=False), session=f"s{i}")
            for i, p in enumerate(prompts)]
    release.set()
    try:
        return [j.result(900) for j in jobs]
    finally:
        w.close()


def test_a_class_in_compiled_mode_is_one_batch_of_compiled_steps_equal_to_each_alone(tiny_lm, tiny_compiled,
                                                                                      one_thread):
    """The first class at a new batch size does not wait for its graph: its steps run eager while the graph
    compiles in the background (engine.core.background_compile), then compiled; the next class is compiled from
    its first decode step. Every answer equals the student's alone."""
    from engine.core.background_compile import COMPILER

    assert group(tiny_compiled) is not None
    first = _class_traces(tiny_compiled, CLASS, 6)
    COMPILER.wait_idle(tiny_compiled.ref, 900)
    traces = _class_traces(tiny_compiled, CLASS, 6)
    for p, t0, t in zip(CLASS, first, traces):
        alone = run_trace(tiny_lm, p, GREEDY, 6, 0, False, analyse=False)
        assert t0.generated_ids == t.generated_ids == alone.generated_ids, p
        assert t.largest_batch == len(CLASS)
        flags = [s.compiled for s in t0.steps]
        assert flags[:2] == [False, False] and flags == sorted(flags)  # eager until the graph was ready, not after
        assert [s.compiled for s in t.steps] == [False] + [True] * (len(t.steps) - 1)  # prefill eager
        assert t.engine_mode == "compiled"
    status = C.compile_status(tiny_compiled)
    name = CR.batch_name(CR.padded_batch(len(CLASS)), CR.SHORTEST)
    assert name in dict(status.done) and status.current is None and status.failure is None
    assert CR.last_compile_s(tiny_compiled, name) is not None  # kept in the cache folder for the next start


# a prompt that repeats itself, so prompt lookup drafts from it
REPEATING = list(range(5, 40)) + list(range(5, 20))


@pytest.mark.parametrize("drafter", ["lookup", "early-exit:1"])
def test_a_compiled_race_verifies_in_compiled_passes_and_equals_plain_greedy(tiny_lm, tiny_compiled, one_thread,
                                                                             drafter):
    from engine.speculative.decoding import race

    r = race(tiny_compiled, REPEATING, drafter, 4, GREEDY, 24)
    eager = race(tiny_lm, REPEATING, drafter, 4, GREEDY, 24)
    assert r.identical and r.spec_ids == eager.plain_ids  # compiled speculative = plain greedy, token for token
    assert r.plain_mode == "compiled" and r.spec_mode == "compiled"
    assert eager.plain_mode == "eager" and eager.spec_mode == "eager"
    d = r.to_dict()
    assert d["plain"]["mode"] == "compiled" and d["speculative"]["mode"] == "compiled"
    assert r.rounds and all(x.compiled for x in r.rounds)
    assert r.drafted > 0 or drafter == "lookup"  # the tiny model's random text rarely repeats its prompt
    before = loop_graphs()
    race(tiny_compiled, REPEATING[:40], drafter, 4, GREEDY, 16)  # warmed: no compile inside a timed round
    assert loop_graphs() == before


def loop_graphs() -> int:
    import torch._dynamo.utils as du

    return int(du.counters["stats"]["unique_graphs"])


def test_a_rejected_draft_is_rolled_back_in_the_static_cache(tiny_compiled):
    """After a verify pass of k + 1 tokens keeps n, the next pass must see exactly the kept tokens: the logits of a
    pass after the rollback equal those of a fresh cache fed only the kept tokens."""
    import torch

    from engine.core.loop import crop, forward, prefill
    from engine.speculative.decoding import verify_cache, warm_verify

    assert warm_verify(tiny_compiled, 64, 5)
    kept = [5, 6, 7, 8, 9]
    cache = verify_cache(tiny_compiled, 64)
    prefill(tiny_compiled, torch.tensor([kept[:3]]), cache)
    forward(tiny_compiled, torch.tensor([[kept[3], kept[4], 99, 98, 97]]), cache, keep=5)  # 3 rejected
    assert crop(cache, 5)
    after = forward(tiny_compiled, torch.tensor([[11, 12, 13, 14, 15]]), cache, keep=5)
    fresh = verify_cache(tiny_compiled, 64)  # the same static cache, emptied
    prefill(tiny_compiled, torch.tensor([kept]), fresh)
    want = forward(tiny_compiled, torch.tensor([[11, 12, 13, 14, 15]]), fresh, keep=5)
    assert torch.allclose(after, want, atol=1e-5)


def test_bench_classroom_in_compiled_mode_says_its_batched_run_ran_compiled(tiny_compiled, one_thread):
    from types import SimpleNamespace

    from engine.batching import bench_classroom as classroom

    r = classroom.run(tiny_compiled, SimpleNamespace(sessions=3, new_tokens=3, repeats=1, no_analysis=True))
    assert r["engine_mode"] == "compiled" and r["batched_mode"] == "compiled" and r["serial_mode"] == "compiled"
    assert r["same_answers"] and r["runs"][1]["largest_batch"] == 3
    assert "compiled (" in classroom.summary(r)


def test_compile_status_says_what_compiles_and_its_last_time_before_it_starts(tiny_lm, tmp_path, monkeypatch):
    """A page can show the graph compiling, done and to do, seconds so far against the last time; before a graph's
    first compile the line says its time is unknown, after it the measured time (kept in the cache folder)."""
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path))
    lm = C.to_mode(tiny_lm, "compiled")  # its own record: nothing compiled yet
    assert C.compile_status(tiny_lm) is None and C.compile_status(lm).done == ()
    name = CR.batch_name(8, 256)
    heard = []
    shaped = C.shaped_of(lm)
    C.announce(lm, [name, CR.batch_name(16, 256)])
    with C.compiling(lm, name, heard.append):
        during = C.compile_status(lm)
    assert heard == [f"compiling the {name}: first compile: unknown"]
    assert during.current == name and during.seconds_so_far >= 0 and during.last_seconds is None
    assert during.to_do == (CR.batch_name(16, 256),) and "first compile: unknown" in during.line
    after = C.compile_status(lm)
    assert after.current is None and [n for n, _ in after.done] == [name] and after.to_do == (CR.batch_name(16, 256),)
    assert CR.last_compile_s(lm, name) == pytest.approx(dict(after.done)[name], abs=0.1)
    assert CR.expected_line(lm, name).startswith(f"compiling the {name}: last time ")
    with C.compiling(lm, CR.batch_name(16, 256), heard.append):
        raise RuntimeError("a graph break\nsecond line")
    assert "\n" not in shaped.failure and "a graph break" in shaped.failure and C.compile_status(lm).failure


def test_a_class_can_be_compiled_ahead_and_a_batch_past_the_largest_size_runs_eager(tiny_lm, tiny_compiled,
                                                                                    one_thread, monkeypatch):
    from engine.core import batch as B
    from engine.core.batch import Batch, decode_logits, prefill_logits, prepare_step, warm_batches

    monkeypatch.setattr(B, "BATCH_SIZES", (4,))  # the class test's graph only: a new one costs minutes here
    want = [CR.batch_name(4, CR.SHORTEST)]
    assert warm_batches(tiny_compiled, 3, 20) == want
    status = C.compile_status(tiny_compiled)
    assert set(want) <= set(dict(status.done)) and status.to_do == ()
    prompts = [(5 + i, 6, 7) for i in range(CR.BATCH_SIZES[-1] + 1)]  # 33 rows: a DynamicCache, eager steps
    for lm in (tiny_compiled, tiny_lm):
        batch = Batch(lm)
        kv, mask, logits, _ = prefill_logits(lm, prompts)
        batch.merge(kv, mask, list(prompts))
        assert not prepare_step(lm, batch)
        out = decode_logits(lm, batch, logits.argmax(-1).tolist()).argmax(-1).tolist()
        if lm is tiny_compiled:
            first = out
    assert first == out
