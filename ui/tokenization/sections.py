"""The tokenization page's "two real tokenizers" section: SmolLM2's 49k BPE vs Gemma 3's 262k vocabulary on the
same texts, the largest disagreements first (the st.* drawing; the counting is engine.tokenization.tokens.contrast)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.frame.layout import chart
from ui.frame.lessons import lesson
from ui.tokenization.runs import contrast_for
from ui.frame.figures import token_label
from ui.tokenization.figures import pair_bar


def rows_table(rows) -> pd.DataFrame:
    return pd.DataFrame([{"Text": r.kind, "Characters": r.a.n_chars, r.a.name: r.a.n_tokens, r.b.name: r.b.n_tokens,
                          "Ratio": f"{r.ratio:.2f}x"} for r in rows])


def pieces(count) -> str:
    return " | ".join(token_label(t) for t in count.texts)


def render(text: str) -> None:
    with st.spinner("Tokenizing with SmolLM2's and Gemma 3's tokenizers..."):
        rows = contrast_for(text)
    if rows is None:
        st.caption(lesson("tokenization", "pair missing"))
        return
    st.markdown(lesson("tokenization", "pair intro"))
    chart(pair_bar(rows), "model", lesson("tokenization", "pair caption"))
    st.dataframe(rows_table(rows), hide_index=True, width="stretch")
    kind = st.selectbox("See the pieces of", [r.kind for r in rows], key="tokenization_pair_pick")
    r = next(r for r in rows if r.kind == kind)
    for c in (r.a, r.b):
        st.markdown(f"**{c.name}**: {c.n_tokens} tokens")
        st.code(pieces(c), language=None, wrap_lines=True)
    st.markdown(lesson("tokenization", "pair note"))
