"""Measurements for the prefill-vs-decode page, keyed on plain values (the model's ModelRef, token ids, sizes). Timed
results live in ui.frame.measured: each carries its calibration, a disturbed one is not shared, and "Measure again"
(key ``timeline_again_<name>``) measures again."""
from __future__ import annotations

import threading
import time

import streamlit as st

from engine.timeline import experiment as T

from engine.timeline import memory as M

from engine.timeline import roofline as R
from engine.core.sampling import SamplingSettings
from engine.store import BoundedStore
from engine.core.loaded import ModelRef
from ui.frame import measured, work
from ui.frame.compiling import wait_for_graphs
from ui.frame.measured import Measured
from ui.frame.models import get_model
from ui.frame.cache import memo


def again_key(name: str) -> str:
    return f"timeline_again_{name}"


def sweep_row_for(ref: ModelRef, length: int, new_tokens: int, repeats: int, reserve: int = 0) -> Measured:
    """One prompt length of the sweep (its own warm-up, then the repeats); kept per length. Its value is None when
    the device ran out of memory for that length."""
    return measured.measure(("timeline_sweep", ref, length, new_tokens, repeats, reserve),
                            lambda: work.run(T.sweep_length, get_model(ref), length, new_tokens, repeats, reserve),
                            again=measured.again_pressed(again_key("sweep")))


def compiled_graphs(ref: ModelRef, lengths, new_tokens: int, reserve: int = 0) -> None:
    """Compiled mode, before sweep lengths are measured: their graphs (its decode step, each length's prefill
    bucket) compile on the background compiler and this page waits for them, never the engine's worker; a length
    whose graph is not ready (cancelled, failed) runs eager and its row says so."""
    lm = get_model(ref)
    steps = T.sweep_graphs(lm, lengths, new_tokens, reserve)
    if steps:
        wait_for_graphs(lm, steps, "the sweep")


def warm(ref: ModelRef, tokens: int) -> None:
    """Compiled mode: its decode graph for a run of ``tokens`` compiled now (nothing when eager or ready)."""
    from engine.core.loop import warm_up

    work.run(warm_up, get_model(ref), int(tokens))


def kernels_for(ref: ModelRef, ids: tuple[int, ...]) -> Measured:
    """One prefill and one decode step traced with torch.profiler (engine.timeline.profile), kept per model (the
    reference names its engine mode) and prompt."""
    from engine.timeline.profile import profile_steps

    return measured.measure(("timeline_kernels", ref, ids),
                            lambda: work.run(profile_steps, get_model(ref), list(ids)),
                            again=measured.again_pressed(again_key("kernels")))


def kept_floor_check(ref: ModelRef, ids: tuple[int, ...]):
    """The floor check of this model and prompt if one was measured (``floor_check_for``), else None."""
    known = measured.lookup(("timeline_floor", ref, ids))
    return known.value if known is not None else None


def floor_check_for(ref: ModelRef, ids: tuple[int, ...]) -> Measured:
    """A decode step of this prompt and the bandwidth probe, alternating (engine.timeline.experiment.floor_beside_step),
    kept per model and prompt."""
    with st.spinner("Measuring the decode step and the memory bandwidth, alternately..."):
        return measured.measure(("timeline_floor", ref, ids),
                                lambda: work.run(R.floor_beside_step, get_model(ref), list(ids)),
                                again=measured.again_pressed(again_key("floor")))


def cache_comparison_for(ref: ModelRef, ids: tuple[int, ...], new_tokens: int) -> Measured:
    return measured.measure(("timeline_cache", ref, ids, new_tokens),
                            lambda: work.run(T.cache_comparison, get_model(ref), list(ids), new_tokens),
                            again=measured.again_pressed(again_key("cache")))


def breakdown_for(ref: ModelRef, ids: tuple[int, ...], repeats: int, sampling: SamplingSettings) -> Measured:
    return measured.measure(("timeline_breakdown", ref, ids, repeats, sampling),
                            lambda: T.stage_breakdown(get_model(ref), list(ids), repeats, sampling),
                            again=measured.again_pressed(again_key("breakdown")))


@memo(12)
def memory_for(ref: ModelRef, ids: tuple[int, ...]) -> M.MemoryComparison:
    return work.run(M.training_vs_inference_memory, get_model(ref), list(ids))


def sweep(ref: ModelRef, lengths: tuple[int, ...], new_tokens: int, repeats: int) -> tuple[T.Sweep, list, dict]:
    """The sweep, one kept length at a time, with a progress bar (kept lengths return at once); also the
    calibrations of the rows (when and under what load each was measured), and how it was extended: where prefill
    has not climbed yet (a fast device), the longest prompt is doubled until it does, up to the model's positions
    or the device's memory ({"extended": lengths added, "memory_short_at": a length that did not fit})."""
    new_tokens, repeats = max(2, new_tokens), max(1, repeats)
    reserve = T.sweep_reserve(get_model(ref), lengths, new_tokens)  # compiled mode: one static cache, one graph
    compiled_graphs(ref, lengths, new_tokens, reserve)
    bar = st.progress(0.0, text="Prompt-length sweep")
    got, extended, short = [], [], None
    for i, n in enumerate(lengths):
        bar.progress(i / len(lengths), text=f"Prompt-length sweep: {n} prompt tokens ({i + 1} of {len(lengths)})")
        got.append(sweep_row_for(ref, n, new_tokens, repeats, reserve))
    rows = [m.value for m in got if m.value is not None]
    max_positions = get_model(ref).info.max_positions
    while rows and not T.climbed(rows):
        n = T.next_length(rows, max_positions, new_tokens)
        if n is None:
            break
        compiled_graphs(ref, (n,), new_tokens)
        bar.progress(0.99, text=f"Prefill has not climbed yet on this device: extending the sweep to {n:,} tokens")
        m = sweep_row_for(ref, n, new_tokens, repeats)
        if m.value is None:
            short = n
            break
        got.append(m)
        rows.append(m.value)
        extended.append(n)
    bar.empty()
    return (T.Sweep(tuple(rows), new_tokens, repeats), [m.calibration for m in got],
            {"extended": extended, "memory_short_at": short})


def breakdown(ref: ModelRef, ids: tuple[int, ...], repeats: int, settings) -> Measured:
    """``settings``: the sidebar's (ui.frame.state.Settings); the breakdown samples with its sampling settings."""
    with st.spinner(f"Timing each stage: a prefill and a decode pass, {repeats} repeat(s) with and without hooks..."):
        return breakdown_for(ref, ids, repeats, settings.sampling)


_PROBE_LOCK = threading.Lock()
# (device, matmul dtype) -> (when measured, result), for every session; a machine has a few devices and a model a
# few dtypes, a bound keeps it so
_PROBES: BoundedStore[tuple[str, str], tuple[float, R.HardwareProbe]] = BoundedStore("hardware probes", 8)


def shared_probe(device: str, remeasure: bool = False, matmul_dtype: str = "float32") -> R.HardwareProbe:
    """The machine's bandwidth and matmul throughput (the matmul in ``matmul_dtype``, the model's: the ridge of a
    bfloat16 model is a bfloat16 matmul's), measured once per process, device and dtype and shared by every
    session: each measurement allocates about 512 MiB, so 16 tabs opening the page at once must not run 16.
    One runs at a time; a re-measure asked for while another was running takes that one's fresh result."""
    asked = time.monotonic()
    key = (device, matmul_dtype)
    with _PROBE_LOCK:
        done = _PROBES.get(key)
        if done is None or (remeasure and done[0] < asked):
            done = (time.monotonic(), work.run(R.hardware_probe, device, matmul_dtype=matmul_dtype))  # engine worker
            _PROBES.put(key, done)
        return done[1]


def hardware_probe(device: str, remeasure: bool = False, matmul_dtype: str = "float32") -> R.HardwareProbe:
    """This session's copy of the shared measurement (the button measures again, for everyone)."""
    key = f"timeline_probe_{device}_{matmul_dtype}"
    if remeasure or key not in st.session_state:
        with st.spinner("Measuring memory bandwidth and matmul throughput..."):
            st.session_state[key] = shared_probe(device, remeasure, matmul_dtype)
    return st.session_state[key]


def on_demand(name: str, label: str, help_text: str | None = None) -> bool:
    """A button that switches a measurement on for the rest of the session (its result is then cached)."""
    key = f"timeline_on_{name}"
    if st.button(label, key=f"timeline_btn_{name}", help=help_text, type="primary"):
        st.session_state[key] = True
    return bool(st.session_state.get(key))
