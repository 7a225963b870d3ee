"""What one client may hold of the class batch: a script with many sessions on one address cannot take
every seat, a short question always finds one, long requests cost more of a share, a new session does not jump
the queue, and a waiting request can say why it waits."""
from __future__ import annotations

import threading
import time

import pytest

from engine.jobs import classbatch, seats
from engine.core.request import RunRequest
from engine.jobs.classbatch import ANSWER, AnswerRequest
from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.jobs.worker import Worker
from tests.engine.test_worker import worker_threads

GREEDY = SamplingSettings(0.0)
PASTE = "a long pasted text about nothing in particular, " * 9  # ~450 tokens on the tiny tokenizer
HOSTILE, STUDENT = "10.0.0.66", "10.0.0.7"


def _ask(w, lm, prompt, n, session, client, key=None):
    return w.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, prompt, False, n, GREEDY, 0), analyse=False),
                 session=session,
                 client=client, key=key or ("gen", session, prompt, n))


def _solo(lm, prompt, n):
    return run_trace(lm, prompt, GREEDY, n, 0, False, analyse=False).generated_ids


def _hold(w):
    """A job that holds the worker until released, so the next ones queue up together."""
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(30)), session="teacher", client="teacher")
    started.wait(10)
    return release


@pytest.fixture
def rows_per_step(monkeypatch):
    """Each decode step's rows by client (and slowed to 10 ms: the tiny model decodes too fast to act mid-batch)."""
    seen: list[list] = []
    real = classbatch._decode

    def decode(w, lm, batch, *a, **k):
        seen.append([r.job.client for r in batch.rows])
        time.sleep(0.01)
        return real(w, lm, batch, *a, **k)

    monkeypatch.setattr(classbatch, "_decode", decode)
    return seen


def test_many_sessions_of_one_client_cannot_take_the_whole_batch(tiny_lm, one_thread, rows_per_step):
    """The issue's attack, scaled to a batch of 8: one address opens 12 sessions, each a long paste asking for
    200 tokens. A student's 3-token question asked meanwhile joins at once and is answered before any of the
    hostile rows ends (before: the 8 hostile rows held every seat and the question waited for one to leave)."""
    w = Worker(max_batch=8)
    release = _hold(w)
    hostile = [_ask(w, tiny_lm, PASTE + str(i), 200, f"h{i}", HOSTILE) for i in range(12)]
    release.set()
    end = time.time() + 20
    while len(rows_per_step) < 5 and time.time() < end:
        time.sleep(0.005)
    student = _ask(w, tiny_lm, "why is the sky blue", 3, "student", STUDENT)
    answer = student.result(60)
    assert student.finished_at < min(h.finished_at or float("inf") for h in hostile), \
        "the question waited for a hostile row to leave"
    assert answer.generated_ids == _solo(tiny_lm, "why is the sky blue", 3)
    for h in hostile:
        h.cancel()
    held = max(sum(c == HOSTILE for c in step) for step in rows_per_step)
    assert held <= seats.long_seats_per_client(8), f"one client held {held} long rows of 8"


def test_a_short_question_finds_a_seat_beside_long_rows_of_many_clients(tiny_lm, one_thread, rows_per_step):
    """Long rows of several clients fill at most the seats not kept for short questions."""
    w = Worker(max_batch=8)
    release = _hold(w)
    longs = [_ask(w, tiny_lm, PASTE + str(i), 150, f"l{i}", f"10.0.1.{i}") for i in range(10)]
    release.set()
    end = time.time() + 20
    while len(rows_per_step) < 3 and time.time() < end:
        time.sleep(0.005)
    short = _ask(w, tiny_lm, "hello", 3, "student", STUDENT)
    short.result(60)
    assert short.finished_at < min(j.finished_at or float("inf") for j in longs)
    for j in longs:
        j.cancel()
    most_long = max(sum(c != STUDENT for c in step) for step in rows_per_step)
    assert most_long <= 8 - seats.short_seats(8), f"long rows took {most_long} of 8 seats"


def test_new_sessions_of_a_busy_client_do_not_jump_the_queue(tiny_lm, one_thread):
    """A never-served session used to sort first: a script opening new sessions went ahead of every student who
    had been served once. The order is by client first: the one holding least, then served least recently."""
    w = Worker(batching=False)
    _ask(w, tiny_lm, "first question", 2, "student", STUDENT).result(30)
    _ask(w, tiny_lm, "a script's question", 2, "h0", HOSTILE).result(30)  # served after the student
    release = _hold(w)
    fresh = [w.submit(lambda: None, session=f"new{i}", client=HOSTILE, key=f"n{i}") for i in range(5)]
    again = w.submit(lambda: None, session="student", client=STUDENT, key="again")
    assert w.place(again)["place"] == 1, [w.place(j)["place"] for j in fresh]
    release.set()
    again.result(10)
    for j in fresh:
        j.result(10)
        assert again.finished_at <= j.finished_at


def test_a_waiting_request_says_why_it_waits(tiny_lm, one_thread, rows_per_step):
    w = Worker(max_batch=8)
    release = _hold(w)
    cap = seats.long_seats_per_client(8)
    hostile = [_ask(w, tiny_lm, PASTE + str(i), 200, f"h{i}", HOSTILE) for i in range(cap + 2)]
    release.set()
    end = time.time() + 20
    while len(rows_per_step) < 3 and time.time() < end:
        time.sleep(0.005)
    waiting = [h for h in hostile if h.started_at is None]
    assert waiting, "some hostile requests wait"
    why = w.place(waiting[0])["why"]
    assert why["reason"] == "client_long" and why["limit"] == cap
    for h in hostile:
        h.cancel()


# ---------------------------------------------------------------------------------------------- the policy alone


def _seat(client, weight=1.0, session=None):
    return seats.Seat(client, session or object(), weight)


def test_policy_weights_long_prompts_and_long_answers():
    assert seats.weight(40, 24) == 1.0  # a short question
    assert seats.weight(512, 256) > seats.weight(512, 24) > seats.weight(40, 24)
    assert seats.weight(40, 256) > 1.0
    assert seats.is_short(seats.weight(40, 24)) and not seats.is_short(seats.weight(512, 256))


def test_policy_one_seat_per_session_and_none_when_full():
    s = object()
    assert seats.refusal(_seat("a", session=s), [_seat("a", session=s)], set(), 8)["reason"] == "session"
    full = [_seat(f"c{i}") for i in range(8)]
    assert seats.refusal(_seat("z"), full, set(), 8)["reason"] == "full"
    assert seats.refusal(_seat("z"), full[:7], set(), 8) is None


def test_policy_keeps_short_seats_and_bounds_a_clients_long_rows():
    long_w = seats.weight(512, 256)
    free_long = 8 - seats.short_seats(8)
    longs = [_seat(f"c{i}", long_w) for i in range(free_long)]
    assert seats.refusal(_seat("z", long_w), longs, set(), 8)["reason"] == "long"
    assert seats.refusal(_seat("z"), longs, set(), 8) is None  # a short question still has a seat
    cap = seats.long_seats_per_client(8)
    mine = [_seat("me", long_w) for _ in range(cap)]
    assert seats.refusal(_seat("me", long_w), mine, set(), 8)["reason"] == "client_long"
    assert seats.refusal(_seat("me"), mine, set(), 8) is None  # short ones are not counted against it


def test_policy_fair_share_binds_only_while_another_client_waits():
    mine = [_seat("me") for _ in range(5)]
    assert seats.refusal(_seat("me"), mine, set(), 8) is None  # nobody else waits: free seats are used
    assert seats.refusal(_seat("me"), mine, {"other"}, 8)["reason"] == "share"  # 5 >= 8 / 2
    assert seats.refusal(_seat("other"), mine, {"me"}, 8) is None  # a client holding nothing always may


def test_bench_hostile_measures_a_question_alone_and_beside_hostile_traffic(tiny_lm, one_thread):
    from types import SimpleNamespace

    from engine.batching import bench_hostile

    args = SimpleNamespace(hostile=6, paste_chars=400, paste_tokens=200, questions=2, question_tokens=3,
                           max_batch=8, timeout=60.0, long_tokens=200, no_page=False)
    before = worker_threads()
    r = bench_hostile.run(tiny_lm, args)
    assert worker_threads() == before  # every worker it made is closed (Worker.close says why)
    assert r["same_answers"] and r["question_alone_s"] > 0 and r["question_beside_hostile_s"] < float("inf")
    assert len(r["questions_alone_s"]) == len(r["questions_beside_paste_s"]) == 2
    assert 0 < r["hostile_rows_held"] <= seats.long_seats_per_client(8)
    assert "beside 6 hostile sessions" in bench_hostile.summary(r)
    # the whole page (answer, analysis, block walk) in every scenario, each page finished before its others
    assert set(r["page_s"]) == {"none", "hostile", "pastes", "classmate", "alone3", "compile"}
    assert all(0 < s < float("inf") for s in r["page_s"].values()) and set(r["page_within_goal"]) == \
        {"hostile", "pastes", "classmate", "alone3", "compile"}
    assert "the whole page" in bench_hostile.summary(r)
