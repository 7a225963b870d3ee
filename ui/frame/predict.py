"""A "Try this" question with choices: the person picks, then the reveal says whether the pick matched, with the
numbers of this run that decided it (engine/predictions/grading.py) and their spread.

Alone (not class mode) it is a self-check. In class mode each pick goes, anonymously, to this server's tally
(ui/frame/tally.py), changeable until the teacher's "Reveal to the class" (ui/batching/classroom.py); the box is a
fragment that reads the tally every ``POLL_S`` seconds, so the reveal opens on every student's page without a
reload. The presenter view shows the class's tally as a bar chart, then the answer beside the measurement.

A page address may carry a question, ``?q=<topic>.<section>`` (ui/frame/questions.py ids): that box is marked as
the one the teacher sent the class to.
"""
from __future__ import annotations

import math
from typing import Callable

import streamlit as st

from engine.predictions import grading as G
from engine.predictions.grading import Outcome, Verdict
from ui.frame import questions as Q
from ui.frame import state
from ui.frame.layout import chart, presenting, try_this, what_you_see
from ui.frame.lessons import lesson
from ui.frame.tally import TALLY, Pick
from ui.frame.tally_chart import tally_chart

PARAM = "q"
POLL_S = 1.0  # a student's box reads the tally this often: the reveal reaches it within about a second

RULE_WORDS = {
    "prefill_vs_decode": "this run's own timeline: the prefill pass against as many decode steps as the prompt "
                         "has tokens (\"about as wide\" within a factor {lo:.2g}-{hi:.2g})".format(lo=G.AS_WIDE[0],
                                                                                                   hi=G.AS_WIDE[1]),
    "climbing_curve": f"this machine's sweep: a curve climbs when its longest prompt takes at least {G.CLIMBS:g}x "
                      "its shortest",
    "half_precision": "this machine's precision comparison: float32 decode step / half-precision step (under "
                      f"{G.HALF_EDGES[0]:g}x: not faster; {G.HALF_EDGES[1]:g}x or more: about twice)",
    "speculation_wins": "this machine's race with model:self: plain time / speculative time, against the spread of "
                        "the plain steps",
    "batch_step": "this machine's decode-step sweep: the step for 8 sequences / the step for 1 (about T: under "
                  "1.25x; about 8 T: within a factor 1.25 of 8)",
    "same_tokens": "this model's tokenizer: the three ids",
    "rope_shift": "this model: the two scores, measured",
    "attention_sink": "this run's attention: the key each head's last query reads most, the most heads deciding",
    "kv_per_token": "the bytes this run's decode steps added to the cache, measured from its tensors, against each "
                    "formula for this model",
    "nearer_alike": "this model's learned position table: the two cosines",
}


def how_decided(q: Q.Question) -> str:
    if q.decider is Q.Decider.FACT:
        return "How the answer is decided: a fact (the lesson's answer), the same on every machine."
    return f"How the answer is decided: by {RULE_WORDS.get(q.rule, 'this run')}, with its spread; too noisy, " \
           "nothing is graded."


def class_mode() -> bool:
    from ui.frame.models import policy

    return policy().class_mode


def picks_per_client() -> int:
    """A client's picks per question: the class batch's seats (a room behind one proxy is one client)."""
    from engine.jobs import worker

    return max(1, int(worker.get_worker().max_batch))


Decides = Verdict | Callable[[], Verdict] | None


def ask(topic: str, section: str, answer: str, key: str, verdict: Decides = None, text: str | None = None,
        pending: str | None = None) -> None:
    """The question of ``## <section>`` of ``topic``'s lesson, its choices, and the reveal: ``answer`` (the lesson's
    prose), ``verdict`` (what this run's numbers decide, or a function that reads it at the reveal, for a page that
    measures below its question; None: nothing measured yet, ``pending`` says how to measure it). ``text``
    replaces the lesson's question text (a question with the run's numbers in it)."""
    text = text if text is not None else lesson(topic, section)
    q = Q.question(topic, section)
    if q is None:
        try_this(text, answer, key)
        return
    with st.container(border=True):
        st.markdown(f":material/psychology: **Try this.** {text}")
        if st.query_params.get(PARAM) == q.id:
            state.put_page_params(**{PARAM: q.id})
            st.caption(":material/flag: Your teacher sent you to this question.")
        if not presenting():
            st.caption(how_decided(q))
        if class_mode():
            _in_class(q, state.voter_id(), answer, key, verdict, pending)
        else:
            _alone(q, answer, key, verdict, pending)
        if presenting():  # on the projector the tally and the answer come first, on the screen's first view
            st.caption(how_decided(q))


def _alone(q: Q.Question, answer: str, key: str, verdict: Decides, pending: str | None) -> None:
    pick = st.radio("Your prediction", q.keys, index=None, format_func=q.text_of, key=f"{key}_pick")
    if presenting():  # the room answers aloud: the toggle reveals with or without a pick on this screen
        if st.toggle("Reveal the answer", key=f"{key}_reveal"):
            reveal(q, pick, answer, verdict, pending)
        return
    with st.expander("Made your prediction? Reveal what happens"):
        if pick is None:
            st.markdown("Pick one of the choices above first: the answer shows once you have predicted.")
        else:
            reveal(q, pick, answer, verdict, pending)


@st.fragment(run_every=POLL_S)
def _in_class(q: Q.Question, voter: str, answer: str, key: str, verdict: Decides, pending: str | None) -> None:
    from ui.frame.work import client_address

    mine = TALLY.mine(q, voter)
    if TALLY.revealed(q):
        if presenting():  # the tally, then the answer under it (the lesson box is a narrow column already)
            answer_key = right_choice(q, verdict() if callable(verdict) else verdict)
            chart(tally_chart(q, TALLY.counts(q), answer_key), "counted",
                  "Picks of this class, one per student page, anonymous; green: the answer.", key=f"{key}_tally")
        reveal(q, mine, answer, verdict, pending)
        return
    if presenting():  # the projector is not a voter: the room picks on its own pages, the screen shows the tally
        chart(tally_chart(q, TALLY.counts(q)), "counted", "Picks of this class so far, one per student page, "
              "anonymous; the answer shows when the teacher reveals it.", key=f"{key}_tally")
        st.caption(":material/hourglass_top: The answer opens here when the class view reveals it.")
        return
    keys = list(q.keys)
    pick = st.radio("Your prediction (anonymous; you can change it until your teacher reveals the answer)", keys,
                    index=keys.index(mine) if mine in keys else None, format_func=q.text_of,
                    key=f"{key}_pick_{TALLY.round}")  # a new round starts from no pick, in every tab
    if pick is not None and pick != mine:
        said = TALLY.pick(q, voter, client_address(), pick, picks_per_client())
        if said is Pick.CROWD:
            st.warning("This address already casts as many picks as the class has seats: yours is not counted.",
                       icon=":material/group_off:")
        elif said is Pick.CLOSED:
            st.caption("The answer was just revealed: picks are closed.")
    st.caption(":material/hourglass_top: The answer opens here when your teacher reveals it to the class.")


def right_choice(q: Q.Question, verdict: Verdict | None) -> str | None:
    """The choice that is right: the lesson's fact, or what this run's numbers decided (None: not decided)."""
    if q.decider is Q.Decider.FACT:
        return q.rule
    return verdict.answer if verdict is not None and verdict.decided else None


def _number(x: float, unit: str) -> str:
    if not math.isfinite(x):
        return "n/a"
    if unit == "x":
        return f"{x:.2f}x" if abs(x) >= 0.1 else f"{x:.2g}x"  # a prefill of 3.5 ms over 2,043 ms: 0.0017x, not 0.00x
    if unit == "ms":
        return f"{x:.1f} ms" if x < 100 else f"{x:,.0f} ms"
    return f"{x:g}"


def evidence_lines(verdict: Verdict) -> list[str]:
    """The deciding numbers with their spread, one markdown line each."""
    out = []
    for e in verdict.evidence:
        if e.n == 0:
            continue
        spread = "" if e.lo == e.hi else \
            f" ({'interquartile range' if e.n >= 4 else 'range'} {_number(e.lo, e.unit)}-{_number(e.hi, e.unit)}" \
            f"{f', {e.n} values' if e.n > 1 else ''})"
        out.append(f"- {e.label}: **{_number(e.median, e.unit)}**{spread}")
    return out


def grade_words(q: Q.Question, pick: str | None, verdict: Verdict | None, pending: str | None) -> str:
    """Whether the pick matched, and what decided it (markdown; choice texts are the lesson file's)."""
    right = right_choice(q, verdict)
    yours = f"Your pick: *{q.text_of(pick)}*. " if pick else ""
    if q.decider is Q.Decider.MEASURED:
        if verdict is None or verdict.outcome is Outcome.NOT_MEASURED:
            return yours + (pending or "Not measured yet on this page: run the measurement, then reveal again.") + \
                " Nothing is graded until then."
        if verdict.outcome is Outcome.NOISY:
            return yours + "**Too noisy to decide on this run: nothing is graded.** The spreads straddle the line " \
                           "between two choices; measure again on a quieter machine.\n\n" + \
                "\n".join(evidence_lines(verdict))
        if verdict.outcome is Outcome.UNDECIDED:
            return yours + "**This run's numbers name no single choice: nothing is graded.** They are exact, not " \
                           "noisy: two choices tie, or none of them matches this model.\n\n" + \
                "\n".join(evidence_lines(verdict))
        head = f"**This run decides: {q.text_of(right)}.**"
    else:
        head = f"**The answer: {q.text_of(right)}.**"
    mark = "" if pick is None else (" :green[Your pick matches.]" if pick == right else
                                    f" Your pick, *{q.text_of(pick)}*, does not.")
    body = "\n\n" + "\n".join(evidence_lines(verdict)) if verdict is not None and verdict.evidence else ""
    return head + mark + body


def reveal(q: Q.Question, pick: str | None, answer: str, verdict: Decides, pending: str | None) -> None:
    st.markdown(grade_words(q, pick, verdict, pending))
    st.markdown(answer)


def lesson_intro(topic: str) -> None:
    """A page's first screen when it has no chart before a click: its lesson's intro, "what you see" and "try
    this" (assets/lessons/<topic>.md's sections of those names)."""
    st.markdown(lesson(topic, "intro"))
    what_you_see(lesson(topic, "what you see"))
    ask(topic, "try this", lesson(topic, "answer"), key=f"{topic}_try")
