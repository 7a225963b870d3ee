"""Taking turns (engine/jobs/worker.py): no batch and no long answer holds the engine for its whole length. A
student's analysis runs between two steps of a classmate's long answers, answers that run alone take turns with
everyone else's, a client's alone answers count against its seats, a closed tab's analysis is dropped before its
pass, and the order follows the engine time each client was charged."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.jobs import seats
from engine.core.request import RunRequest
from engine.jobs.classbatch import ANSWER, AnswerRequest, answer_alone, answer_weight
from engine.jobs.prompt_passes import ANALYSIS, PromptRequest, prompt_passes
from engine.jobs.kinds import JobKind
from engine.jobs.worker import Worker

GREEDY = SamplingSettings(0.0)
CLASSMATE, STUDENT, HOSTILE = "10.0.0.5", "10.0.0.7", "10.0.0.66"

# Answers of a kind that never batches run alone (as a sliding-window model's or int8's answers do: classbatch.group)
ALONE_ANSWER = JobKind("answer", alone=answer_alone, weight=answer_weight)


def _hold(w):
    started, release = threading.Event(), threading.Event()
    w.submit(lambda: (started.set(), release.wait(30)), session="teacher", client="teacher")
    started.wait(10)
    return release


def _answer(w, lm, prompt, n, session, client, kind=ANSWER):
    return w.ask(kind, AnswerRequest(lm, RunRequest(lm.ref, prompt, False, n, GREEDY, 0), analyse=False),
                 session=session,
                 client=client, key=("gen", session, prompt, n))


def test_a_students_analysis_runs_between_the_steps_of_a_classmates_long_answers(tiny_lm, one_thread):
    """The loop page asks for the prompt's analysis after its answer: another job group. It used to wait until the
    batch of answers had drained (a classmate's 256 tokens held eight students' pages to a minute); now it takes
    its turn between two of the batch's steps."""
    w = Worker()
    release = _hold(w)
    long = [_answer(w, tiny_lm, f"tell me a long story number {i}", 200, f"c{i}", CLASSMATE) for i in range(2)]
    mine = w.ask(ANALYSIS, PromptRequest(tiny_lm, tuple(range(5, 30))), session="s", client=STUDENT, key="an")
    release.set()
    mine.result(120)
    traces = [j.result(120) for j in long]
    assert all(len(t.generated_ids) == 200 for t in traces)
    first_end = min(j.finished_at for j in long)
    assert mine.finished_at < first_end, "the analysis waited for the long answers to drain"
    assert mine.started_at > min(j.started_at for j in long), "it ran between the batch's steps, not before it"


def test_answers_that_run_alone_take_turns_with_another_students(tiny_lm, one_thread):
    """Three long answers that cannot be batched (each runs alone) used to run one after another while another
    student's short answer waited for all three; now each step is a turn, and the short answer ends first."""
    w = Worker()
    release = _hold(w)
    long = [_answer(w, tiny_lm, f"a long answer {i}", 150, f"g{i}", f"10.0.1.{i}", ALONE_ANSWER) for i in range(3)]
    short = _answer(w, tiny_lm, "why", 4, "s", STUDENT, ALONE_ANSWER)
    release.set()
    tr = short.result(120)
    assert [j.result(120).generated_ids for j in long]
    assert tr.generated_ids == run_trace(tiny_lm, "why", GREEDY, 4, 0, False, analyse=False).generated_ids
    assert short.finished_at < min(j.finished_at for j in long), "the short answer waited for the long ones"
    assert sum(j.started_at < short.finished_at for j in long) >= 2, "the long answers did not take turns"


def test_a_clients_long_answers_alone_count_against_its_seats(tiny_lm, one_thread):
    """Jobs that run alone skipped the per-client seats. Taking turns must not let one computer's tabs each start a
    long answer beside everyone's (a naive round robin would run all four at once): a client holds at most
    seats.long_seats_per_client(max_batch) long answers at once, alone as in a batch."""
    w = Worker(max_batch=8)
    release = _hold(w)
    jobs = [_answer(w, tiny_lm, f"a long answer {i}", 140, f"h{i}", HOSTILE, ALONE_ANSWER) for i in range(4)]
    release.set()
    for j in jobs:
        j.result(180)
    cap = seats.long_seats_per_client(8)
    spans = [(j.started_at, j.finished_at) for j in jobs]
    most = max(sum(a <= t < z for a, z in spans) for t, _ in spans)
    assert most <= cap, f"{most} long answers of one client ran at once (cap {cap})"


@dataclass(frozen=True)
class _Ids:
    lm: object
    ids: tuple


def test_a_closed_tabs_analysis_is_dropped_before_its_pass(monkeypatch):
    """Analysis passes ran every prompt admitted in a round to its end, closed tabs' included (up to 147 s); each
    pass now drops the prompts whose tab left, and the runner pauses between passes."""
    import engine.jobs.prompt_passes as passes

    monkeypatch.setattr(passes, "ANALYSIS_CHUNK_TOKENS", 4)  # one prompt per pass
    served: list = []
    jobs: list = []

    def many(first, prompts):
        served.append(prompts[0][0])
        if len(served) == 1:
            jobs[2].cancel()  # the third tab closes while the first pass runs
        return [len(p) for p in prompts]

    kind = JobKind("walk", alone=lambda r: len(r.ids), together=prompt_passes("walk", many),
                   group=lambda r: "g")
    w = Worker(publish=False)
    release = _hold(w)
    jobs += [w.ask(kind, _Ids(None, (i, i, i)), session=f"s{i}", client=f"c{i}") for i in range(3)]
    release.set()
    assert jobs[0].result(30) == 3 and jobs[1].result(30) == 3
    jobs[2].wait(30)
    assert jobs[2].state == "cancelled" and served == [0, 1]


def test_the_engine_time_a_client_used_decides_the_next_turn():
    """The fair order charges each client the engine seconds its work used. Client A's first job takes 0.4 s, B's
    takes none: B's second job goes before A's second, although A was served longer ago (the order by last service
    alone would have picked A)."""
    w = Worker(batching=False, publish=False)
    release = _hold(w)
    a1 = w.submit(lambda: time.sleep(0.4), session="a1", client="A", key="a1")
    b1 = w.submit(lambda: None, session="b1", client="B", key="b1")
    a2 = w.submit(lambda: None, session="a2", client="A", key="a2")
    b2 = w.submit(lambda: None, session="b2", client="B", key="b2")
    release.set()
    for j in (a1, b1, a2, b2):
        j.result(30)
    assert a1.finished_at <= b1.started_at, "equal charges: the first submitted goes first"
    assert b2.finished_at <= a2.started_at, "B used less engine time than A, so B's next job goes first"
