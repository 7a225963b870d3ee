"""How a page shows the conditions of a measurement: the busy warning with its "Measure again" button, and
the line that says when and under what load a number was measured."""
from __future__ import annotations

import streamlit as st

from engine import noise


def busy_warning(calibration: noise.Calibration | None, key: str) -> bool:
    """Warn when the machine was busy during the measurement and offer to measure again. Returns True when
    the button was pressed (the caller re-measures; the button's key can also be read on the next run)."""
    if calibration is None or not calibration.disturbed:
        return False
    with st.container(border=True):
        st.warning(f"**{noise.BUSY_MESSAGE}** " + " ".join(calibration.flags), icon=":material/speed:")
        return st.button("Measure again", key=key, icon=":material/refresh:",
                         help="Runs the measurement again now; close other programs first for steadier numbers.")


def measured_when(calibration: noise.Calibration | None) -> str:
    return calibration.describe() if calibration is not None else "measured earlier in this server"


def thread_policy_line() -> str:
    """The CPU thread policy in force (engine/threads.py), for a hardware section."""
    from engine.threads import describe_policy

    d = describe_policy()
    return f"{d} - {d.source}"
