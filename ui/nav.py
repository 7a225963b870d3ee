"""The page registry. app.py builds st.navigation from it; pages link to each other through it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent


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
    PageSpec("pages/kv_cache.py", "KV cache", ":material/memory:", "kv-cache"),
    PageSpec("pages/speculative.py", "Speculative decoding", ":material/sprint:", "speculative"),
    PageSpec("pages/batching.py", "Batching", ":material/stacks:", "batching"),
]


def available() -> list[PageSpec]:
    """Pages whose file exists (pages land one issue at a time)."""
    return [p for p in PAGES if (ROOT / p.path).is_file()]


def link(path: str, label: str | None = None) -> None:
    """A link to another page, if that page exists."""
    spec = next((p for p in available() if p.path == path), None)
    if spec is not None:
        st.page_link(spec.path, label=label or f"Go deeper: {spec.title}", icon=":material/arrow_forward:")
