"""The teacher's class view of the room's predictions: pick a lesson question, send the class to it, watch the
tally fill live (a bar chart, refreshed every ``REFRESH_S``), then "Reveal to the class" (every student's box
opens within a second: ui/frame/predict.py polls the tally) and "New round" (every pick and reveal cleared).

Only the class view draws this (ui/batching/classroom.py, behind the teacher's token). Counts only: no session,
no address, nothing a student typed."""
from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

from ui.frame import nav
from ui.frame import questions as Q
from ui.frame.layout import chart
from ui.frame.predict import PARAM, right_choice
from ui.frame.tally import TALLY
from ui.frame.tally_chart import tally_chart

REFRESH_S = 1.0  # the tally on the teacher's screen: within 2 s of the last pick, with the server's own delay


def _label(q: Q.Question) -> str:
    title = next((p.title for p in nav.PAGES if p.url == q.topic), q.topic)
    from ui.frame.lessons import lesson

    text = " ".join(lesson(q.topic, q.section).split())
    return f"{title}: {text[:90]}{'...' if len(text) > 90 else ''}"


def page_link(q: Q.Question, root: str, params: dict[str, str]) -> str:
    """The class link that opens ``q``'s page with the box marked (``?q=``), the class settings pinned."""
    return f"{root}/{q.topic}?{urlencode({**params, PARAM: q.id})}"


def section(root: str, params: dict[str, str]) -> None:
    """The predictions block: ``root`` this server's address for others, ``params`` the class link's values."""
    st.subheader("The class predicts", divider="gray")
    qs = Q.all_questions()
    asked = sorted(TALLY.asked())
    ids = list(qs)
    sent = Q.by_id(st.query_params.get(PARAM))  # the teacher's own link may name the question (?q=)
    default = ids.index(sent.id) if sent is not None else \
        ids.index(asked[0]) if asked and asked[0] in ids else ids.index("timeline.try-this")
    qid = st.selectbox("Question", ids, index=default, format_func=lambda i: _label(qs[i]), key="class_question")
    q = qs[qid]
    st.markdown("**Send the class to this question** (the class link, opening this page with the question marked):")
    st.code(page_link(q, root, params), language=None)
    _tally(q)


@st.fragment(run_every=REFRESH_S)
def _tally(q: Q.Question) -> None:
    c = st.columns([3, 1])
    with c[1]:
        picks = st.empty()  # above the buttons, written once they have acted
        if st.button("Reveal to the class", key="class_reveal", type="primary", disabled=TALLY.revealed(q),
                     icon=":material/visibility:"):
            TALLY.reveal(q)
        if st.button("New round", key="class_new_round", icon=":material/restart_alt:",
                     help="Clears every pick and reveal, of every question."):
            TALLY.new_round()
    revealed = TALLY.revealed(q)
    counts = TALLY.counts(q)
    picks.metric("Picks", sum(counts.values()))
    with c[0]:
        answer = right_choice(q, None) if revealed else None
        chart(tally_chart(q, counts, answer), "counted",
              "Picks of the class, one per student page (a reload keeps its pick), anonymous"
              + ("; revealed: every student's page shows the answer now, graded by " +
                 ("the lesson's fact (green)." if answer else "that page's own run (open the page in presenter view "
                                                            "to show yours beside this tally).")
                 if revealed else "; the answer opens on every page when you reveal it."),
              key="class_tally")
