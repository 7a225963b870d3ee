"""A workaround of Streamlit internals (one of three; the others are ui/frame/server_metrics.py and
ui/frame/uploads.py): a pages/ folder beside app.py with st.navigation.

A pages/ folder beside the main script puts Streamlit in its legacy multipage mode (``PagesManager.
uses_pages_directory``, decided when a server's first session opens): every run is wrapped in a navigation of its
own built from the file names, which answers deep links with "Page not found" and can run a page file without
app.py (so without the shared sidebar). The pages are listed explicitly in app.py, so app.py switches that mode
off (``legacy_mode_off``). The first run of the server's first session has already gone through the legacy
router, which finds a page by its file stem: that page hands over to app.py (``through_router``).

tests/ui/test_legacy_pages.py fails the day Streamlit no longer enters that mode: then this module can go.
"""
from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def legacy_mode_off() -> None:
    """Switch Streamlit's legacy pages/ mode off for this server process (app.py, every run)."""
    PagesManager.uses_pages_directory = False


def _inside_app() -> bool:
    """Is app.py on this thread's call stack (so this page runs under its st.navigation)? Decided per run, from
    the stack, not from Streamlit's process-wide legacy flag: when several sessions start at once after a server
    start, each of their first runs may already be in the legacy router when the first of them turns the flag
    off, and must still hand over to app.py."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name == APP or (name.endswith("app.py") and os.path.realpath(name) == APP):
            return True
        frame = frame.f_back
    return False


def through_router() -> None:
    """Call first in every page file. If Streamlit's legacy router ran this file directly (the first runs of a
    server's first sessions), run app.py instead, which draws the sidebar and runs this page again through
    st.navigation, then end this run."""
    if not _inside_app():
        legacy_mode_off()
        runpy.run_path(APP, run_name="__main__")
        st.stop()
