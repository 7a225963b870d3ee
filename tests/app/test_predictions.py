"""AppTest: a page's "Try this" has choices; alone, the reveal waits for a pick and grades it by this run's own
numbers; in class mode the pick goes to the server's tally (one per session), and the answer opens when the
teacher reveals it (the class view's buttons), and a new round clears it."""
import pytest

from tests.app.test_pages import errors, run_page
from ui.frame.questions import by_id
from ui.frame.tally import TALLY

Q = by_id("timeline.try-this")


def _texts(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_alone_the_reveal_waits_for_a_pick_then_grades_it_by_this_run():
    at = run_page("pages/timeline.py", model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    pick = at.radio(key="timeline_try_pick")
    assert list(pick.options) == [Q.text_of(k) for k in Q.keys] and pick.value is None
    assert "Pick one of the choices above first" in _texts(at)
    assert any("How the answer is decided: by this run's own timeline" in c.value for c in at.caption)
    pick.set_value("wider").run()
    assert not errors(at), errors(at)
    text = _texts(at)
    # graded by the run's own numbers, or said to be too noisy: never the fixed prose alone
    assert ("This run decides:" in text and "prefill pass" in text) or "Too noisy to decide" in text, text
    assert "Your pick" in text


def _pick(at):
    return next((r for r in at.radio if str(r.key).startswith("timeline_try_pick")), None)


@pytest.fixture
def class_mode(monkeypatch):
    monkeypatch.setenv("ILE_CLASS_MODE", "on")
    monkeypatch.setenv("ILE_MODELS", "tiny-random")
    TALLY.new_round()
    yield
    TALLY.new_round()


def test_in_class_a_pick_is_counted_once_and_the_reveal_opens_the_answer(class_mode):
    at = run_page("pages/timeline.py", model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    assert "The answer opens here when your teacher reveals it" in "\n".join(c.value for c in at.caption)
    for _ in range(3):  # repeated clicks: one entry
        _pick(at).set_value("narrower").run()
        _pick(at).set_value("wider").run()
    assert not errors(at), errors(at)
    assert TALLY.counts(Q) == {"narrower": 0, "as wide": 0, "wider": 1}
    assert "This run decides" not in _texts(at)  # nothing revealed before the teacher does
    TALLY.reveal(Q)
    at.run()
    assert not errors(at), errors(at)
    text = _texts(at)
    assert "This run decides:" in text or "Too noisy to decide" in text
    assert _pick(at) is None  # picks closed
    TALLY.new_round()
    at.run()
    assert _pick(at).value is None  # the new round starts from no pick
    assert sum(TALLY.counts(Q).values()) == 0


def test_the_class_view_tallies_reveals_and_starts_a_new_round(class_mode, monkeypatch):
    """The teacher's class view: the live tally of the chosen question (a bar chart of counts only), "Reveal to the
    class" reveals it in the tally every student's box reads, "New round" clears every pick."""
    monkeypatch.setenv("ILE_TEACHER_TOKEN", "t0ken-for-tests")
    for i, choice in enumerate(["narrower", "narrower", "wider"]):
        TALLY.pick(Q, f"student-{i}", f"10.0.0.{i}", choice, per_client=32)
    at = run_page("pages/batching.py", model="tiny-random")
    at.query_params["teacher"] = "t0ken-for-tests"
    at.run()
    assert not errors(at), errors(at)
    assert at.selectbox(key="class_question").value == "timeline.try-this"  # the question the room is answering
    assert next(m for m in at.metric if m.label == "Picks").value == "3"
    link = next(c.value for c in at.code if "q=timeline.try-this" in c.value)
    assert "/timeline?" in link and "pin=1" in link and "t0ken" not in link and "teacher" not in link
    tree = repr(at._tree)
    assert "10.0.0." not in tree and "student-" not in tree  # counts only
    at.button(key="class_reveal").click().run()
    assert not errors(at), errors(at)
    assert TALLY.revealed(Q)
    at.button(key="class_new_round").click().run()
    assert not errors(at), errors(at)
    assert len(TALLY) == 0 and not TALLY.revealed(Q)


@pytest.mark.parametrize("forged", ["<script>alert(1)</script>", "timeline.nope", "../../etc/passwd", "x" * 5000])
def test_a_forged_question_in_the_address_is_ignored(forged):
    at = run_page("pages/timeline.py", model="tiny-random", max_new_tokens="2", q=forged)
    assert not errors(at), errors(at)
    assert not any("Your teacher sent you" in c.value for c in at.caption)
    assert any(str(r.key).startswith("timeline_try_pick") for r in at.radio)  # the question is still there


def test_presenter_view_shows_the_tally_then_the_answer_under_it(class_mode):
    at = run_page("pages/timeline.py", model="tiny-random", max_new_tokens="4", present="1")
    assert not errors(at), errors(at)
    TALLY.pick(Q, "someone", "10.0.0.1", "wider", per_client=32)
    at.run()
    charts = len(at.get("plotly_chart"))
    assert charts >= 2  # the timeline and the class's tally
    TALLY.reveal(Q)
    at.run()
    assert not errors(at), errors(at)
    text = _texts(at)
    assert "This run decides:" in text or "Too noisy to decide" in text
    assert len(at.get("plotly_chart")) == charts  # the tally is still there, above the answer


@pytest.mark.parametrize("path, key, qid", [("pages/attention.py", "attention_try_pick", "attention.try-sink"),
                                            ("pages/kv_cache.py", "kv_try_token_pick", "kv_cache.try-token"),
                                            ("pages/kv_cache.py", "kv_try_variants_pick", "kv_cache.try-variants")])
def test_the_new_questions_are_asked_counted_and_graded_in_class(class_mode, path, key, qid):
    """The attention and KV cache questions in class mode (the variants box sits in the calculator's fragment):
    a pick is counted, and after the reveal the box grades it by this run or by the lesson's fact."""
    q = by_id(qid)
    at = run_page(path, model="tiny-random", max_new_tokens="4")
    assert not errors(at), errors(at)
    radio = next(r for r in at.radio if str(r.key).startswith(key))
    radio.set_value(q.keys[0]).run()
    assert not errors(at), errors(at)
    assert TALLY.counts(q)[q.keys[0]] == 1
    TALLY.reveal(q)
    at.run()
    assert not errors(at), errors(at)
    text = _texts(at)
    assert "This run decides:" in text or "The answer:" in text or "Too noisy to decide" in text, text[-1500:]
