"""Compiled mode teaches every lesson (issue 50): the class batcher's padded batch steps and a speculative verify
pass run as compiled graphs on static caches, with answers equal to eager ones in float32, no compile inside a
measured pass, and a compile record a page can show. One compiled tiny model per module: each new graph costs
about a minute on a busy 2-core CPU (seconds once torch's compile cache on disk has it), so the tests use few."""
from __future__ import annotations

import threading

import pytest

from engine.core import compiled as C
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
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
    jobs = [w.ask(ANSWER, AnswerRequest(lm, p, GREEDY, n, 0, False, analyse=False), session=f"s{i}")
            for i, p in enumerate(prompts)]
    release.set()
    try:
        return [j.result(900) for j in jobs]
    finally:
        w.close()


def test_a_class_in_compiled_mode_is_one_batch_of_compiled_steps_equal_to_each_alone(tiny_lm, tiny_compiled,
                                                                                      one_thread):
    assert group(tiny_compiled) is not None
    traces = _class_traces(tiny_compiled, CLASS, 6)
    for p, t in zip(CLASS, traces):
        alone = run_trace(tiny_lm, p, GREEDY, 6, 0, False, analyse=False)
        assert t.generated_ids == alone.generated_ids, p
        assert t.largest_batch == len(CLASS)
        assert [s.compiled for s in t.steps] == [False] + [True] * (len(t.steps) - 1)  # prefill eager
        assert t.engine_mode == "compiled"
    status = C.compile_status(tiny_compiled)
    name = C.batch_name(C.padded_batch(len(CLASS)), C.SHORTEST)
    assert name in dict(status.done) and status.current is None and status.failure is None
    assert C.last_compile_s(tiny_compiled, name) is not None  # kept in the cache folder for the next start

