"""The one module that owns Streamlit's caches: every cached function in ui/ is declared with these two
decorators, so their policy (bounded, no spinner of their own: pages draw their own progress) is set here.

- ``memo(n)``: a value computed from plain arguments (st.cache_data: each caller gets its own copy).
- ``shared(n)``: one object for every session (st.cache_resource: a loaded model, a tokenizer).
"""
from __future__ import annotations

import streamlit as st


def memo(max_entries: int, ttl: float | None = None):
    return st.cache_data(max_entries=max_entries, ttl=ttl, show_spinner=False)


def shared(max_entries: int):
    return st.cache_resource(max_entries=max_entries, show_spinner=False)
