"""Compiles run in the background (engine.core.background_compile): the engine answers eager meanwhile, a
cancelled compile stops and leaves nothing behind, and the graph compiled afterwards gives eager's tokens."""
from __future__ import annotations

import time

import torch

from engine.core import compiled as C
from engine.core import compile_record as CR
from engine.core import loop
from engine.core.background_compile import BackgroundCompiler, CompileState
from engine.core.compile_watch import compile_warm_up

TOKENS = 40  # the shortest static cache (CR.SHORTEST): one decode graph


def fresh_tiny(hidden: int):
    """A tiny model of a width no other test uses: dynamo reuses a graph for any model of the same shapes (its
    weights are the graph's inputs), so only new shapes make this test's compile a real one whatever ran before."""
    import torch as t

    from engine.models.loading import finish_load
    from engine.models.tiny import make_tiny

    model, tok = make_tiny(hidden=hidden)
    return finish_load("tiny-random", "a tiny model of its own width", model, tok, t.device("cpu"))


def _eager_steps(lm, until) -> int:
    """Eager decode steps on this thread until ``until()``: how many ran."""
    cache = loop.new_cache(lm)
    loop.prefill(lm, torch.tensor([[5, 6, 7, 8]]), cache)
    n = 0
    while not until():
        loop.decode_step(lm, torch.tensor([[9]]), cache)
        n += 1
    return n


def test_a_cancelled_compile_stops_and_the_next_compiles_while_the_engine_answers(one_thread):
    """One compile, cancelled mid-way: it stops and leaves nothing behind. Asked again, it compiles while this
    thread (the engine's, in the app) goes on with eager steps, and then serves eager's tokens. (One test: each
    real compile costs tens of seconds of the suite.)"""
    tiny_lm = fresh_tiny(112)
    lm = C.to_mode(tiny_lm, "compiled")
    graph = C.graph_of(lm)
    compiler = BackgroundCompiler()  # a queue of its own: the other tests' jobs are not in the way
    name = CR.decode_name(CR.SHORTEST)
    job = compiler.submit(lm, name, compile_warm_up, lm, TOKENS)
    t0 = time.monotonic()
    while not job.step.startswith("Step 1") and not job.done.is_set() and time.monotonic() - t0 < 300:
        time.sleep(0.01)
    assert not job.done.is_set(), "the compile ended before it could be cancelled mid-way"
    assert compiler.cancel(lm.ref) == 1
    t1 = time.monotonic()
    assert compiler.wait(job, 120)
    assert job.state is CompileState.CANCELLED and time.monotonic() - t1 < 60
    assert not graph.ready(TOKENS) and graph.failure is None and graph.compiling_in is None  # nothing left behind
    assert "cancelled after" in job.line()

    again = compiler.submit(lm, name, compile_warm_up, lm, TOKENS)
    assert again is not job and compiler.submit(lm, name, compile_warm_up, lm, TOKENS) is again  # asked twice: one
    assert compiler.busy(lm.ref)
    # The engine answers while the compile runs: a bounded number of eager steps (steps without end, until the compile
    # was done, took the compiler's GIL turns and made this test's compile last 408 s in a loaded suite, not ~60 s)
    t2 = time.monotonic()
    steps = _eager_steps(tiny_lm, lambda: again.done.is_set() or time.monotonic() - t2 > 3.0)
    assert steps > 10 and not again.done.is_set(), (steps, again.line())  # answered while it compiled
    assert compiler.wait(again, 600)
    assert again.state is CompileState.READY, again.line()
    assert graph.ready(TOKENS) and not compiler.busy(lm.ref) and graph.compiling_in is None
    assert again.line().startswith(f"{name}: ready in ")
    compiled, _, _ = loop.timed_greedy(lm, [5, 6, 7, 8], 12, reserve=TOKENS)
    assert compiled == loop.timed_greedy(tiny_lm, [5, 6, 7, 8], 12)[0]


def test_while_a_model_compiles_its_other_threads_passes_run_eager(tiny_lm):
    """A compiled function is never run while it compiles: another thread's pass on a cache the graph owns goes
    eager (engine.core.loop.served_compiled, ShapedGraphs.serves)."""
    lm = C.to_mode(tiny_lm, "compiled")
    graph = C.graph_of(lm)
    cache = graph.cache(TOKENS)
    assert loop.served_compiled(lm, cache)
    graph.compiling_in = -1  # some other thread
    try:
        assert not loop.served_compiled(lm, cache)
    finally:
        graph.compiling_in = None


def test_a_module_called_on_one_thread_while_fx_traces_on_another_runs_as_it_is():
    """torch.fx patches torch.nn.Module.__call__ for the whole process while it traces; a worker's eager pass during
    a background compile's trace failed with "module is not installed as a submodule" (engine.core.fx_threads)."""
    import threading

    import torch.fx

    from engine.core import fx_threads

    assert fx_threads.install()
    inside, done = threading.Event(), threading.Event()

    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            inside.set()
            done.wait(30)  # the trace stays open while the other thread calls its module
            return self.lin(x)

    tracer = threading.Thread(target=lambda: torch.fx.symbolic_trace(Slow()))
    tracer.start()
    assert inside.wait(30)
    try:
        eager = torch.nn.Sequential(torch.nn.Linear(4, 4))
        out = eager(torch.ones(1, 4))  # the patched Module.__call__ is in place now, on the class
        assert out.shape == (1, 4) and torch.nn.Module.__call__ is not torch.nn.Module._wrapped_call_impl
    finally:
        done.set()
        tracer.join(30)


def test_a_students_whole_page_beside_a_compile_is_within_the_class_goal(one_thread, monkeypatch):
    """`bench hostile`'s compile scenario: the page (answer, analysis, block walk) while compiled mode's decode step
    compiles in the background takes at most 2x its time alone + 5 s, with the same answer, and the compile was
    still running when the page was done (it did not wait for it). torch's caches on disk are off for this compile:
    from them a tiny graph compiles in about as long as the page takes, and the test could not tell."""
    from types import SimpleNamespace

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    from engine.batching import bench_hostile

    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    monkeypatch.setattr(functorch_config, "enable_autograd_cache", False)

    lm = fresh_tiny(80)
    r = bench_hostile.run(lm, SimpleNamespace(questions=1, question_tokens=8, max_batch=8, timeout=300.0,
                                              pages="none,compile", page_only=True))
    assert r["same_answers"] and r["page_within_goal"] == {"compile": True}, r
    assert r["compiling_throughout"] is True, r
    assert "the compile was still running" in bench_hostile.summary(r)


def test_a_compile_on_another_thread_does_not_make_this_thread_compile(monkeypatch):
    """torch sets one process-wide flag for a whole compile (``torch.compiler.is_compiling()``, set by
    ``_compile_session_context`` whatever thread compiles); transformers read it, and an eager pass on the worker
    took a traced graph's paths while a compile ran on another thread."""
    import torch
    from transformers.utils import is_torchdynamo_compiling

    from engine.core import fx_threads

    assert fx_threads.install()
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)  # as while some thread compiles
    assert torch.compiler.is_compiling()
    assert not is_torchdynamo_compiling()  # transformers' eager paths stay eager

    @torch.compile(fullgraph=True, backend="eager")
    def traced(x):
        return x + 1 if is_torchdynamo_compiling() else x - 1

    assert traced(torch.zeros(1)).item() == 1.0  # inside a dynamo trace it still says "compiling"


def test_an_analysis_during_a_background_compile_captures_every_block(one_thread):
    from engine.core.trace import analyse_prompts

    lm = fresh_tiny(72)
    twin = C.to_mode(lm, "compiled")
    want = analyse_prompts(lm, [[5, 6, 7, 8, 9]])
    compiler = BackgroundCompiler()
    job = compiler.submit(twin, CR.decode_name(CR.SHORTEST), compile_warm_up, twin, TOKENS)
    t0 = time.monotonic()
    while not job.step.startswith("Step 1") and not job.done.is_set() and time.monotonic() - t0 < 300:
        time.sleep(0.01)
    time.sleep(0.5)  # inside the compile now
    assert not job.done.is_set(), "the compile ended before the analysis could run beside it"
    got = analyse_prompts(lm, [[5, 6, 7, 8, 9]])
    compiler.cancel(twin.ref)
    compiler.wait(job, 120)
    assert len(got) == len(want) == 1
    import numpy as np

    assert np.array_equal(got[0].residual_norms, want[0].residual_norms)  # every block captured, the same values
    assert np.array_equal(got[0].top_ids, want[0].top_ids)
