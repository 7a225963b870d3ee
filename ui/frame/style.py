"""Page-wide CSS: readable captions everywhere, less empty space above the title (a page's key chart must fit
the first 768 px of a projector), and the presenter view's larger type and its section bar kept in view under
Streamlit's header bar while a tall section scrolls (ui/frame/layout.py) (a metric's value keeps its own size: the
larger paragraph rule would otherwise reach the paragraph inside it and print "390 ms" smaller than its label)."""
from __future__ import annotations

import streamlit as st

# Streamlit's captions are 14 px light grey; on a projector they need contrast and size.
BASE = """
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p { font-size: 15px !important;
  color: #334155 !important; }
[data-testid="stMetricLabel"] p { white-space: normal !important; overflow: visible !important; }
[data-testid="stMetricLabel"] > div { overflow: visible !important; }
[data-testid="stMainBlockContainer"] { padding-top: 2.5rem; }
"""
PRESENTER = """
html { font-size: 20px; }
[data-testid="stMain"] p, [data-testid="stMain"] li { font-size: 1.15rem; line-height: 1.5; }
[data-testid="stMain"] h1 { font-size: 2.6rem; }
[data-testid="stMain"] h2 { font-size: 2.0rem; }
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p { font-size: 18px !important; }
[data-testid="stMetricValue"] { font-size: 2.6rem; }
[data-testid="stMain"] [data-testid="stMetricValue"] p, [data-testid="stMain"] [data-testid="stMetricValue"] div {
  font-size: inherit; line-height: 1.15; }
[data-testid="stMainBlockContainer"] { padding-top: 4.5rem; }
[data-testid="stLayoutWrapper"]:has(> .st-key-present_bar) { position: sticky; top: var(--ile-header, 3.75rem);
  z-index: 100; background: white; padding: 0.3rem 0; border-bottom: 1px solid #e2e8f0; }
"""


def inject(presenter: bool) -> None:
    css = BASE + (PRESENTER if presenter else "")
    st.html(f"<style>{css}</style>")
