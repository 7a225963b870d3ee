"""AppTest: the teacher's class view shows only with the teacher's token, and it draws the worker's real recent
answers (batched) with the batching page's charts, without anyone's prompt text."""
from __future__ import annotations

import pytest

from tests.app.test_pages import errors, run_page

SECRET = "a private question about giraffes"


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv("ILE_TEACHER_TOKEN", "t0ken-for-tests")
    return "t0ken-for-tests"


def _served_some_answers():
    """Three sessions' answers on the tiny model through the process's worker (so the view has traffic)."""
    from engine.jobs import worker
    from engine.core.request import RunRequest
    from engine.jobs.classbatch import ANSWER, AnswerRequest
    from engine.core.loaded import ModelRef
    from engine.models.loading import load_model
    from engine.core.sampling import SamplingSettings

    lm = load_model(ModelRef("tiny-random"), device="cpu")
    jobs = [worker.ask(ANSWER, AnswerRequest(lm, RunRequest(lm.ref, f"{SECRET} {i}", False, 5, SamplingSettings(0.0),
                                                            0), analyse=False), session=f"s{i}") for i in range(3)]
    for j in jobs:
        j.result(60)


def test_class_view_needs_the_token(token):
    _served_some_answers()
    at = run_page("pages/batching.py", model="tiny-random")
    at.query_params["teacher"] = "wrong"  # (the home page's run before the switch drops page-only values)
    at.run()
    assert not errors(at), errors(at)
    assert not any("Your class, batched" in h.value for h in at.header)
    at = run_page("pages/batching.py", model="tiny-random")
    assert not any("Your class, batched" in h.value for h in at.header)


def test_class_view_with_the_token_draws_the_class(token):
    _served_some_answers()
    at = run_page("pages/batching.py", model="tiny-random")
    at.query_params["teacher"] = token
    at.run()
    assert not errors(at), errors(at)
    assert any("Your class, batched" in h.value for h in at.header)
    labels = [m.label for m in at.metric]
    assert "Student sessions" in labels and "Requests waiting" in labels
    assert any("tokens/s" in m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 3  # the batch sizes, the Gantt chart, and the page's workload chart
    everything = repr(at._tree)
    assert "giraffe" not in everything, "no one's prompt is shown in the class view"


def test_class_result_from_a_snapshot():
    from ui.batching.classroom import class_result, wave_words

    snap = {"finished": [
        {"kind": "answer", "state": "done", "submitted": -10.0, "started": -9.0, "first_token": -8.5,
         "finished": -7.0, "tokens": 6},
        {"kind": "answer", "state": "done", "submitted": -9.5, "started": -9.0, "first_token": -8.5,
         "finished": -6.0, "tokens": 6},
        {"kind": "decode_sweep", "state": "done", "submitted": -6.0, "started": -5.0, "first_token": None,
         "finished": -1.0, "tokens": 0}],
        "running": [], "steps": [(-9.0, -8.5, 2, "prefill"), (-8.5, -8.4, 2, "decode")]}
    res = class_result(snap, 32)
    assert [r.arrival_s for r in res.requests] == [0.0, 0.5]
    assert res.requests[0].admitted_s == 1.0 and res.requests[1].done_s == 4.0
    assert [len(s.rids) for s in res.steps] == [2, 2]
    assert res.metrics()["tokens"] == 12
    assert "p50 **3.2 s**" in wave_words(snap) and "**12 tokens** in 4.0 s" in wave_words(snap)
    assert class_result({"finished": [], "running": [], "steps": []}, 32) is None


def test_while_a_wave_decodes_the_view_says_what_is_true_now():
    """A class of 5 decoding: it read "0 tokens ... 0.0 tokens/s ... latency ." for 20 s. Now it says how many
    answers are being written and their tokens so far, and rates and latency only over finished answers; the
    start's warm-up run is no one's answer."""
    from ui.batching.classroom import class_result, wave_title, wave_words

    warm = {"kind": "answer", "state": "done", "submitted": -30.0, "started": -30.0, "first_token": -29.0,
            "finished": -28.0, "tokens": 24, "warmup": True}
    running = [{"kind": "answer", "state": "running", "tokens": 3, "waited_s": 0.5, "running_s": 4.0 - i * 0.1,
                "warmup": False} for i in range(5)]
    snap = {"finished": [warm], "running": running, "queued": [], "steps": [(-4.0, -3.0, 5, "prefill")]}
    words = wave_words(snap)
    assert "**5 answers** being written (15 tokens so far)" in words and "No answer of this wave is ready" in words
    assert "0.0 tokens/s" not in words and "latency (" not in words and "**0 tokens**" not in words, words
    assert len(class_result(snap, 32).requests) == 5, "the warm-up run is not drawn as a student's request"
    assert wave_title(snap) == "Latest wave: 0 answers ready, 5 being written"
    done = dict(running[0], state="done", submitted=-6.0, started=-5.5, first_token=-5.0, finished=-1.0, tokens=6)
    words = wave_words(dict(snap, finished=[warm, done], running=running[1:]))
    assert "**4 answers** being written" in words and "**1 answer** ready, **6 tokens** in 5.0 s" in words
    assert "**1.2 tokens/s**" in words and "p50 **5.0 s**" in words and not words.rstrip().endswith(" .")
    assert wave_words({"finished": [warm], "running": [], "steps": []}) == ""


def test_the_class_view_draws_the_latest_wave_of_requests():
    """An answer from two minutes ago and a class asking now: the charts and tokens/s are the class's (time 0 at
    its first request), not a 135 s axis with the class squeezed into its last few seconds."""
    from ui.batching.classroom import QUIET_GAP_S, class_result

    def answer(sub, fin):
        return {"kind": "answer", "state": "done", "submitted": sub, "started": sub, "first_token": sub + 0.5,
                "finished": fin, "tokens": 6}

    old = [answer(-135.0, -133.0), answer(-134.0, -110.0)]  # the second one ran long: the engine busy until -110
    wave = [answer(-10.0 + 0.1 * i, -2.0) for i in range(20)]
    steps = [(-133.5, -133.0, 1, "decode"), (-9.0, -8.0, 20, "prefill"), (-8.0, -7.9, 20, "decode")]
    res = class_result({"finished": old + wave, "running": [], "steps": steps}, 32)
    assert len(res.requests) == 20 and res.requests[0].arrival_s == 0.0
    assert res.metrics()["makespan_s"] == pytest.approx(8.0) and [len(s.rids) for s in res.steps] == [20, 20]
    # a pause shorter than the gap keeps both in one wave (a class asking in two rounds)
    near = [answer(-10.0 - QUIET_GAP_S + 1.0, -10.0 - QUIET_GAP_S + 3.0)]
    assert len(class_result({"finished": near + wave, "running": [], "steps": steps}, 32).requests) == 21


def test_a_class_link_fixes_the_settings_and_leaves_the_question_free(token):
    at = run_page("pages/tokenization.py", model="tiny-random", pin="1", prompt="Teacher's prompt", max_new_tokens="3")
    assert not errors(at), errors(at)
    box = at.text_area(key="w_prompt")
    assert box.value == "Teacher's prompt" and not box.disabled, "each student asks their own question"
    assert at.slider(key="w_max_new_tokens").disabled and at.slider(key="w_temperature").disabled
    assert at.text_input(key="w_model").disabled and at.selectbox(key="w_precision").disabled
    assert any("The prompt is yours" in c.value for c in at.sidebar.caption)
    box.input("My own question").run()
    assert not errors(at), errors(at)
    assert at.query_params.get("pin") in ("1", ["1"]), "the pin stays in the student's address"
    assert at.query_params.get("prompt") in ("My own question", ["My own question"])
    assert at.slider(key="w_max_new_tokens").value == 3
    fixed = run_page("pages/tokenization.py", model="tiny-random", pin="prompt", prompt="Pinned prompt")
    assert fixed.text_area(key="w_prompt").value == "Pinned prompt" and fixed.text_area(key="w_prompt").disabled
    assert fixed.query_params.get("pin") in ("prompt", ["prompt"])
    free = run_page("pages/tokenization.py", model="tiny-random", prompt="Free prompt")
    assert not free.text_area(key="w_prompt").disabled and not free.slider(key="w_max_new_tokens").disabled
    assert "pin" not in free.query_params


def test_the_class_view_offers_both_class_links_without_the_token(token):
    at = run_page("pages/batching.py", model="tiny-random", prompt="Shared prompt", max_new_tokens="5")
    at.query_params["teacher"] = token
    at.run()
    assert not errors(at), errors(at)
    links = [c.value for c in at.code if "pin=" in c.value and "&q=" not in c.value]  # not the question link
    assert len(links) == 2 and "pin=1" in links[0] and "pin=prompt" in links[1]
    for link in links:
        assert "prompt=Shared+prompt" in link and "max_new_tokens=5" in link and "model=tiny-random" in link
        assert token not in link and "teacher" not in link and "<" not in link
        assert link.startswith("http://"), "a link another machine can open, not a path"
    # this test server listens on 127.0.0.1: the view says no other machine can open it
    assert any("this machine only" in w.value for w in at.warning)


def test_timeline_page_times_a_batched_answer_alone(monkeypatch):
    """The sidebar's answer was served in a batch: the loop page says so, and the timeline page (whose lesson is
    step times) repeats the run alone instead of presenting batched steps as solo ones."""
    from dataclasses import replace

    from ui.frame import runs

    real = runs.trace_for
    solo_calls = []

    def batched(*args, **kw):
        tr = real(*args, **kw)
        return replace(tr, steps=tuple(replace(s, batch_size=7) for s in tr.steps))

    real_solo = runs.solo_generation_for
    monkeypatch.setattr(runs, "trace_for", batched)
    monkeypatch.setattr(runs, "solo_generation_for", lambda *a: solo_calls.append(a) or real_solo(*a))
    at = run_page("pages/timeline.py", model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    assert len(solo_calls) == 1, "the timeline page ran the prompt alone"
    at = run_page("pages/loop.py", model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    assert any("Measured in a batch of up to 7" in c.value for c in at.caption)
    assert len(solo_calls) == 1, "the loop page shows the batched run, labelled"


def test_a_lone_answer_after_the_class_batch_does_not_replace_it():
    """A class's batch of 5, then a quiet minute, then one answer alone (a student late, the teacher trying a
    prompt): the view kept only the lone one, and the teacher who looked late had lost the demonstration."""
    from ui.batching.classroom import class_result, since_words, wave_title

    def answer(sub, fin):
        return {"kind": "answer", "state": "done", "submitted": sub, "started": sub, "first_token": sub + 0.5,
                "finished": fin, "tokens": 6}

    batch = [answer(-400.0 + 0.2 * i, -390.0) for i in range(5)]
    lone = [answer(-60.0, -58.0)]
    snap = {"finished": batch + lone, "running": [], "queued": [], "steps": [(-399.0, -398.0, 5, "decode")]}
    assert len(class_result(snap, 32).requests) == 5 and wave_title(snap) == "Latest wave: 5 answers ready"
    assert "ended 390 s ago; since then 1 answer ran alone" in since_words(snap)
    # a new batch replaces it, and a lone answer while it runs is drawn as it happens
    later = [answer(-10.0 + 0.1 * i, -2.0) for i in range(3)]
    assert len(class_result(dict(snap, finished=batch + lone + later), 32).requests) == 3
    running = [{"kind": "answer", "state": "running", "tokens": 2, "waited_s": 0.1, "running_s": 1.0}]
    assert len(class_result(dict(snap, running=running), 32).requests) == 1
    assert since_words(dict(snap, finished=batch)) == ""
