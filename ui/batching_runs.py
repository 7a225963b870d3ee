"""Cached runs for the batching page, keyed on plain values; the page runs them on demand with progress bars."""
from __future__ import annotations

import streamlit as st

from engine import batching as B
from ui.models import get_model


def _bar(label: str):
    bar = st.progress(0.0, text=label)
    return bar, lambda frac, msg: bar.progress(min(max(float(frac), 0.0), 1.0), text=f"{label}: {msg}")


@st.cache_data(max_entries=16, show_spinner=False)
def workload_for(model: str, ws: B.WorkloadSettings) -> tuple[B.Request, ...]:
    return B.make_workload(get_model(model).tokenizer, ws)


@st.cache_data(max_entries=8, show_spinner=False)
def sweep_for(model: str, sizes: tuple[int, ...], steps: int, warmup: int, _progress=None):
    return B.decode_sweep(get_model(model), sizes, steps=steps, warmup=warmup, progress=_progress)


@st.cache_data(max_entries=8, show_spinner=False)
def serve_for(model: str, ws: B.WorkloadSettings, policy: str, max_batch: int, timeout: float, _progress=None):
    lm = get_model(model)
    return B.serve(lm, B.make_workload(lm.tokenizer, ws), policy, max_batch, timeout, progress=_progress)


@st.cache_data(max_entries=8, show_spinner=False)
def load_for(model: str, ws: B.WorkloadSettings, rates: tuple[float, ...], probe_tokens: int, max_batch: int,
             _progress=None):
    return B.load_sweep(get_model(model), ws, rates, probe_tokens, max_batch=max_batch, progress=_progress)


def _with_bar(label: str, fn, *args):
    bar, cb = _bar(label)
    try:
        return fn(*args, _progress=cb)
    finally:
        bar.empty()


def sweep(model, sizes, steps, warmup):
    return _with_bar("Batched decode steps", sweep_for, model, tuple(sizes), steps, warmup)


def serve(model, ws, policy, max_batch, timeout):
    return _with_bar(f"Serving with {policy} batching", serve_for, model, ws, policy, max_batch, timeout)


def load(model, ws, rates, probe_tokens, max_batch):
    return _with_bar("Your request on a quiet and a busy server", load_for, model, ws, tuple(rates), probe_tokens,
                     max_batch)


def has_run(key: tuple) -> bool:
    return key in st.session_state.setdefault("batching_ran", set())


def mark_run(key: tuple) -> None:
    st.session_state.setdefault("batching_ran", set()).add(key)
