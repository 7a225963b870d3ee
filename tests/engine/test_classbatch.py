"""The class worker batches generation requests of many sessions: every request gets exactly what it gets alone
(greedy token for token; sampled with the same seed semantics), requests join mid-batch and leave when their
session goes away, timed experiments wait for the batch and then run alone, and the order is fair."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from engine.jobs import classbatch
from engine.core.request import RunRequest
from engine.jobs.classbatch import ANSWER, AnswerRequest, group
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.core.cancel import Cancelled
from engine.jobs.worker import Worker
from tests.engine.test_worker import worker_threads

PROMPTS = ["hello there", "a much longer prompt with several more words in it than the first", "x",
           "the quick brown fox", "one two three four five six", "why", "tell me a story about a cat"]
GREEDY = SamplingSettings(0.0)


def _submit(w, lm, prompt, n=6, settings=GREEDY, seed=0, session=None, chat=False, analyse=False):
    return w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, prompt, chat, n, settings, seed), analyse=analyse),
                 session=session,
                 key=("gen", prompt, n, seed))


def _solo(lm, prompt, n=6, settings=GREEDY, seed=0, chat=False, analyse=False):
    return run_trace(lm, prompt, settings, n, seed, chat, analyse=analyse)


def _blocker(started: threading.Event, release: threading.Event):
    """A job that holds the worker until released (so the next ones queue up together)."""
    started.set()
    release.wait(30)
    return "blocker"


def _queue_behind_blocker(w):
    started, release = threading.Event(), threading.Event()
    b = w.submit(_blocker, started, release, session="teacher")
    started.wait(10)
    return b, release


def test_batched_greedy_equals_solo_for_every_request(tiny_lm, one_thread):
    w = Worker()
    b, release = _queue_behind_blocker(w)
    lengths = [6, 3, 9, 1, 6, 12, 4]
    jobs = [_submit(w, tiny_lm, p, n, session=f"s{i}", analyse=(i != 1)) for i, (p, n) in
            enumerate(zip(PROMPTS, lengths))]
    release.set()
    traces = [j.result(60) for j in jobs]
    # every request but the one-token one (it leaves after its prefill) decodes in one batch; prefill passes group
    # prompts of similar length, so a request's first step may be in a smaller group
    assert max(t.largest_batch for t in traces) == len(PROMPTS) - 1, "the queued requests ran as one batch"
    for p, n, t, j in zip(PROMPTS, lengths, traces, jobs):
        solo = _solo(tiny_lm, p, n, analyse=(p != PROMPTS[1]))
        assert t.generated_ids == solo.generated_ids, f"{p!r}: batched output differs from running alone"
        assert t.stop_reason == solo.stop_reason and t.prompt_ids == solo.prompt_ids
        assert [s.kv_tokens for s in t.steps] == [s.kv_tokens for s in solo.steps]
        assert [s.kv_bytes for s in t.steps] == [s.kv_bytes for s in solo.steps], "its own rows of the cache"
        assert [s.top_ids[:3] for s in t.steps] == [s.top_ids[:3] for s in solo.steps]
        assert t.largest_batch > 1 and j.rows > 1
        assert all(s.seconds > 0 for s in t.steps)
        if solo.analysis is None:
            assert t.analysis is None
            continue
        # the analysis passes of requests that finish together ran as one right-padded pass: the same numbers
        a, b = t.analysis, solo.analysis
        assert a.attentions.shape == b.attentions.shape
        assert np.allclose(a.attentions.astype(np.float32), b.attentions.astype(np.float32), atol=2e-3)
        assert np.allclose(a.residual_norms, b.residual_norms, rtol=1e-4, atol=1e-4)
        assert (a.top_ids[:, :3] == b.top_ids[:, :3]).all() and (a.lens_ids[:, 0] == b.lens_ids[:, 0]).all()
        assert np.allclose(a.positions.actual_probs, b.positions.actual_probs, atol=1e-5)
        assert a.lens_resid.shape == b.lens_resid.shape
    assert traces[1].analysis is None


def test_batched_sampling_keeps_seed_semantics(tiny_lm, one_thread):
    """Sampled requests in one batch: each draws with its own generator from its own row, so it equals its solo
    run with the same seed (and two seeds still differ)."""
    w = Worker()
    b, release = _queue_behind_blocker(w)
    s = SamplingSettings(1.0, 0, 1.0)
    cases = [(p, seed) for p in PROMPTS[:3] for seed in (1, 2)]
    jobs = [_submit(w, tiny_lm, p, 10, s, seed, session=f"s{i}") for i, (p, seed) in enumerate(cases)]
    release.set()
    got = [j.result(60) for j in jobs]
    assert max(t.largest_batch for t in got) > 1
    for (p, seed), t in zip(cases, got):
        assert t.generated_ids == _solo(tiny_lm, p, 10, s, seed).generated_ids, (p, seed)
    assert got[0].generated_ids != got[1].generated_ids  # the seed matters (random weights: a flat distribution)


def test_a_request_joins_mid_batch(tiny_lm, one_thread, monkeypatch):
    _slow_steps(monkeypatch)
    w = Worker()
    first = _submit(w, tiny_lm, PROMPTS[1], 60, session="a")
    deadline = time.time() + 20
    while not w.snapshot()["steps"] and time.time() < deadline:
        time.sleep(0.005)  # the first request is decoding
    late = _submit(w, tiny_lm, PROMPTS[3], 5, session="b")
    t_late, t_first = late.result(60), first.result(60)
    assert t_late.largest_batch == 2, "the late request ran beside the first one"
    assert late.finished_at < first.finished_at, "it left the batch when its own tokens were done"
    assert t_late.generated_ids == _solo(tiny_lm, PROMPTS[3], 5).generated_ids
    assert t_first.generated_ids == _solo(tiny_lm, PROMPTS[1], 60).generated_ids
    assert t_first.steps[0].batch_size == 1 and t_first.largest_batch == 2


def test_a_stream_of_arrivals_does_not_stall_the_rows_decoding(tiny_lm, one_thread):
    """A class presses Enter over ten seconds: a new request arrives before every round. The rows already in the
    batch still take a decode step each round, so the first request is answered after its own few steps, not
    after the last arrival (every round used to be a prefill while anyone was joining)."""
    w = Worker()
    real_admit, arrivals = w.admit, []

    def admit(batch, room):  # one more student presses Enter just before each round
        if len(arrivals) < 12:
            arrivals.append(_submit(w, tiny_lm, PROMPTS[len(arrivals) % len(PROMPTS)] + f" {len(arrivals)}", 3,
                                    session=f"late{len(arrivals)}"))
        return real_admit(batch, room)

    w.admit = admit
    first = _submit(w, tiny_lm, PROMPTS[0], 3, session="first")
    t = first.result(60)
    for j in arrivals:
        j.result(60)
    assert len(arrivals) == 12
    assert first.finished_at < arrivals[-1].submitted_at, "the first answer waited for the last arrival"
    assert t.generated_ids == _solo(tiny_lm, PROMPTS[0], 3).generated_ids
    for i, j in enumerate(arrivals):
        assert j.result(0).generated_ids == _solo(tiny_lm, PROMPTS[i % len(PROMPTS)] + f" {i}", 3).generated_ids


def _slow_steps(monkeypatch, seconds=0.01):
    """The tiny model decodes 200 tokens in a blink: slow each batch step so a test can act mid-batch."""
    real = classbatch._decode

    def slow(*a, **k):
        time.sleep(seconds)
        return real(*a, **k)

    monkeypatch.setattr(classbatch, "_decode", slow)


def test_a_closed_tab_frees_its_slot(tiny_lm, one_thread, monkeypatch):
    from engine.jobs import job

    _slow_steps(monkeypatch)
    monkeypatch.setattr(job, "DETACH_GRACE_S", 0.1)
    w = Worker()
    b, release = _queue_behind_blocker(w)
    stay = _submit(w, tiny_lm, PROMPTS[0], 100, session="stay")
    leave = _submit(w, tiny_lm, PROMPTS[1], 250, session="leave")
    release.set()
    deadline = time.time() + 20
    while w.place(leave)["place"] != 0 and time.time() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    leave.detach()  # its script run was stopped: the tab closed
    with pytest.raises(Cancelled):
        leave.result(30)
    assert not stay.done, "the other request goes on"
    snap_rows = [s[2] for s in w.snapshot()["steps"]]
    t = stay.result(60)
    assert t.generated_ids == _solo(tiny_lm, PROMPTS[0], 100).generated_ids
    assert t.steps[-1].batch_size == 1 and max(snap_rows) == 2, "its slot was freed"
    assert w.stats()["cancelled"] == 1


def _experiment(log: list, w):
    """A timed experiment: nothing else may run on the worker while it runs."""
    log.append(("experiment start", time.monotonic()))
    time.sleep(0.05)
    return "measured"


def test_an_experiment_runs_between_the_batchs_steps_and_alone(tiny_lm, one_thread):
    """A timed experiment does not wait for a class's long answers to drain: it takes its turn between two of the
    batch's steps (the batch pauses, engine/jobs/worker.py), and no pass of the batch overlaps it, so its timings
    are its own. A request submitted after it still joins the running batch."""
    w = Worker()
    b, release = _queue_behind_blocker(w)
    gens = [_submit(w, tiny_lm, p, 40, session=f"g{i}") for i, p in enumerate(PROMPTS[:3])]
    log: list = []
    exp = w.submit(_experiment, log, w, session="e", key="exp")
    later = _submit(w, tiny_lm, PROMPTS[4], 4, session="late")
    release.set()
    assert exp.result(60) == "measured"
    traces = [g.result(60) for g in gens]
    assert exp.finished_at < max(g.finished_at for g in gens), "it did not wait for the batch to drain"
    snap = w.snapshot()
    passes = [(snap["now"] + a, snap["now"] + z) for a, z, _, _ in snap["steps"]]
    assert passes and not [p for p in passes if p[0] < exp.finished_at and p[1] > exp.started_at], \
        "a pass of the batch ran during the experiment"
    assert later.result(60).largest_batch > 1, "a request behind the experiment still joins the batch"
    assert all(t.largest_batch > 1 for t in traces) and exp.waited_s > 0


def test_fairness_a_short_job_of_another_session_goes_first(tiny_lm, one_thread):
    """Session A had the worker (its blocker ran) and submits a long job; session B submits a short job just after.
    B was served less recently, so B's job runs first and finishes before A's."""
    w = Worker(batching=False)
    b, release = _queue_behind_blocker(w)
    long_a = w.submit(lambda: time.sleep(0.5) or "long", session="teacher", key="long")
    short_b = w.submit(lambda: "short", session="student", key="short")
    assert w.place(short_b)["place"] == 1 and w.place(long_a)["place"] == 2
    release.set()
    assert short_b.result(30) == "short" and long_a.result(30) == "long"
    assert short_b.finished_at < long_a.finished_at


def test_fairness_with_batching_a_short_answer_leaves_before_a_long_one(tiny_lm, one_thread, monkeypatch):
    _slow_steps(monkeypatch)
    w = Worker()
    long_a = _submit(w, tiny_lm, PROMPTS[1], 120, session="a")
    time.sleep(0.05)
    short_b = _submit(w, tiny_lm, PROMPTS[2], 3, session="b")
    short_b.result(60)
    long_a.result(60)
    assert short_b.finished_at < long_a.finished_at


def test_serial_worker_gives_the_same_answers(tiny_lm, one_thread):
    w = Worker(batching=False)
    jobs = [_submit(w, tiny_lm, p, 5, session=f"s{i}") for i, p in enumerate(PROMPTS[:3])]
    for p, j in zip(PROMPTS, jobs):
        t = j.result(60)
        assert t.largest_batch == 1 and t.generated_ids == _solo(tiny_lm, p, 5).generated_ids


def test_a_bad_prompt_fails_only_its_request(tiny_lm, one_thread):
    w = Worker()
    b, release = _queue_behind_blocker(w)
    good = _submit(w, tiny_lm, PROMPTS[0], 4, session="a")
    bad = _submit(w, tiny_lm, "   ", 4, session="b")
    release.set()
    from engine.core.prompt import PromptError
    with pytest.raises(PromptError):
        bad.result(30)
    assert good.result(30).generated_ids == _solo(tiny_lm, PROMPTS[0], 4).generated_ids


def test_class_view_snapshot_has_no_prompt_text(tiny_lm, one_thread):
    w = Worker()
    secret = "my secret prompt about zebras"
    _submit(w, tiny_lm, secret, 3, session="s").result(30)
    snap = w.snapshot()
    assert snap["finished"] and snap["finished"][0]["kind"] == "answer"
    assert "zebra" not in repr(snap)


def test_joiners_are_grouped_with_prompts_of_similar_length(tiny_lm):
    """A short question is never padded to a paste's length (before, joiners were cut into chunks in arrival order
    by padded size alone: a 10-token question rode with a 500-token paste), and a group's padded size is bounded."""
    class J:
        def __init__(self, n):
            self.ids = tuple(range(n))

    rows = [J(n) for n in (10, 500, 12, 600, 30, 2000, 5, 480, 11)]
    groups = classbatch._groups(rows)
    assert sorted(len(r.ids) for g in groups for r in g) == sorted(len(r.ids) for r in rows)
    for g in groups:
        lengths = [len(r.ids) for r in g]
        assert max(lengths) <= classbatch.SIMILAR * min(lengths) + classbatch.SIMILAR_SLACK, lengths
        assert len(g) * max(lengths) <= classbatch.GROUP_TOKENS or len(g) == 1
    assert [len(r.ids) for r in next(g for g in groups if any(len(r.ids) == 10 for r in g))] == [5, 10, 11, 12]


@pytest.mark.model
def test_embedded_model_batched_greedy_equals_solo(embedded_lm):
    w = Worker()
    b, release = _queue_behind_blocker(w)
    prompts = ["What is the capital of France?", "Name a primary colour.", "What is 2 + 3?",
               "Say hello in Spanish.", "What animal says moo?"]
    jobs = [w.ask(ANSWER, AnswerRequest(embedded_lm, RunRequest(embedded_lm.ref, p, True, 8, GREEDY, 0), analyse=False),
                  session=f"s{i}")
            for i, p in enumerate(prompts)]
    release.set()
    for p, j in zip(prompts, jobs):
        t = j.result(300)
        assert t.largest_batch == len(prompts)
        assert t.generated_ids == run_trace(embedded_lm, p, GREEDY, 8, 0, True, analyse=False).generated_ids, p


def test_a_batched_request_streams_its_steps_to_its_own_page(tiny_lm, one_thread):
    """The sidebar's progress bar draws each token as it comes: in a batch each request's records are posted to
    its own job as "step" events, the same records as its Trace."""
    from engine.jobs import worker as W

    w = Worker()
    b, release = _queue_behind_blocker(w)
    jobs = [w.ask(ANSWER, AnswerRequest(tiny_lm, RunRequest(tiny_lm.ref, p, False, 5, GREEDY, 0), analyse=False,
                                        stream=True),
                  session=f"s{i}") for i, p in enumerate(PROMPTS[:3])]
    release.set()
    for j in jobs:
        t = j.result(60)
        events = [e for e in j.events() if e[0] == "step"]
        assert [e[1][0] for e in events] == list(t.steps) and t.largest_batch == 3


def test_analysis_passes_waiting_together_run_as_one(tiny_lm, one_thread):
    from engine.jobs.prompt_passes import ANALYSIS, PromptRequest
    from engine.core.trace import analyse_prompt

    w = Worker()
    b, release = _queue_behind_blocker(w)
    prompts = [list(range(5, 5 + n)) for n in (3, 11, 7)]
    jobs = [w.ask(ANALYSIS, PromptRequest(tiny_lm, tuple(ids)), session=f"s{i}") for i, ids in enumerate(prompts)]
    release.set()
    for ids, j in zip(prompts, jobs):
        a, solo = j.result(60), analyse_prompt(tiny_lm, ids)
        assert j.rows == 3, "the three waiting analyses ran in one pass"
        assert a.attentions.shape == solo.attentions.shape
        assert np.allclose(a.attentions.astype(np.float32), solo.attentions.astype(np.float32), atol=2e-3)
        assert (a.top_ids[:, :3] == solo.top_ids[:, :3]).all()


def test_block_walks_waiting_together_run_as_one_and_equal_solo_walks(tiny_lm, one_thread):
    """A class opening the home page asks for block 0's walk once per session: the walks waiting together run
    as one right-padded pass (per block: a walk of another block waits for its own pass), and each prompt's rows
    are the ones its solo walk shows."""
    from engine.loop.inspect import BLOCK_WALK, BlockWalkRequest, block_walk

    w = Worker()
    b, release = _queue_behind_blocker(w)
    prompts = [list(range(5, 5 + n)) for n in (3, 11, 7, 1)]
    jobs = [w.ask(BLOCK_WALK, BlockWalkRequest(tiny_lm, tuple(ids), 0), session=f"s{i}")
            for i, ids in enumerate(prompts)]
    other = w.ask(BLOCK_WALK, BlockWalkRequest(tiny_lm, tuple(prompts[1]), 1), session="s9")
    release.set()
    walks, other_walk = [j.result(60) for j in jobs], other.result(60)  # all done before any solo pass: the
    # residual-stream switch is the model's own, and the app runs every pass on the worker, never two at once
    for ids, j, got in zip(prompts, jobs, walks):
        solo = block_walk(tiny_lm, ids, 0)
        assert j.rows == len(prompts), "the four waiting walks of block 0 ran in one pass"
        assert got is not None and [s.name for s in got] == [s.name for s in solo]
        assert [s.shape for s in got] == [s.shape for s in solo] == [(len(ids), tiny_lm.info.hidden_size)] * 7
        for g, o in zip(got, solo):
            assert np.allclose(g.preview, o.preview, atol=2e-4) and abs(g.norm - o.norm) <= 1e-4 * max(1.0, o.norm)
    assert other.rows == 1 and other_walk is not None, "a walk of another block ran in its own pass"
    assert [s.preview for s in other_walk] == [s.preview for s in block_walk(tiny_lm, prompts[1], 1)]


def test_bench_classroom_compares_batched_and_serial_in_one_run(tiny_lm, one_thread, monkeypatch):
    """Every request is queued before the worker looks, even when the submitting thread is descheduled between two
    students (as on a busy machine, where this test once saw a batch of 4 of 5)."""
    from types import SimpleNamespace

    from engine.batching import bench_classroom as classroom

    ask = Worker.ask

    def descheduled(self, *args, **kwargs):
        job = ask(self, *args, **kwargs)
        time.sleep(0.05)
        return job

    monkeypatch.setattr(Worker, "ask", descheduled)
    before = worker_threads()
    r = classroom.run(tiny_lm, SimpleNamespace(sessions=5, new_tokens=3, repeats=1, no_analysis=True))
    assert worker_threads() == before  # its two workers closed: a daemon thread left freeing tensors at exit aborts
    assert r["same_answers"] and [x["batching"] for x in r["runs"]] == [False, True]
    assert r["runs"][1]["largest_batch"] == 5 and r["runs"][0]["largest_batch"] == 1
    assert r["throughput_ratio_batched_vs_serial"] > 0 and "batched / serial" in classroom.summary(r)


def test_bench_classroom_no_serial_times_the_batched_worker_alone(tiny_lm, one_thread):
    """--no-serial (the GPU check's eager batch, the peer of the compiled one): only batched runs, no ratio."""
    from types import SimpleNamespace

    from engine.batching import bench_classroom as classroom

    r = classroom.run(tiny_lm, SimpleNamespace(sessions=4, new_tokens=3, repeats=2, no_analysis=True, no_serial=True))
    assert [x["batching"] for x in r["runs"]] == [True, True] and r["runs"][0]["largest_batch"] == 4
    assert r["serial_throughput_tok_s"] is None and r["throughput_ratio_batched_vs_serial"] is None
    assert r["same_answers"] and r["batched_throughput_tok_s"] > 0 and "batched worker only" in classroom.summary(r)


def test_int8_answers_run_alone_because_a_batch_would_change_them(tiny_lm, one_thread):
    """int8 quantizes a pass's activations with one scale over all its rows, so another request's row moves yours:
    forced into a batch, an int8 answer differed from its solo run; the worker therefore serves int8 alone."""
    from engine.models.precision import to_precision

    q = to_precision(tiny_lm, "int8")
    assert group(q) is None and group(tiny_lm) is not None
    w = Worker()
    b, release = _queue_behind_blocker(w)
    forced = replace(ANSWER, group=lambda r: ("forced", id(r.lm)))  # what batching int8 would do
    jobs = [w.ask(forced, AnswerRequest(q, RunRequest(q.ref, p, False, 12, GREEDY, 0), analyse=False), session=f"s{i}",
                  key=("int8", p)) for i, p in enumerate(PROMPTS)]
    release.set()
    differ = sum(j.result(60).generated_ids != _solo(q, p, 12).generated_ids for p, j in zip(PROMPTS, jobs))
    assert differ >= 1, "the reason int8 runs alone: a batch changes at least one answer"


# ------------------------------------------------------------------------------------ chunked prefill
PASTE = "a long pasted text about nothing in particular, " * 9  # ~450 tokens on the tiny tokenizer


class _Log(list):
    started: threading.Event


@pytest.fixture
def passes(monkeypatch):
    """Every forward pass of the class batcher as (kind, rows, positions), each slowed by 1 ms per padded
    position (the tiny model is too fast to act mid-pass); ``started`` is set when a prefill pass starts."""
    import sys

    from engine.core import batch as padded

    log = _Log()  # (kind, rows, positions)
    started = threading.Event()
    real = padded.forward

    def forward(lm, ids, *a, **k):
        caller = sys._getframe(1).f_code.co_name
        kind = "decode" if caller == "decode_logits" else "prefill"
        log.append((kind, ids.shape[0], ids.shape[1]))
        if kind == "prefill":
            started.set()
        time.sleep(ids.shape[0] * ids.shape[1] * 0.001 if kind == "prefill" else 0.01)
        return real(lm, ids, *a, **k)

    monkeypatch.setattr(padded, "forward", forward)
    log.started = started
    return log


@pytest.fixture
def small_slices(monkeypatch):
    monkeypatch.setattr(classbatch, "PREFILL_SLICE_TOKENS", 64)


def test_a_paste_is_prefilled_in_slices_between_decode_steps(tiny_lm, one_thread, monkeypatch):
    """A student's question is decoding when a 450-token paste arrives: the paste is read in slices of at most
    PREFILL_SLICE_TOKENS padded positions, the question takes a decode step between any two of them, and both
    answers are their solo greedy answers token for token (before: the paste was one 450-position pass)."""
    from engine.core import batch as padded

    log = _Log()
    real = padded.forward

    def forward(lm, ids, *a, **k):
        import sys
        log.append(("decode" if sys._getframe(1).f_code.co_name == "decode_logits" else "prefill", *ids.shape))
        time.sleep(0.005)
        return real(lm, ids, *a, **k)

    monkeypatch.setattr(padded, "forward", forward)
    w = Worker()
    q = _submit(w, tiny_lm, PROMPTS[0], 40, session="q")
    end = time.time() + 20
    while not any(k == "decode" for k, *_ in log) and time.time() < end:
        time.sleep(0.002)
    paste = _submit(w, tiny_lm, PASTE, 4, session="paste")
    t_paste, t_q = paste.result(60), q.result(60)
    assert t_q.generated_ids == _solo(tiny_lm, PROMPTS[0], 40).generated_ids
    assert t_paste.generated_ids == _solo(tiny_lm, PASTE, 4).generated_ids
    pre = [(i, rows * n) for i, (kind, rows, n) in enumerate(log) if kind == "prefill"]
    assert len(pre) >= 3, f"the paste was read in {len(pre) - 1} pass(es)"
    assert all(size <= classbatch.PREFILL_SLICE_TOKENS for _, size in pre), pre
    paste_passes = [i for i, _ in pre[1:]]
    for a, b in zip(paste_passes, paste_passes[1:]):
        assert any(log[j][0] == "decode" for j in range(a + 1, b)), "two slices back to back: the question waited"


def test_a_short_question_beside_a_paste_is_answered_before_the_paste_is_read(tiny_lm, one_thread, passes,
                                                                             small_slices):
    """A question asked while a paste is being prefilled joins at the next round (its group has the least work),
    and is answered before the paste's first token (before: it waited for the paste's whole prefill)."""
    w = Worker()
    paste = _submit(w, tiny_lm, PASTE, 4, session="paste")
    assert passes.started.wait(20)
    q = _submit(w, tiny_lm, "why", 3, session="q")
    t_q = q.result(60)
    paste.result(60)
    assert q.finished_at < paste.first_token_at, "the question waited for the paste's prefill"
    assert t_q.generated_ids == _solo(tiny_lm, "why", 3).generated_ids


@pytest.mark.serial  # its bound is a multiple of a slice measured beside it: alone, not beside other workers
def test_a_request_cancelled_mid_prefill_leaves_within_one_slice(tiny_lm, one_thread, passes, small_slices):
    """A student changes their prompt while their paste is being read: the old request stops after the slice
    running now (64 positions, ~64 ms here), not after the whole prefill (450 positions, ~450 ms here)."""
    w = Worker()
    paste = _submit(w, tiny_lm, PASTE, 4, session="paste")
    assert passes.started.wait(20)
    t0 = time.monotonic()
    paste.cancel()
    with pytest.raises(Cancelled):
        paste.result(30)
    waited = paste.finished_at - t0
    slice_s = classbatch.PREFILL_SLICE_TOKENS * 0.001
    assert waited < 2.5 * slice_s + 0.1, f"the cancel took {waited:.2f} s (a slice: {slice_s:.2f} s)"
    assert sum(1 for kind, *_ in passes if kind == "prefill") < len(_solo(tiny_lm, PASTE, 1).prompt_ids) // 64


@pytest.mark.model
def test_embedded_model_a_sliced_paste_equals_its_solo_answer(embedded_lm):
    """On the real model, in float32: a ~400-token paste read in slices between the decode steps of two short
    questions gives its solo greedy answer token for token, and so do they."""
    paste = ("The history of the printing press begins with movable type in East Asia and continues with "
             "Gutenberg's press in Mainz around 1450. ") * 12 + "Summarise this in one sentence."
    w = Worker()
    b, release = _queue_behind_blocker(w)
    short = [w.ask(ANSWER, AnswerRequest(embedded_lm, RunRequest(embedded_lm.ref, p, True, 12, GREEDY, 0),
                                         analyse=False), session=f"s{i}")
             for i, p in enumerate(["What is 2 + 3?", "Name a primary colour."])]
    long_job = w.ask(ANSWER, AnswerRequest(embedded_lm, RunRequest(embedded_lm.ref, paste, True, 6, GREEDY, 0),
                                          analyse=False), session="paste")
    release.set()
    t = long_job.result(300)
    assert len(t.prompt_ids) > classbatch.PREFILL_SLICE_TOKENS, "the paste is longer than one slice"
    assert t.generated_ids == run_trace(embedded_lm, paste, GREEDY, 6, 0, True, analyse=False).generated_ids
    for p, j in zip(["What is 2 + 3?", "Name a primary colour."], short):
        assert j.result(300).generated_ids == run_trace(embedded_lm, p, GREEDY, 12, 0, True,
                                                        analyse=False).generated_ids, p
