"""The lesson files' "Try this" choices: every question has 2-4 choices and one rule that decides among them, the
parser refuses what a teacher's edit could break with one clear line, and each page's question is there."""
import pytest

from engine.predictions.grading import RULES
from ui.frame import questions as Q
from ui.frame.lessons import sections


def test_every_question_parses_and_is_decided():
    qs = Q.all_questions()
    assert len(qs) >= 12
    for q in qs.values():
        assert 2 <= len(q.choices) <= 4, q.id
        assert all(c.text for c in q.choices), q.id
        if q.decider is Q.Decider.FACT:
            assert q.rule in q.keys, q.id
        else:
            assert set(RULES[q.rule].answers) == set(q.keys), q.id
        assert q.section in sections(q.topic), f"{q.id}: choices without their question"


@pytest.mark.parametrize("qid, rule", [("timeline.try-this", "prefill_vs_decode"),
                                       ("timeline.precision-try-this", "half_precision"),
                                       ("speculative.try-self", "speculation_wins"),
                                       ("batching.try-batch", "batch_step"),
                                       ("timeline.sweep-try-this", "climbing_curve"),
                                       ("attention.try-sink", "attention_sink"),
                                       ("kv_cache.try-token", "kv_per_token")])
def test_the_measurable_questions_are_decided_by_the_run(qid, rule):
    q = Q.by_id(qid)
    assert q is not None and q.decider is Q.Decider.MEASURED and q.rule == rule


GOOD = "- a: One\n- b: Two\ndecided by: fact b"


def test_parse_reads_choices_and_rule():
    q = Q.parse("loop", "try this", GOOD)
    assert q.keys == ("a", "b") and q.rule == "b" and q.id == "loop.try-this" and q.text_of("b") == "Two"


@pytest.mark.parametrize("text, says", [
    ("- a: One\ndecided by: fact a", "1 choices"),
    ("- a: 1\n- b: 2\n- c: 3\n- d: 4\n- e: 5\ndecided by: fact a", "5 choices"),
    ("- a: One\n- a: Two\ndecided by: fact a", "same key"),
    ("- a: One\n- b: Two", "no \"decided by"),
    ("- a: One\n- b: Two\ndecided by: fact c", "not one of the choices"),
    ("- a: One\n- b: Two\ndecided by: measured nonsense", "no grading rule"),
    ("- a: One\n- b: Two\ndecided by: measured prefill_vs_decode", "decides among"),
    ("- a: One\n- b: Two\nsome stray prose\ndecided by: fact a", "neither a choice"),
])
def test_parse_refuses_with_one_line(text, says):
    with pytest.raises(Q.LessonError) as e:
        Q.parse("loop", "try this", text)
    assert says in str(e.value) and "\n" not in str(e.value) and "loop.md" in str(e.value)


def test_by_id_refuses_forged_ids():
    assert Q.by_id("timeline.try-this") is not None
    for forged in ("timeline.nope", "", None, 3, ["timeline.try-this"], "../../etc/passwd"):
        assert Q.by_id(forged) is None


def test_every_try_this_box_is_a_question_with_choices():
    """No page asks a free-text "Try this" any more: the plain box (ui/frame/layout.py try_this) is drawn only by
    ui/frame/predict.py, for a lesson section that has no choices."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    callers = [str(p.relative_to(root)) for folder in ("pages", "ui") for p in (root / folder).rglob("*.py")
               if "try_this(" in p.read_text() and p.name not in {"layout.py", "predict.py"}]
    assert callers == [], callers
