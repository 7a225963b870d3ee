"""Page building blocks: header, lesson boxes, and a chart with its caption."""
from __future__ import annotations

import streamlit as st

from ui.figures import caption


def chart(fig, kind: str, text: str, key: str | None = None) -> None:
    """A plotly chart followed by its one-line caption (measured / model / derived / illustrative)."""
    st.plotly_chart(fig, width="stretch", key=key, config={"displaylogo": False})
    st.caption(caption(kind, text))


def what_you_see(text: str) -> None:
    st.info(text, icon=":material/visibility:")


def try_this(question: str, answer: str, key: str) -> None:
    """A prediction first, then the reveal."""
    with st.container(border=True):
        st.markdown(f":material/psychology: **Try this.** {question}")
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
