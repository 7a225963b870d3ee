"""Compiled mode's prefill (engine.core.prefill_buckets): a one-sequence prompt on a compiled model's static cache runs
as its bucket's compiled graph once the background compiler has compiled it, with eager's greedy tokens and logits
within float32 rounding; until then, or past the largest bucket, it runs eager, and every run says which. No graph
compiles on the engine's worker or inside a timed pass. One compiled tiny model for the module: each real compile
costs the suite 30-100 s on a busy 2-core CPU."""
from __future__ import annotations

import threading

import pytest
import torch

from engine.core import compiled as C
from engine.core import compile_record as CR
from engine.core import loop
from engine.core.background_compile import BackgroundCompiler, CompileState, run_graphs
from engine.core.batch import batch_graphs
from engine.core.compile_watch import compile_prefill
from engine.core.prefill_buckets import PrefillWhy, prefill_mode
from engine.core.prompt import encode_prompt
from engine.core.request import RunRequest
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace

GREEDY = SamplingSettings(temperature=0.0)
NEW = 6
SHORT = "the fox ran"  # a prompt in the 16-token bucket (no chat template; the tiny tokenizer's pieces are short)
LONG = "the quick brown fox jumps over"  # in the 64-token bucket


def n_tokens(lm, prompt: str) -> int:
    return len(encode_prompt(lm.tokenizer, prompt, False).ids)


@pytest.fixture(scope="module")
def compile_threads():
    """The name of the thread every compile dynamo starts (a first compile or a recompile) while this module runs."""
    from torch._dynamo.callback import callback_handler

    names: list[str] = []

    def started(args) -> None:
        names.append(threading.current_thread().name)

    callback_handler.register_start_callback(started)
    yield names
    callback_handler.remove_start_callback(started)


@pytest.fixture(scope="module")
def compiled_tiny(tiny_lm, compile_threads):
    """``tiny_lm`` in compiled mode, the graphs of a run of SHORT compiled as the app compiles them: by a background
    compiler, in ``run_graphs``' order (its decode step, then its prefill bucket)."""
    lm = C.to_mode(tiny_lm, "compiled")
    n = n_tokens(lm, SHORT)
    compiler = BackgroundCompiler()
    jobs = [compiler.submit(lm, name, fn, *args) for name, fn, args in run_graphs(lm, n, n + NEW)]
    for job in jobs:
        assert compiler.wait(job, 900) and job.state is CompileState.READY, job.line()
    return lm


def _alone_on_a_worker(lm, prompt: str):
    """A student's answer run alone by the engine's worker (batching off: ``run_trace`` on the worker's thread)."""
    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.jobs.worker import Worker

    w = Worker(batching=False, name="ile-test-worker")
    try:
        job = w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, prompt, False, NEW, GREEDY, 0), analyse=False),
                    session="student")
        return job.result(900)
    finally:
        w.close()


def test_a_runs_graphs_are_its_decode_step_then_its_prefill_bucket_and_until_then_prefill_says_eager(tiny_lm):
    """What the background compiler is asked for a run, and what a prefill says before its graph exists (no
    compile here: a compiled model of its own, nothing compiled)."""
    lm = C.to_mode(tiny_lm, "compiled")
    n = n_tokens(lm, SHORT)
    assert [name for name, _, _ in run_graphs(lm, n, n + NEW)] == [CR.decode_name(256), CR.prefill_name(16, 256)]
    # the class batcher's step for the page's answer, asked for before the run too: one per cache length it crosses
    assert [name for name, _, _ in batch_graphs(lm, n, n + NEW)] == [CR.batch_name(1, 256)]
    assert [name for name, _, _ in batch_graphs(lm, 250, 300)] == [CR.batch_name(1, 256), CR.batch_name(1, 512)]
    cache = C.graph_of(lm).cache(n + NEW)
    assert prefill_mode(lm, n, cache).line == "eager (its graph is not compiled)"
    C.announce(lm, [CR.prefill_name(16, 256)])  # queued on the background compiler
    assert prefill_mode(lm, n, cache).line == "eager (its graph is compiling)"
    past = CR.PREFILL_BUCKETS[-1] + 1
    assert prefill_mode(lm, past, cache).line == "eager (past the largest bucket, 1,024 tokens)"
    assert prefill_mode(tiny_lm, n, loop.new_cache(tiny_lm)).line == "eager"  # eager mode says no more
    assert prefill_mode(lm, n, loop.new_cache(lm)).why is PrefillWhy.EAGER_MODE  # the eager loop's cache


def test_a_compiled_prefill_gives_eagers_tokens_and_says_so_and_nothing_compiles_on_the_worker(
        tiny_lm, compiled_tiny, compile_threads, one_thread):
    # the fixture's compiles, all on the compiler's thread; none at all when another test in this process compiled the
    # same graphs first (dynamo keeps them per code object and tree), as the class batcher's tests do
    assert set(compile_threads) <= {CR.COMPILER_THREAD}, compile_threads
    before = len(compile_threads)
    tr = _alone_on_a_worker(compiled_tiny, SHORT)
    eager = run_trace(tiny_lm, SHORT, GREEDY, NEW, 0, False, analyse=False)
    assert tr.prefill_mode == "compiled, 16-token bucket" and tr.steps[0].compiled
    assert tr.engine_mode == "compiled" and all(s.compiled for s in tr.steps[1:])
    assert tr.generated_ids == eager.generated_ids
    assert eager.prefill_mode == "eager" and not eager.steps[0].compiled
    assert torch.allclose(torch.from_numpy(tr.first_logits), torch.from_numpy(eager.first_logits), atol=1e-4)
    assert tr.to_dict(tiny_lm.tokenizer)["prefill_mode"] == "compiled, 16-token bucket"
    # the timeline's sweep on the same static cache: a length in the compiled bucket runs compiled, one whose bucket
    # was never compiled runs eager and says why; neither compiles anything
    from engine.timeline.experiment import prompt_length_sweep

    n = n_tokens(tiny_lm, SHORT)
    sweep = prompt_length_sweep(compiled_tiny, (12, 40), new_tokens=2, repeats=1, reserve=n + NEW)
    assert [(r.prefill_mode, r.prefill) for r in sweep.rows] == [
        ("compiled", "compiled, 16-token bucket"), ("eager", "eager (its graph is not compiled)")]
    assert len(compile_threads) == before, compile_threads[before:]  # no compile on the worker or in a timed pass


def test_a_cancelled_bucket_compile_leaves_eager_prefill_working(tiny_lm, compiled_tiny, one_thread):
    """The 64-token bucket's compile, cancelled while it runs on the compiler's thread (held there until the cancel
    is asked: dynamo reuses a graph of the same shapes that another test compiled in this process, and then the
    compile finished in 0 s before the cancel, as a full run found): nothing is left compiling or to do, and a run
    whose prompt is in that bucket prefills eager (and says so), with eager's tokens, its decode steps compiled."""
    lm, n = compiled_tiny, n_tokens(tiny_lm, LONG)
    tokens = n + NEW
    name = CR.prefill_name(64, CR.cache_length(tokens, lm.info.max_positions))
    assert [g[0] for g in run_graphs(lm, n, tokens)] == [name]
    inside, cancelled = threading.Event(), threading.Event()

    def held_compile(*args, **kw) -> bool:
        inside.set()
        cancelled.wait(60)  # the cancel lands here, as the next Python line runs
        return compile_prefill(*args, **kw)

    try:
        compiler = BackgroundCompiler()
        C.announce(lm, [name])
        job = compiler.submit(lm, name, held_compile, lm, n, tokens)
        assert inside.wait(300), job.line()
        cache = C.graph_of(lm).cache(tokens)
        assert prefill_mode(lm, n, cache).why in (PrefillWhy.COMPILING, PrefillWhy.OTHER_COMPILING)
        assert compiler.cancel(lm.ref) == 1
        cancelled.set()
        assert compiler.wait(job, 120) and job.state is CompileState.CANCELLED, job.line()
    finally:
        cancelled.set()
    shaped = C.shaped_of(lm)
    assert shaped.current is None and C.graph_of(lm).compiling_in is None and name not in shaped.to_do
    assert prefill_mode(lm, n, cache).line == "eager (its graph is not compiled)"
    tr = run_trace(lm, LONG, GREEDY, NEW, 0, False, analyse=False)
    assert tr.prefill_mode == "eager (its graph is not compiled)" and not tr.steps[0].compiled
    assert tr.engine_mode == "compiled"  # the decode steps: the graph compiled for the module
    assert tr.generated_ids == run_trace(tiny_lm, LONG, GREEDY, NEW, 0, False, analyse=False).generated_ids


def test_a_runs_static_cache_is_allocated_before_its_first_pass(tiny_lm):
    """A prefill bucket's graph compiled on an allocated cache guards on its tensors; the run's own cache, made by
    transformers on its first pass, had keys None there, and the first compiled prefill compiled its graph again on
    the engine's worker (30 s for SmolLM2). Every static cache of a compiled model is allocated when it is made."""
    lm = C.to_mode(tiny_lm, "compiled")
    cache = loop.new_cache(lm, tokens=CR.SHORTEST)
    assert C.graph_of(lm).owns(cache)
    assert all(layer.keys is not None and layer.keys.is_inference() for layer in cache.layers)
    assert int(cache.get_seq_length()) == 0


def test_a_compiled_pass_runs_with_the_same_thread_count_on_every_thread():
    """dynamo guards on the thread count, and inductor writes it into its CPU kernels: a shaped pass (verify, batch
    step, prefill bucket) sets it exactly, so a graph compiled on the background compiler's thread runs as it is on
    the worker, and a prefill bucket is not held to the one thread of a decode step."""
    from engine.measure import threads

    counts = []

    def pass_on_a_thread(start: int) -> None:
        torch.set_num_threads(start)
        with threads.compiled_pass_threads(64, torch.device("cpu")):
            counts.append(torch.get_num_threads())
        with threads.compiled_pass_threads(2, torch.device("cpu")):
            counts.append(torch.get_num_threads())

    for start in (1, 2, 3):
        t = threading.Thread(target=pass_on_a_thread, args=(start,))
        t.start()
        t.join()
    big, small = set(counts[0::2]), set(counts[1::2])
    assert big == {threads.policy_threads()} and small == {1}, counts


def test_a_page_runs_static_cache_holds_its_prompts_bucket(tiny_lm):
    """A 300-token prompt with 64 new tokens needs 512 positions, and its bucket is 1,024 tokens: its run's cache is
    made for 1,024, so the bucket's graph is compiled for it and runs (it was eager: no room). Where the bucket is
    longer than the model's positions, the run says that in one line. Nothing compiles here."""
    lm = C.to_mode(tiny_lm, "compiled")  # positions: 1,024
    assert [name for name, _, _ in run_graphs(lm, 300, 364)] == [CR.decode_name(1024), CR.prefill_name(1024, 1024)]
    from engine.core.loaded import LoadedModel
    from engine.core.prefill_buckets import run_tokens
    from engine.timeline.experiment import sweep_graphs

    cache = loop.new_cache(lm, tokens=run_tokens(lm, 300, 364))
    assert prefill_mode(lm, 300, cache).line == "eager (its graph is not compiled)"  # no longer "no room"
    assert run_tokens(lm, 40, 50) == 64 and run_tokens(tiny_lm, 300, 364) == 364  # eager mode: as asked
    # the sweep's one static cache holds its longest prompt's bucket, so every length runs on one decode graph
    assert {name for name, _, _ in sweep_graphs(lm, (12, 300), 8) if "decode" in name} == {CR.decode_name(1024)}
    short = LoadedModel(lm.ref, lm.model, lm.tokenizer, lm.info,
                        decode_graph=C.DecodeGraph(lm.model, lm.device, 512))  # a model of 512 positions
    assert run_tokens(short, 300, 364) == 364
    cache = loop.new_cache(short, tokens=run_tokens(short, 300, 364))
    assert prefill_mode(short, 300, cache).line == "eager (its padded bucket is longer than the model's positions)"


def test_the_home_page_asks_for_a_bucket_graph_only_where_its_run_uses_it(tiny_lm, monkeypatch):
    """Where the class batcher serves the page's answer, its prompt's bucket graph is asked for only where it runs:
    by a page that times its run alone (the timeline), or by the batcher on a device where a bucket beats eager (a
    GPU). On a CPU the home page compiled it for nothing, beside the answers (nothing compiles here)."""
    from engine.core import batch as padded
    from engine.core.batch import page_graphs

    lm = C.to_mode(tiny_lm, "compiled")
    n = n_tokens(lm, SHORT)
    decode, batch, bucket = CR.decode_name(256), CR.batch_name(1, 256), CR.prefill_name(16, 256)

    def names(batched: bool, alone: bool) -> list[str]:
        return [name for name, _, _ in page_graphs(lm, n, n + NEW, batched, alone)]

    assert names(batched=True, alone=False) == [decode, batch]  # the home page on this CPU
    assert names(batched=True, alone=True) == [decode, batch, bucket]  # the timeline page
    assert names(batched=False, alone=False) == [decode, bucket]  # batching off: the answer runs alone
    monkeypatch.setattr(padded, "bucket_beats_eager", lambda lm: True)  # a GPU: the batcher uses it
    assert names(batched=True, alone=False) == [decode, batch, bucket]
