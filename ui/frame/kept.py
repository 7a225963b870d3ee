"""Run on a button and keep the result: the one place a page keeps what a person asked to be run.

Results live in this session only, in one bounded store (the least recently used goes first), keyed by the
page's own key and the inputs that produced them, so a changed input shows "not run yet" instead of a stale
result and a return to earlier inputs shows their result again without running anything. Every page keeps its
results here (the speculative page's races and sweeps, the serving page's measurements, ...), each under keys
that start with its own name, so ``items(name)`` lists one page's results.
"""
from __future__ import annotations

from typing import Any, Hashable

import streamlit as st

from engine.store import BoundedStore

MAX_KEPT = 32  # results per session, all pages together
_STORE = "kept_results"


def _store() -> BoundedStore:
    store = st.session_state.get(_STORE)
    if not isinstance(store, BoundedStore):
        store = st.session_state[_STORE] = BoundedStore("kept results", MAX_KEPT)
    return store


def get(key: Hashable) -> Any | None:
    """The kept result for ``key`` (None when it was never run, or was dropped as the oldest)."""
    return _store().get(key)


def put(key: Hashable, value: Any) -> Any:
    return _store().put(key, value)


def items(name: str) -> list[tuple[tuple, Any]]:
    """The kept (key without ``name``, result) pairs whose key is a tuple starting with ``name``, oldest first."""
    return [(k[1:], v) for k, v in _store().items() if isinstance(k, tuple) and k[:1] == (name,)]


def forget(key: Hashable) -> None:
    _store().pop(key)

