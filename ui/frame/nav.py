"""The page registry. app.py builds st.navigation from it; pages link to each other through it."""
from __future__ import annotations

from dataclasses import dataclass
import os
import runpy
import sys
from pathlib import Path

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

ROOT = Path(__file__).resolve().parents[2]


# URL paths are the file stems. With a pages/ folder beside app.py, Streamlit starts each server process in its
# legacy multipage mode, which app.py switches off on its first run. The first run of the server's first
# session still goes through the legacy router, which knows the pages only by file stem: a deep link there
# (a tab reconnecting after a restart, a shared link opened first) finds the page file and runs it alone, and
# the page hands over to app.py (``through_router``). Any other URL path would answer "Page not found".


@dataclass(frozen=True)
class PageSpec:
    path: str
    title: str
    icon: str
    url: str


PAGES = [
    PageSpec("pages/loop.py", "The loop", ":material/all_inclusive:", "loop"),
    PageSpec("pages/tokenization.py", "Tokenization", ":material/text_fields:", "tokenization"),
    PageSpec("pages/embeddings.py", "Embeddings & position", ":material/scatter_plot:", "embeddings"),
    PageSpec("pages/attention.py", "Attention", ":material/grid_on:", "attention"),
    PageSpec("pages/sampling.py", "Logits & sampling", ":material/casino:", "sampling"),
    PageSpec("pages/timeline.py", "Prefill vs decode", ":material/timeline:", "timeline"),
    PageSpec("pages/kv_cache.py", "KV cache", ":material/memory:", "kv_cache"),
    PageSpec("pages/speculative.py", "Speculative decoding", ":material/sprint:", "speculative"),
    PageSpec("pages/batching.py", "Batching", ":material/stacks:", "batching"),
    PageSpec("pages/serving.py", "Serving engines", ":material/dns:", "serving"),
    PageSpec("pages/compare.py", "Two models side by side", ":material/compare_arrows:", "compare"),
]


APP = str(ROOT / "app.py")


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
        PagesManager.uses_pages_directory = False
        runpy.run_path(APP, run_name="__main__")
        st.stop()


def available() -> list[PageSpec]:
    """Pages whose file exists (pages land one issue at a time)."""
    return [p for p in PAGES if (ROOT / p.path).is_file()]


def link(path: str, label: str | None = None) -> None:
    """A link to another page, if that page exists."""
    spec = next((p for p in available() if p.path == path), None)
    if spec is not None:
        st.page_link(spec.path, label=label or f"Go deeper: {spec.title}", icon=":material/arrow_forward:")
