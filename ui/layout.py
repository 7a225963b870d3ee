"""Page building blocks: header, lesson boxes, a chart with its caption, and the presenter view's sections.

Presenter view (the sidebar toggle, kept in the share link as ``present=1``): larger type, sidebar collapsed,
one section of a page at a time with Previous / Next below it, and each "Try this" answer behind a button.
A page declares its sections with ``if section("Title"):``; the first one is the page's introduction.
"""
from __future__ import annotations

import streamlit as st

from ui import state
from ui.figures import TICK_SIZE, caption, readable

_RUN = "_sections"  # this run's page key and the number of sections declared so far


def presenting() -> bool:
    return state.settings().present


def begin_page(key: str) -> None:
    """Called by app.py once it knows the page: sections are counted per run, remembered per page."""
    st.session_state[_RUN] = {"page": key, "count": 0}


def _current_key() -> str:
    return f"present_section_{st.session_state.get(_RUN, {}).get('page', '')}"


def section(title: str | None, divider: str = "gray") -> bool:
    """Whether to draw this section (always, unless presenting and it is not the one on view); draws its
    header (``title`` None: the untitled introduction)."""
    run = st.session_state.setdefault(_RUN, {"page": "", "count": 0})
    index = run["count"]
    run["count"] += 1
    if presenting() and index != st.session_state.get(_current_key(), 0):
        return False
    if title:
        st.header(title, divider=divider)
    return True


def _move(key: str, to: int) -> None:
    st.session_state[key] = to


def presenter_nav() -> None:
    """Previous / Next under the section on view (app.py calls it after the page ran)."""
    total = st.session_state.get(_RUN, {}).get("count", 0)
    if not presenting() or total < 2:
        return
    key = _current_key()
    cur = min(st.session_state.get(key, 0), total - 1)
    left, mid, right = st.columns([1, 2, 1])
    left.button("Previous", icon=":material/arrow_back:", disabled=cur == 0, key="present_prev",
                on_click=_move, args=(key, cur - 1), width="stretch")
    mid.markdown(f"<div style='text-align:center'>Section {cur + 1} of {total}</div>", unsafe_allow_html=True)
    right.button("Next", icon=":material/arrow_forward:", disabled=cur + 1 >= total, key="present_next",
                 on_click=_move, args=(key, cur + 1), type="primary", width="stretch")


def chart(fig, kind: str, text: str, key: str | None = None) -> None:
    """A plotly chart followed by its one-line caption (measured / model / derived / illustrative)."""
    if presenting():
        fig.update_layout(font_size=20, title_font_size=24)
    readable(fig, 20 if presenting() else TICK_SIZE)
    st.plotly_chart(fig, width="stretch", key=key, config={"displaylogo": False})
    st.caption(caption(kind, text))


def beside(main: int = 3, side: int = 2):
    """Two columns for a page's first screen: the key chart in ``main``, the lesson boxes (what you see, try
    this) in ``side``, so a 1366x768 projector shows the chart without scrolling. Returns (main, side)."""
    return st.columns([main, side], gap="medium")


def what_you_see(text: str) -> None:
    st.info(text, icon=":material/visibility:")


def try_this(question: str, answer: str, key: str) -> None:
    """A prediction first, then the reveal (presenter view: a button reveals it, so the room answers first)."""
    with st.container(border=True):
        st.markdown(f":material/psychology: **Try this.** {question}")
        if presenting():
            if st.toggle("Reveal the answer", key=f"{key}_reveal"):
                st.markdown(answer)
            return
        with st.expander("Made your prediction? Reveal what happens"):
            st.markdown(answer)


def common_mistake(text: str) -> None:
    """A frequent wrong answer, explained: a neutral teaching note (a red or yellow box reads as a failure of the
    app; errors are for errors)."""
    with st.container(border=True):
        st.markdown(f":material/lightbulb: **A common mistake.** {text}")


def notes(trace) -> None:
    for note in trace.encoded.notes:
        st.warning(note, icon=":material/info:")
