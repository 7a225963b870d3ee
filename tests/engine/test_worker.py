"""The engine worker: one thread runs every job; duplicates join, queues are bounded per session, a cancelled or
abandoned job stops within one forward pass, and two races that use each other's models as drafts both finish."""
from __future__ import annotations

import threading
import time

import pytest

from engine.jobs import job as jobs
from engine.jobs import worker
from engine.core.cancel import Cancelled
from engine.jobs.worker import Worker


def _slow_decode(lm, n, started=None):
    """A decode of n steps on the tiny model: every pass checks for cancellation (engine.core.loop.forward)."""
    import torch

    from engine.core.loop import decode, new_cache, prefill

    cache = new_cache(lm)
    tok = int(prefill(lm, torch.tensor([[1, 2, 3]]), cache)[0].argmax())

    def step(i, t, logits, s):
        jobs.relay("step")(i)
        if started is not None:
            started.set()
        time.sleep(0.01)

    return decode(lm, tok, cache, n, on_step=step)


def test_one_thread_runs_every_job():
    w = Worker()
    names = {w.submit(lambda: threading.current_thread().name).result(5) for _ in range(5)}
    assert names == {"ile-engine-worker"}


def _alive(prefix: str) -> int:
    return sum(t.name.startswith(prefix) for t in threading.enumerate())


def test_close_serves_the_jobs_then_ends_every_thread():
    w = Worker(threads=3, name="closing")  # more threads than one session may queue jobs
    assert _alive("closing") == 3
    jobs = [w.submit(time.sleep, 0.05, session=f"s{i}") for i in range(4)]
    for j in jobs:
        j.result(5)
    w.close(5)
    assert _alive("closing") == 0 and all(j.state == "done" for j in jobs)


def worker_threads() -> int:
    """Live threads of workers named as the engine's (the process's own worker and any a benchmark made)."""
    return _alive("ile-engine-worker")


def test_same_key_same_session_joins_the_running_job(tiny_lm):
    w = Worker()
    started = threading.Event()
    a = w.submit(_slow_decode, tiny_lm, 40, started, key="k", session="s1")
    started.wait(10)
    b = w.submit(_slow_decode, tiny_lm, 40, started, key="k", session="s1")
    c = w.submit(_slow_decode, tiny_lm, 2, key="k", session="s2")  # another session: its own job
    assert b is a and c is not a
    assert w.stats()["deduplicated"] == 1
    a.result(30), c.result(30)


def test_per_session_queue_is_bounded_newest_wins(tiny_lm):
    w = Worker()
    started = threading.Event()
    running = w.submit(_slow_decode, tiny_lm, 30, started, key="run", session="s")
    started.wait(10)
    queued = [w.submit(_slow_decode, tiny_lm, 2, key=f"q{i}", session="s") for i in range(4)]
    assert w.stats()["queued"] <= worker.MAX_QUEUED_PER_SESSION + 2  # cancelled ones leave when reached
    assert [q.cancelled for q in queued] == [True, True, False, False]
    for q in queued[:2]:
        with pytest.raises(Cancelled):
            q.result(30)
    assert queued[-1].result(30)[1] == "max_new_tokens"
    running.result(30)


def test_cancel_stops_within_one_step(tiny_lm):
    w = Worker()
    started = threading.Event()
    job = w.submit(_slow_decode, tiny_lm, 10_000, started)
    started.wait(10)
    job.cancel()
    before = sum(e[0] == "step" for e in job.events())
    with pytest.raises(Cancelled):
        job.result(10)
    # counted in steps, not seconds (this runs at idle priority beside the browser tier): a step whose pass began
    # before the cancel may still report itself; the next pass checks the flag and never starts
    steps = sum(e[0] == "step" for e in job.events())
    assert 0 < before <= steps <= before + 1, (before, steps)
    assert w.idle()


def test_abandoned_job_is_cancelled_after_the_grace(tiny_lm):
    w = Worker()
    started = threading.Event()
    job = w.submit(_slow_decode, tiny_lm, 10_000, started, key="race", session="gone")
    started.wait(10)
    job.detach()  # the script run that waited for it was stopped (tab closed)
    with pytest.raises(Cancelled):
        job.result(jobs.DETACH_GRACE_S + 5)
    assert w.idle()


def test_a_queued_job_dropped_with_its_tab_leaves_the_published_stats_idle(tiny_lm, tmp_path, monkeypatch):
    """A tab closes with a race running and another job queued: both are abandoned; the queued one is dropped
    when the worker looks for its next job, and the stats file (how a browser test sees the worker) must say so.
    It once read 'queued: 1' forever on an idle worker: dropping a job published nothing."""
    import json

    stats = tmp_path / "stats.json"
    monkeypatch.setenv("ILE_WORKER_STATS", str(stats))
    w = Worker()
    started = threading.Event()
    race = w.submit(_slow_decode, tiny_lm, 10_000, started, key="race", session="tab")
    started.wait(10)
    queued = w.submit(_slow_decode, tiny_lm, 5, key="analysis", session="tab")
    race.detach()
    queued.detach()  # the script run that waited for both was stopped (tab closed)
    with pytest.raises(Cancelled):
        race.result(jobs.DETACH_GRACE_S + 5)
    with pytest.raises(Cancelled):
        queued.result(5)
    end = time.monotonic() + 5
    while time.monotonic() < end and json.loads(stats.read_text()).get("queued") != 0:
        time.sleep(0.02)
    published = json.loads(stats.read_text())
    assert published["queued"] == 0 and not published["busy"] and published["cancelled"] == 2, published


def test_the_published_stats_hold_no_prompt_and_no_session_id(tiny_lm, tmp_path, monkeypatch):
    """The stats file (written for the browser tests, readable by whoever can read the server's files)
    held the running job's key, prompt included, and its full session id. It says what runs by kind and a short
    session tag only."""
    import json

    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.core.sampling import SamplingSettings

    stats = tmp_path / "stats.json"
    monkeypatch.setenv("ILE_WORKER_STATS", str(stats))
    w = Worker()
    started, release = threading.Event(), threading.Event()
    sid = "8f3a6c1e-secret-session-id-of-a-student"
    w.submit(lambda: (started.set(), release.wait(10)), session="t")
    started.wait(10)
    job = w.ask(ANSWER, AnswerRequest(tiny_lm, "my private question about zebras", SamplingSettings(0.0), 3, 0,
                                      False, analyse=False),
                key=("trace", "my private question about zebras"), session=sid)
    seen = [stats.read_text()]  # the first job busy, the question queued (published when the first job started)
    release.set()
    end = time.monotonic() + 10
    while not job.done and time.monotonic() < end:
        if stats.exists():
            seen.append(stats.read_text())
        time.sleep(0.001)
    job.result(10)
    seen.append(stats.read_text())
    text = " ".join(seen)
    assert any(json.loads(t).get("busy") for t in seen), "a running job was published"
    assert "zebra" not in text and sid not in text and "secret-session" not in text, text[:500]


def test_rerun_reattaches_instead_of_restarting(tiny_lm):
    w = Worker()
    started = threading.Event()
    job = w.submit(_slow_decode, tiny_lm, 150, started, key="race", session="s")
    started.wait(10)
    job.detach()
    again = w.submit(_slow_decode, tiny_lm, 150, key="race", session="s")  # the rerun, same inputs
    assert again is job
    time.sleep(jobs.DETACH_GRACE_S + 0.3)
    assert again.result(30)[1] == "max_new_tokens"


def test_two_races_with_each_others_models_as_drafts_both_finish():
    """Session 1 races target A with draft B while session 2 races target B with draft A (the lock-ordering
    deadlock of per-model locks): on one worker both finish, with greedy output equal to plain decoding."""
    from engine.speculative.drafters import make_drafter
    from engine.speculative.decoding import race
    from engine.models.loading import load_model

    a, b = load_model("tiny-random"), load_model("tiny-random")
    ids = list(range(5, 20))
    results, errors = {}, []

    def session(name, target, draft):
        try:
            d = make_drafter(target, "model:other", loader=lambda _: draft)
            job = worker.submit(race, target, ids, "model:other", 3, max_new_tokens=12, drafter=d, session=name,
                                key="race")
            results[name] = job.result(120)
        except Exception as exc:  # pragma: no cover - shown by the assert
            errors.append(exc)

    threads = [threading.Thread(target=session, args=("s1", a, b)), threading.Thread(target=session, args=("s2", b, a))]
    [t.start() for t in threads]
    [t.join(180) for t in threads]
    assert not errors and set(results) == {"s1", "s2"}
    assert all(r.identical for r in results.values())


def test_the_start_warm_up_runs_alone_and_a_visitor_asking_the_same_joins_it(tiny_lm):
    """The start's warm-up run (scripts/warm.py) is nobody's request: a teacher asking for the same run joins it
    (one job, and every event for both waiters), a different request is not batched with it (a lone teacher's first
    answer read "measured in a batch of 2"), and the record says which job was the warm-up (the class view leaves
    it out)."""
    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.core.sampling import SamplingSettings

    w = Worker()
    release = threading.Event()
    hold = w.submit(lambda: release.wait(30), session="before")  # so that all three wait together
    same = (tiny_lm, "What is the capital of France?", SamplingSettings(0.0), 5, 0, False)
    warm = w.ask(ANSWER, AnswerRequest(*same, analyse=False, stream=True), key="default", session="warm",
                 warmup=True)
    teacher = w.ask(ANSWER, AnswerRequest(*same, analyse=False, stream=True), key="default", session="teacher")
    other = w.ask(ANSWER, AnswerRequest(tiny_lm, "Name a planet.", SamplingSettings(0.0), 5, 0, False,
                                        analyse=False), key="other", session="student")
    release.set()
    hold.result(30)
    tr, alone = teacher.result(60), other.result(60)
    assert teacher is warm and warm.rows == 1 and other.rows == 1
    assert not tr.batched and not alone.batched
    steps = [e for e in warm.events(0) if e[0] == "step"]
    assert len(steps) == len(tr.steps) and warm.events(0) == warm.events(0), "every waiter reads every event"
    assert warm.events(len(warm.events(0))) == []
    marks = {h["id"]: h["warmup"] for h in w.snapshot()["finished"]}
    assert marks[warm.id] is True and marks[other.id] is False
