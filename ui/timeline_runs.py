"""Cached measurements for the prefill-vs-decode page, keyed on plain values (model name, token ids, sizes)."""
from __future__ import annotations

import threading
import time

import streamlit as st

from engine.experiments import timeline as T
from engine.sampling import SamplingSettings
from ui import work
from ui.models import get_model


@st.cache_data(max_entries=32, show_spinner=False)
def sweep_row_for(model: str, length: int, new_tokens: int, repeats: int) -> T.SweepRow:
    """One prompt length of the sweep (its own warm-up, then the repeats); cached per length."""
    return work.run(T.prompt_length_sweep, get_model(model), (length,), new_tokens, repeats).rows[0]


@st.cache_data(max_entries=12, show_spinner=False)
def cache_comparison_for(model: str, ids: tuple[int, ...], new_tokens: int) -> T.CacheComparison:
    return work.run(T.cache_comparison, get_model(model), list(ids), new_tokens)


@st.cache_data(max_entries=12, show_spinner=False)
def breakdown_for(model: str, ids: tuple[int, ...], repeats: int, temperature: float, top_k: int, top_p: float
                  ) -> T.Breakdown:
    return work.run(T.stage_breakdown, get_model(model), list(ids), repeats, SamplingSettings(temperature, top_k, top_p))


@st.cache_data(max_entries=12, show_spinner=False)
def memory_for(model: str, ids: tuple[int, ...]) -> T.MemoryComparison:
    return work.run(T.training_vs_inference_memory, get_model(model), list(ids))


def sweep(model: str, lengths: tuple[int, ...], new_tokens: int, repeats: int) -> T.Sweep:
    """The sweep, one cached length at a time, with a progress bar (cached lengths return at once)."""
    bar = st.progress(0.0, text="Prompt-length sweep")
    rows = []
    for i, n in enumerate(lengths):
        bar.progress(i / len(lengths), text=f"Prompt-length sweep: {n} prompt tokens ({i + 1} of {len(lengths)})")
        rows.append(sweep_row_for(model, n, new_tokens, repeats))
    bar.empty()
    return T.Sweep(tuple(rows), max(2, new_tokens), max(1, repeats))


def breakdown(model: str, ids: tuple[int, ...], repeats: int, settings: dict) -> T.Breakdown:
    with st.spinner(f"Timing each stage: a prefill and a decode pass, {repeats} repeat(s) with and without hooks..."):
        return breakdown_for(model, ids, repeats, settings["temperature"], settings["top_k"], settings["top_p"])


_PROBE_LOCK = threading.Lock()
_PROBES: dict[str, tuple[float, T.HardwareProbe]] = {}  # device -> (when measured, result), for every session


def shared_probe(device: str, remeasure: bool = False) -> T.HardwareProbe:
    """The machine's bandwidth and matmul throughput, measured once per process and device and shared by every
    session: each measurement allocates about 512 MiB, so 16 tabs opening the page at once must not run 16.
    One runs at a time; a re-measure asked for while another was running takes that one's fresh result."""
    asked = time.monotonic()
    with _PROBE_LOCK:
        done = _PROBES.get(device)
        if done is None or (remeasure and done[0] < asked):
            done = (time.monotonic(), work.run(T.hardware_probe, device))  # on the engine worker
            _PROBES[device] = done
        return done[1]


def hardware_probe(device: str, remeasure: bool = False) -> T.HardwareProbe:
    """This session's copy of the shared measurement (the button measures again, for everyone)."""
    key = f"timeline_probe_{device}"
    if remeasure or key not in st.session_state:
        with st.spinner("Measuring memory bandwidth and matmul throughput..."):
            st.session_state[key] = shared_probe(device, remeasure)
    return st.session_state[key]


def on_demand(name: str, label: str, help_text: str | None = None) -> bool:
    """A button that switches a measurement on for the rest of the session (its result is then cached)."""
    key = f"timeline_on_{name}"
    if st.button(label, key=f"timeline_btn_{name}", help=help_text, type="primary"):
        st.session_state[key] = True
    return bool(st.session_state.get(key))
