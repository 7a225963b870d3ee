"""Measurements belong to the run that made them; and how a page shows the conditions of a measurement (the
busy warning with its "Measure again" button, when and under what load it was taken, the thread policy).

A measured result is kept with its calibration (when, and under what load, it was taken: engine/measure/noise.py).
A quiet measurement is shared with every session (keyed on plain values, bounded, like st.cache_data); every
one, disturbed or not, is also kept in the session that made it (in ui.frame.kept, the session's one bounded
store of results), so a busy moment is never served to a visitor who comes later. "Measure again" really measures
again: it replaces this session's result, and the shared one when the new measurement is quiet.

Sessions that ask for the same measurement while it is being made share that one measurement, disturbed or not (it
was taken while they asked, with its conditions shown beside it): a class opening one page at once runs its sweep
once, not once per tab, each disturbing the others. When the session measuring stops first (its tab closed), one
of those waiting measures instead.

Not st.cache_data: the measured functions draw progress bars, which st.cache_data cannot replay on a hit
(CacheReplayClosureError), and st.cache_data cannot keep a result from other sessions or drop one entry.
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import streamlit as st

from engine.measure import noise
from engine.store import BoundedStore
from ui.frame import kept, work

MAX_SHARED = 48
_SHARED: BoundedStore[tuple, "Measured"] = BoundedStore("quiet measurements", MAX_SHARED)


@dataclass(frozen=True)
class Measured:
    value: Any
    calibration: noise.Calibration
    run_id: int  # a new number for every measurement made (tests and pages tell a re-measurement apart)


_RUN_IDS = itertools.count(1)  # one C call under the GIL: two sessions measuring at once get two numbers


def lookup(key: tuple) -> Measured | None:
    """This session's own result first (it may be disturbed), else a quiet shared one."""
    mine = kept.get(("measured", key))
    if mine is not None:
        return mine
    return _SHARED.get(key)


class _Flight:
    """A measurement being made: set when it ends, with its result (None when the run making it stopped first)."""

    def __init__(self):
        self.done, self.result = threading.Event(), None


_FLIGHTS: dict[tuple, _Flight] = {}  # key -> the measurement of it being made now, by one session
_FLIGHTS_LOCK = threading.Lock()
# Says what happens without saying whose: a measurement's key may hold a prompt's tokens, and a student is never
# told that someone else asked the same prompt (the class server's rule for kept answers)
JOINED_MESSAGE = "Measuring: one measurement serves every tab that asks for it at once; it shows here when it ends."


def measure(key: tuple, fn: Callable[[], Any], again: bool = False) -> Measured:
    """The result for ``key``: kept, the one being made now for another session, or measured now (always
    measured now when ``again``)."""
    while True:
        if not again:
            known = lookup(key)
            if known is not None:
                return known
        with _FLIGHTS_LOCK:
            flight = _FLIGHTS.get(key)
            mine = flight is None
            if mine:
                flight = _FLIGHTS[key] = _Flight()
        if mine or again:
            break
        slot = st.empty()
        slot.caption(JOINED_MESSAGE)
        work.wait_for_event(flight.done)
        slot.empty()
        if flight.result is not None:
            return kept.put(("measured", key), flight.result)
        # the session measuring stopped before the end: look again, and measure here if nobody else does
    try:
        with calibrated() as cal:
            value = fn()
        m = Measured(value, cal.result, next(_RUN_IDS))
        if mine:
            flight.result = m
    finally:
        if mine:
            with _FLIGHTS_LOCK:
                del _FLIGHTS[key]
            flight.done.set()
    if not m.calibration.disturbed:
        _SHARED.put(key, m)
    return kept.put(("measured", key), m)


def calibrated() -> noise.calibrated:
    """A calibration whose probe runs on the engine worker, the thread the measured work runs on."""
    return noise.calibrated(probe=lambda: work.run(noise.probe_seconds))


def again_pressed(key: str) -> bool:
    """True on the run a "Measure again" button with this key triggered (readable before it is drawn)."""
    return bool(st.session_state.get(key))


def measure_again_bar(calibrations, key: str, what: str = "these results") -> None:
    """Under a measured result: when and under what load it was taken, the busy warning when it was disturbed,
    and a "Measure again" button (its key is read by ``again_pressed`` on the next run)."""
    cals = [c for c in calibrations if c is not None]
    disturbed = [c for c in cals if c.disturbed]
    if disturbed:
        flags = sorted({f for c in disturbed for f in c.flags})
        st.warning(f"**{noise.BUSY_MESSAGE}** " + " ".join(flags) + " Measure again when the machine is quieter "
                   "(close other programs); this result is not shared with other visitors.", icon=":material/speed:")
    c1, c2 = st.columns([1, 4], vertical_alignment="center")
    c1.button("Measure again", key=key, icon=":material/refresh:", help=f"Runs {what} again now.")
    if cals:
        c2.caption("Measured " + "; ".join(dict.fromkeys(c.describe().removeprefix("measured ") for c in cals[:3]))
                   + ("; ..." if len(cals) > 3 else ""))


def busy_warning(calibration: noise.Calibration | None, key: str) -> bool:
    """Warn when the machine was busy during the measurement and offer to measure again. Returns True when
    the button was pressed (the caller re-measures; the button's key can also be read on the next run)."""
    if calibration is None or not calibration.disturbed:
        return False
    with st.container(border=True):
        st.warning(f"**{noise.BUSY_MESSAGE}** " + " ".join(calibration.flags), icon=":material/speed:")
        return st.button("Measure again", key=key, icon=":material/refresh:",
                         help="Runs the measurement again now; close other programs first for steadier numbers.")


def thread_policy_line() -> str:
    """The CPU thread policy in force (engine/measure/threads.py), for a hardware section."""
    from engine.measure.threads import describe_policy

    d = describe_policy()
    return f"{d} - {d.source}"
