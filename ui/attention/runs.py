"""Cached work and stateful widgets for the attention page, keyed on plain values (never a model object)."""
from __future__ import annotations

from typing import Sequence

import streamlit as st

from engine.attention.analysis import CostPoint, measure_forward
from engine.attention.lens import LensGrid, lens_from_residual, logit_lens
from engine.core.trace import MAX_LENS_POSITIONS
from engine.core.loaded import ModelRef
from ui.frame import state, work
from ui.frame.figures import TICK_SIZE, caption, readable
from ui.frame.models import get_model
from ui.frame.cache import memo

LAYER_KEY, HEAD_KEY = "attention_layer", "attention_head"
OVERVIEW_KEY = "attention_overview"


@memo(8)
def lens_for(ref: ModelRef, ids: tuple[int, ...], max_positions: int = MAX_LENS_POSITIONS) -> LensGrid:
    return work.run(logit_lens, get_model(ref), list(ids), max_positions)


@memo(8)
def _lens_read(ref: ModelRef, ids: tuple[int, ...], _resid) -> LensGrid:
    return work.run(lens_from_residual, get_model(ref), list(ids), _resid)


def lens_of(lm, trace) -> LensGrid:
    """The logit lens read from the residual stream the trace's one analysis pass recorded (no second pass)."""
    a = trace.analysis
    if a is None or a.lens_resid is None:
        return lens_for(lm.ref, tuple(trace.prompt_ids), MAX_LENS_POSITIONS)
    return _lens_read(lm.ref, tuple(trace.prompt_ids), a.lens_resid)


@memo(64)
def cost_point(ref: ModelRef, tokens: int, repeats: int) -> CostPoint:
    return work.run(measure_forward, get_model(ref), tokens, repeats)


def cost_sweep(ref: ModelRef, lengths: Sequence[int], repeats: int) -> list[CostPoint]:
    """One cached measurement per length, with a progress bar while any is being measured."""
    lengths = sorted(set(int(n) for n in lengths))
    bar = st.progress(0.0, text="Measuring prefill time at each prompt length...")
    out = []
    for i, n in enumerate(lengths):
        bar.progress(i / len(lengths), text=f"Measuring {n} tokens (1 warm-up pass + {repeats} timed passes)...")
        out.append(cost_point(ref, n, repeats))
    bar.empty()
    return out


def clamp_selection(n_layers: int, n_heads: int) -> tuple[int, int]:
    """The selected (layer, head), kept inside this model's range (the model can change under it)."""
    if LAYER_KEY not in st.session_state:  # first visit: a shared link may name the head to open
        st.session_state[LAYER_KEY] = state.page_param("layer", n_layers - 1, 0, n_layers - 1)
        st.session_state[HEAD_KEY] = state.page_param("head", 0, 0, n_heads - 1)
    layer = min(max(int(st.session_state.get(LAYER_KEY, n_layers - 1) or 0), 0), n_layers - 1)
    head = min(max(int(st.session_state.get(HEAD_KEY, 0) or 0), 0), n_heads - 1)
    st.session_state[LAYER_KEY], st.session_state[HEAD_KEY] = layer, head
    return layer, head


def _on_overview_select() -> None:
    """A click on an overview cell selects that layer and head (the selectboxes follow)."""
    event = st.session_state.get(OVERVIEW_KEY)
    points = (event or {}).get("selection", {}).get("points", []) if isinstance(event, dict) else \
        getattr(getattr(event, "selection", None), "points", []) or []
    for p in points:  # the clickable markers sit at x = head, y = layer
        x, y = p.get("x"), p.get("y")
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            st.session_state[LAYER_KEY], st.session_state[HEAD_KEY] = int(round(y)), int(round(x))
            return


def overview_chart(fig, kind: str, text: str) -> None:
    """The layers x heads overview, clickable."""
    readable(fig, 20 if state.settings().present else TICK_SIZE)
    st.plotly_chart(fig, width="stretch", key=OVERVIEW_KEY, on_select=_on_overview_select,
                    selection_mode="points", config={"displaylogo": False})
    st.caption(caption(kind, text))


WINDOW_EXTRA = 88  # tokens past the window in the local-vs-global prompt (600 for a 512-token window)


def window_length(window: int) -> int:
    return int(window) + WINDOW_EXTRA


@memo(4)
def window_view_for(ref: ModelRef, n: int):
    """The local-vs-global view on a natural ``n``-token prompt (engine.attention.analysis.window_view)."""
    from engine.timeline.experiment import sweep_prompt
    from engine.attention.analysis import window_view

    lm = get_model(ref)
    return work.run(window_view, lm, sweep_prompt(lm, n))
