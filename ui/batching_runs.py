"""Cached runs for the batching page, keyed on plain values; the page runs them on demand with progress bars."""
from __future__ import annotations

import threading
from collections import OrderedDict

import streamlit as st

from engine.experiments import batching as B
from ui import work
from ui.models import get_model


def _bar(label: str):
    bar = st.progress(0.0, text=label)
    return bar, lambda frac, msg: bar.progress(min(max(float(frac), 0.0), 1.0), text=f"{label}: {msg}")


@st.cache_data(max_entries=16, show_spinner=False)
def workload_for(model: str, ws: B.WorkloadSettings) -> tuple[B.Request, ...]:
    return B.make_workload(get_model(model).tokenizer, ws)


# The measured runs take a progress callback that draws a bar created outside them. st.cache_data records
# such element calls and cannot replay them on a cache hit (CacheReplayClosureError), so these runs use a
# small process-wide store instead: bounded, keyed on plain values, shared by every session like st.cache_data.
_STORE: OrderedDict = OrderedDict()
_LOCK = threading.Lock()
MAX_ENTRIES = 24


def _cached(key: tuple, label: str, fn):
    with _LOCK:
        if key in _STORE:
            _STORE.move_to_end(key)
            return _STORE[key]
    bar, cb = _bar(label)
    try:  # the run happens on the engine worker; its progress events are drawn here, on the script thread
        value = work.run(fn, work.relay("progress"), key=key, events={"progress": cb})
    finally:
        bar.empty()
    with _LOCK:
        _STORE[key] = value
        while len(_STORE) > MAX_ENTRIES:
            _STORE.popitem(last=False)
    return value


def sweep(model: str, sizes, steps: int, warmup: int):
    return _cached(("sweep", model, tuple(sizes), steps, warmup), "Batched decode steps",
                   lambda cb, lm=get_model(model): B.decode_sweep(lm, tuple(sizes), steps=steps, warmup=warmup, progress=cb))


def serve(model: str, ws: B.WorkloadSettings, policy: str, max_batch: int, timeout: float):
    lm = get_model(model)

    def run(cb):
        return B.serve(lm, B.make_workload(lm.tokenizer, ws), policy, max_batch, timeout, progress=cb)

    return _cached(("serve", model, ws, policy, max_batch, timeout), f"Serving with {policy} batching", run)


def load(model: str, ws: B.WorkloadSettings, rates, probe_tokens: int, max_batch: int):
    return _cached(("load", model, ws, tuple(rates), probe_tokens, max_batch),
                   "Your request on a quiet and a busy server",
                   lambda cb, lm=get_model(model): B.load_sweep(lm, ws, tuple(rates), probe_tokens, max_batch=max_batch,
                                           progress=cb))


def has_run(key: tuple) -> bool:
    return key in st.session_state.setdefault("batching_ran", set())


def mark_run(key: tuple) -> None:
    st.session_state.setdefault("batching_ran", set()).add(key)
