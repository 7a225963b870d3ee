"""The page registry. app.py builds st.navigation from it; pages link to each other through it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent


# URL paths must differ from the file names: with a pages/ folder beside app.py, Streamlit also registers
# each file under its stem (legacy multipage mode) and a rerun that asks for that path runs the page file
# alone, without app.py and its shared sidebar.


@dataclass(frozen=True)
class PageSpec:
    path: str
    title: str
    icon: str
    url: str


PAGES = [
    PageSpec("pages/loop.py", "The loop", ":material/all_inclusive:", "home"),
    PageSpec("pages/tokenization.py", "Tokenization", ":material/text_fields:", "tokenization-view"),
    PageSpec("pages/embeddings.py", "Embeddings & position", ":material/scatter_plot:", "embeddings-and-position"),
    PageSpec("pages/attention.py", "Attention", ":material/grid_on:", "attention-map"),
    PageSpec("pages/sampling.py", "Logits & sampling", ":material/casino:", "logits-and-sampling"),
    PageSpec("pages/timeline.py", "Prefill vs decode", ":material/timeline:", "timeline-prefill-decode"),
    PageSpec("pages/kv_cache.py", "KV cache", ":material/memory:", "kv-cache-memory"),
    PageSpec("pages/speculative.py", "Speculative decoding", ":material/sprint:", "speculative-race"),
    PageSpec("pages/batching.py", "Batching", ":material/stacks:", "batching-and-serving"),
]


def available() -> list[PageSpec]:
    """Pages whose file exists (pages land one issue at a time)."""
    return [p for p in PAGES if (ROOT / p.path).is_file()]


def link(path: str, label: str | None = None) -> None:
    """A link to another page, if that page exists."""
    spec = next((p for p in available() if p.path == path), None)
    if spec is not None:
        st.page_link(spec.path, label=label or f"Go deeper: {spec.title}", icon=":material/arrow_forward:")
