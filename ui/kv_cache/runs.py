"""Cached work for the KV-cache page, keyed on plain values (never a model object)."""
from __future__ import annotations

import streamlit as st

from engine.kv_cache.snapshot import CacheSnapshot, cache_snapshot
from engine.core.loaded import ModelRef
from ui.frame import work
from ui.frame.models import get_model
from ui.frame.cache import memo


@memo(3)
def snapshot_for(ref: ModelRef, prompt_ids: tuple[int, ...], generated_ids: tuple[int, ...]) -> CacheSnapshot:
    """The real cache at the end of a run (prefill + decode replayed with the run's own tokens)."""
    return work.run(cache_snapshot, get_model(ref), list(prompt_ids), list(generated_ids))
