"""Cached runs for the batching page, keyed on plain values; the page runs them on demand with progress bars."""
from __future__ import annotations

import streamlit as st

from engine.measure import noise
from engine.batching import EAGER_BECAUSE, experiment as B
from engine.batching.workload import Request, WorkloadSettings, make_workload
from engine.core.loaded import ModelRef
from ui.frame import kept, measured, work
from ui.frame.measured import Measured
from ui.frame.models import current_model, eager_model, get_model
from ui.frame.cache import memo
from ui.frame.lessons import lesson


def _bar(label: str):
    bar = st.progress(0.0, text=label)
    return bar, lambda frac, msg: bar.progress(min(max(float(frac), 0.0), 1.0), text=f"{label}: {msg}")


def page_model():
    """The model this page measures on: the sidebar's, eager (its batched decode steps change size and padding every
    round, so compiled mode says so in one line and runs eager: ``engine.batching.EAGER_BECAUSE``)."""
    return eager_model(current_model(), EAGER_BECAUSE)


@memo(16)
def workload_for(ref: ModelRef, ws: WorkloadSettings) -> tuple[Request, ...]:
    return make_workload(get_model(ref).tokenizer, ws)


# The measured runs draw a progress bar created outside them, which st.cache_data cannot replay on a hit
# (CacheReplayClosureError); ui.frame.measured keeps them instead: shared with every session when measured quietly,
# kept to the measuring session when the machine was busy, and measured again on "Measure again".
AGAIN = "batching_again"


def _cached(key: tuple, label: str, fn) -> Measured:
    def run():
        bar, cb = _bar(label)
        try:  # the run happens on the engine worker; its progress events are drawn here, on the script thread
            return work.run(fn, work.relay("progress"), key=key, events={"progress": cb})
        finally:
            bar.empty()

    return measured.measure(key, run, again=measured.again_pressed(AGAIN))


def sweep(ref: ModelRef, sizes, steps: int, warmup: int) -> Measured:
    return _cached(("sweep", ref, tuple(sizes), steps, warmup), "Batched decode steps",
                   lambda cb, lm=get_model(ref): B.decode_sweep(lm, tuple(sizes), steps=steps, warmup=warmup, progress=cb))


def serve(ref: ModelRef, ws: WorkloadSettings, policy: str, max_batch: int, timeout: float) -> Measured:
    lm = get_model(ref)

    def run(cb):
        return B.serve(lm, make_workload(lm.tokenizer, ws), policy, max_batch, timeout, progress=cb)

    return _cached(("serve", ref, ws, policy, max_batch, timeout), f"Serving with {policy} batching", run)


def load(ref: ModelRef, ws: WorkloadSettings, rates, probe_tokens: int, max_batch: int) -> Measured:
    return _cached(("load", ref, ws, tuple(rates), probe_tokens, max_batch),
                   "Your request on a quiet and a busy server",
                   lambda cb, lm=get_model(ref): B.load_sweep(lm, ws, tuple(rates), probe_tokens, max_batch=max_batch,
                                           progress=cb))


def sweep_flags(points) -> tuple[str, ...]:
    """A bigger batch measured faster per step than a smaller one, or giving fewer tokens per second
    (engine/noise)."""
    steps = [(p.batch, noise.summarize(p.step_seconds)) for p in points]
    return noise.check_batch_steps(steps).flags + noise.check_batch_throughput(steps).flags


def load_flags(points) -> tuple[str, ...]:
    """A busier server answered the same request faster (engine/noise)."""
    return noise.check_busier_slower([(p.rate_per_s, p.probe.latency_s) for p in points]).flags


def has_run(key: tuple) -> bool:
    """Was the page's button pressed for these settings? Kept with the session's results (ui.frame.kept), under
    their bound: a mark dropped as the oldest shows the button again (its measurements, where still kept, come back
    at once)."""
    return kept.get(("batching ran", key)) is not None


def mark_run(key: tuple) -> None:
    kept.put(("batching ran", key), True)


def sweep_lesson_note(points) -> str | None:
    """The 'Try this' answer says a batch of 8 costs much less than 8 single steps; when this run's chart says
    otherwise, say so and why (None when the run agrees)."""
    one = next((p for p in points if p.batch == 1), None)
    big = max(points, key=lambda p: p.batch)
    if one is None or big.batch == 1:
        return None
    ratio = big.median_s / one.median_s
    if ratio < 0.75 * big.batch:
        return None
    return lesson("batching", "sweep differs", batch=big.batch, ratio=ratio)

