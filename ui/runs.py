"""Cached runs of the model, keyed on plain values so nothing recomputes when its inputs did not change."""
from __future__ import annotations

import streamlit as st

from engine.prompt import PromptError
from engine.sampling import SamplingSettings
from engine.classbatch import batched_trace, group
from engine.trace import Trace, run_trace
from ui import state, work
from ui.models import current_model, get_model
from ui.cache import memo


@memo(24)
def trace_for(model: str, prompt: str, chat: bool, max_new_tokens: int, temperature: float, top_k: int,
              top_p: float, seed: int) -> Trace:
    lm = get_model(model)
    # A generation request: the engine worker serves it together with other sessions' requests for this model
    # (engine/classbatch.py); its Trace says when its steps were measured in a batch.
    return work.run(batched_trace, lm, prompt, SamplingSettings(temperature, top_k, top_p), max_new_tokens, seed,
                    chat, batch=group(lm))


@memo(8)
def solo_trace_for(model: str, prompt: str, chat: bool, max_new_tokens: int, temperature: float, top_k: int,
                   top_p: float, seed: int) -> Trace:
    """The same run, alone on the engine worker (no batch): for pages whose lesson is its step times."""
    lm = get_model(model)
    return work.run(run_trace, lm, prompt, SamplingSettings(temperature, top_k, top_p), max_new_tokens, seed, chat)


def current_trace(alone: bool = False) -> Trace:
    """The trace for the sidebar's settings. An unusable prompt shows a message and stops the page.

    ``alone``: a page that teaches from its step times (prefill vs decode) needs them measured alone; when the
    answer was served in a batch with other sessions' requests, that page's run is repeated alone (same tokens)."""
    lm = current_model()
    s = state.settings()
    args = (lm.name, s.prompt, s.chat, s.max_new_tokens, s.temperature, s.top_k, s.top_p, s.seed)
    try:
        with st.spinner("Running the model on your prompt..."):
            tr = trace_for(*args)
        if alone and tr.batched:
            with st.spinner("Your answer was served in a batch with other people's; timing it alone..."):
                tr = solo_trace_for(*args)
        return tr
    except PromptError as exc:
        st.warning(str(exc), icon=":material/edit_note:")
        st.stop()


@memo(16)
def block_walk_for(model: str, ids: tuple[int, ...], layer: int):
    from engine.stages.inspect import block_walk

    return work.run(block_walk, get_model(model), list(ids), layer)


@memo(64)
def last_position_for(model: str, ids: tuple[int, ...]):
    """Embedding row, final hidden state and top logits at the last of ``ids`` (one untimed pass, cached)."""
    from engine.stages.glance import last_position

    return work.run(last_position, get_model(model), list(ids))
