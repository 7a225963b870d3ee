"""The page registry. app.py builds st.navigation from it; pages link to each other through it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from ui.frame.legacy_pages import through_router  # noqa: F401  every page calls nav.through_router() first

ROOT = Path(__file__).resolve().parents[2]
# The tab's icon, served by this server: a material icon as page_icon makes the browser fetch it from Google's font
# host on every page load, and the app is offline by default.
ICON = ROOT / "assets" / "icon.svg"


# URL paths are the file stems: the first runs of a server still go through Streamlit's legacy pages/ router,
# which knows the pages only by file stem (ui/frame/legacy_pages.py, the workaround).


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
    PageSpec("pages/record.py", "A saved run", ":material/file_open:", "record"),
]


# Pages that draw the sidebar's generation (ui.frame.runs.current_trace): in compiled mode its graph is compiled
# before they run (ui.frame.compiling.warm_for_run); the others run eager in both modes or run no model.
SIDEBAR_RUN = frozenset({"loop", "attention", "sampling", "timeline", "kv_cache"})
# Of those, the pages that time the run alone, never in the class batch (current_trace(alone=True)): its prompt's
# prefill bucket is theirs to compile on a class server.
ALONE_RUN = frozenset({"timeline"})


def available() -> list[PageSpec]:
    """Pages whose file exists (a page file that is missing is left out of the navigation, not a broken link)."""
    return [p for p in PAGES if (ROOT / p.path).is_file()]


def link(path: str, label: str | None = None) -> None:
    """A link to another page, if that page exists."""
    spec = next((p for p in available() if p.path == path), None)
    if spec is not None:
        st.page_link(spec.path, label=label or f"Go deeper: {spec.title}", icon=":material/arrow_forward:")
