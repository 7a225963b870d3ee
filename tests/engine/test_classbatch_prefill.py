"""The class batcher's newcomers prefill as a prompt alone would (engine.core.prefill_buckets.joiner_mode): eager on a
cache the size of their prompts, or, in compiled mode where a bucket's graph beats eager (a GPU), each alone through
its bucket's graph, its keys and values copied into its row of the batch's static cache. Either way every answer
equals the student's alone in float32, for newcomers joining a running batch at different steps with prompts of
different lengths, and each trace says how its prefill ran in the words of a run alone (``Trace.prefill_mode``).
The bucket path is forced on this CPU
(``bucket_beats_eager``); a GPU takes it by itself."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import engine.settings as settings
from engine.core import compiled as C
from engine.core import prefill_buckets as PB
from engine.core.background_compile import BackgroundCompiler, CompileState, run_graphs
from engine.core.compile_watch import compile_prefill
from engine.core.prompt import encode_prompt
from engine.core.request import RunRequest
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.jobs import classbatch
from engine.jobs.classbatch import ANSWER, AnswerRequest
from engine.jobs.worker import Worker

GREEDY = SamplingSettings(temperature=0.0)
LONG_ANSWER = 40
# (prompt, new tokens): a 16-token bucket and two 64-token ones, of different lengths (no chat template)
JOINERS = [("the fox ran", 6), ("the quick brown fox jumps over the lazy dog again", 5),
           ("one two three four five six seven eight nine ten eleven twelve", 7)]
FIRST = "a much longer prompt with several more words in it than the first"


def _ask(w, lm, prompt, n, session):
    return w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, prompt, False, n, GREEDY, 0), analyse=False),
                 session=session)


def _joining_at_different_steps(lm, monkeypatch, joiners=JOINERS, first=FIRST):
    """A long answer decoding, and each joiner asked a few decode steps after the one before: their traces (the
    long answer's first). Each step is slowed a little so the joiners arrive mid-batch."""
    real = classbatch._decode

    def slow(*a, **k):
        time.sleep(0.02)
        return real(*a, **k)

    monkeypatch.setattr(classbatch, "_decode", slow)
    w = Worker()
    try:
        jobs = [_ask(w, lm, first, LONG_ANSWER, "first")]
        for i, (p, n) in enumerate(joiners):
            seen = len(w.snapshot()["steps"])
            deadline = time.time() + 60
            while len(w.snapshot()["steps"]) < seen + 2 + i and time.time() < deadline:
                time.sleep(0.005)  # a step or more later than the last joiner
            jobs.append(_ask(w, lm, p, n, f"s{i}"))
        return [j.result(600) for j in jobs]
    finally:
        w.close()


def _same_as_alone(eager_lm, prompt: str, n: int, t) -> None:
    """``t`` (served in the batch) against the prompt run alone: the same greedy tokens, and every step's top logits
    within float32 rounding (a random model's greedy tokens can survive a wrong cache; its logits do not)."""
    alone = run_trace(eager_lm, prompt, GREEDY, n, 0, False, analyse=False)
    assert t.generated_ids == alone.generated_ids, prompt
    for s, a in zip(t.steps, alone.steps, strict=True):
        assert s.top_ids == a.top_ids and np.allclose(s.top_logits, a.top_logits, atol=1e-4), (prompt, s.index)


def _equal_alone(eager_lm, traces, joiners=JOINERS, first=FIRST):
    for (p, n), t in zip([(first, LONG_ANSWER), *joiners], traces):
        _same_as_alone(eager_lm, p, n, t)
    assert max(t.largest_batch for t in traces) > 1  # they really shared the batch


@pytest.fixture(scope="module")
def compiled_buckets(tiny_lm):
    """``tiny_lm`` in compiled mode with the 16- and 64-token bucket graphs of the joiners' runs compiled as the app
    compiles them: on a background compiler (the batch step graphs compile in the background while answers run)."""
    lm = C.to_mode(tiny_lm, "compiled")
    compiler = BackgroundCompiler()
    for p, n in JOINERS[:2]:
        k = len(encode_prompt(lm.tokenizer, p, False).ids)
        for name, fn, args in run_graphs(lm, k, k + n):
            if fn is compile_prefill:
                job = compiler.submit(lm, name, fn, *args)
                assert compiler.wait(job, 900) and job.state is CompileState.READY, job.line()
    return lm


def test_newcomers_say_how_they_prefilled_eager_in_each_mode_and_equal_their_answers_alone(tiny_lm, one_thread,
                                                                                          monkeypatch):
    """On a CPU a bucket's graph is slower than eager, so the batcher prefills eager in compiled mode too, and says
    why; eager mode says "eager", as a run alone does. Both were silent before (the page then wrote one fixed
    sentence for any batched answer)."""
    compiled = C.to_mode(tiny_lm, "compiled")
    monkeypatch.setattr(classbatch, "step_compiled", lambda lm, batch: False)  # no batch graph: this test is prefill
    for lm, line in ((tiny_lm, "eager"),
                     (compiled, "eager (on a CPU eager prefill is faster than a padded bucket's graph)")):
        traces = _joining_at_different_steps(lm, monkeypatch)
        _equal_alone(tiny_lm, traces)
        assert [t.prefill_mode for t in traces] == [line] * len(traces)
        assert not any(t.steps[0].compiled for t in traces)


def test_newcomers_through_their_bucket_graphs_equal_their_answers_alone(tiny_lm, compiled_buckets, one_thread,
                                                                       monkeypatch):
    """Where a bucket's graph beats eager (forced here), each newcomer prefills alone through it on a one-row static
    cache and its keys and values are copied into its row of the running batch: the same tokens as alone, for
    prompts of different lengths joining at different steps, and each trace says which bucket ran."""
    monkeypatch.setattr(PB, "bucket_beats_eager", lambda lm: True)
    monkeypatch.setattr(classbatch, "step_compiled", lambda lm, batch: False)  # batch steps eager: prefill here
    traces = _joining_at_different_steps(compiled_buckets, monkeypatch)
    _equal_alone(tiny_lm, traces)
    # prompts of 52, 9, 39 and 52 tokens; every run's static cache is 256 positions, whose two bucket graphs are ready
    assert [t.prefill_mode for t in traces] == [
        "compiled, 64-token bucket", "compiled, 16-token bucket", "compiled, 64-token bucket",
        "compiled, 64-token bucket"]
    assert all(t.steps[0].compiled for t in traces)
    assert all(t.timed_in_batcher for t in traces)


def _asked_together(lm, prompts):
    """The prompts asked at once (one session each) of a held worker, so they reach it together: their traces."""
    w = Worker()
    try:
        started, release = threading.Event(), threading.Event()
        w.submit(lambda: (started.set(), release.wait(60)), session="teacher")
        started.wait(60)
        jobs = [_ask(w, lm, p, n, f"s{i}") for i, (p, n) in enumerate(prompts)]
        release.set()
        return [j.result(600) for j in jobs]
    finally:
        w.close()


def test_newcomers_arriving_together_prefill_row_by_row_or_past_the_row_limit_in_one_eager_pass(
        tiny_lm, compiled_buckets, one_thread, monkeypatch):
    """Newcomers of different lengths arriving together are one group, left-padded to its longest: prefilled alone
    one by one, each one's keys and values must land after its own padding, as the batch's decode steps read them.
    More of them than JOINER_ROWS: one padded eager pass beats that many graphs one after the other, and their
    traces say so. Every answer is still each one's alone."""
    monkeypatch.setattr(PB, "bucket_beats_eager", lambda lm: True)
    monkeypatch.setattr(classbatch, "step_compiled", lambda lm, batch: False)
    together = [("the fox ran", 6), ("the dog sat down", 4), ("a cat", 5)]  # 9, 14 and 5 tokens: one group
    for rows, line in ((PB.JOINER_ROWS, "compiled, 16-token bucket"),
                       (1, "eager (one padded pass with the prompts that arrived with it)")):
        monkeypatch.setattr(PB, "JOINER_ROWS", rows)
        traces = _asked_together(compiled_buckets, together)
        for (p, n), t in zip(together, traces):
            _same_as_alone(tiny_lm, p, n, t)
            assert t.prefill_mode == line and t.steps[0].compiled == line.startswith("compiled")
            assert t.steps[0].batch_size == len(together)  # one group


@pytest.mark.model
@pytest.mark.skipif(not settings.GPU_PATH_TESTS.get(),
                    reason="SmolLM2 through the GPU's bucket path on this CPU compiles its graphs (3 minutes of a full "
                           "suite); the tiny model's tests above cover the path. ILE_GPU_PATH_TESTS=1 runs it")
def test_embedded_model_newcomers_through_their_bucket_graphs_equal_their_answers_alone(embedded_lm, monkeypatch):
    """SmolLM2, float32: newcomers of different prompt lengths joining at different steps, prefilled through their
    buckets' graphs (forced, as a GPU chooses), answer what each answers alone."""
    lm = C.to_mode(embedded_lm, "compiled")
    # 5 and 14 tokens, none at its end of sequence before its last token: the 16-token bucket, for 256 positions
    joiners = [("Paris is the capital of", 6), ("The list of numbers: 1, 2, 3,", 5)]
    compiler = BackgroundCompiler()
    for p, n in joiners:
        k = len(encode_prompt(lm.tokenizer, p, False).ids)
        for name, fn, args in run_graphs(lm, k, k + n):
            if fn is compile_prefill:
                job = compiler.submit(lm, name, fn, *args)
                assert compiler.wait(job, 900) and job.state is CompileState.READY, job.line()
    monkeypatch.setattr(PB, "bucket_beats_eager", lambda lm: True)
    monkeypatch.setattr(classbatch, "step_compiled", lambda lm, batch: False)  # the batch steps eager: prefill here
    first = "Once upon a time, in a small village,"  # 10 tokens
    traces = _joining_at_different_steps(lm, monkeypatch, joiners, first)
    _equal_alone(embedded_lm, traces, joiners, first)
    assert [t.prefill_mode for t in traces] == ["compiled, 16-token bucket"] * 3
