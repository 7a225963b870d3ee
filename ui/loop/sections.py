"""The loop picture with its step controls, as a fragment: stepping redraws the picture, not the page."""
from __future__ import annotations

import time

import streamlit as st

from ui.frame import errors

from ui.frame import state
from ui.loop.glance import picture
from ui.loop.view import STAGES, DECODE_START, glance, next_position, previous_position, softmax_note
from ui.frame.models import current_model  # the model of the trace on the page (ui.frame.runs.current_trace)
from ui.frame.runs import last_position_for

PLAY_PAUSE = 0.45  # seconds per stage when playing one token round the loop


def _glance(trace, t: int):
    last = None
    if t > 0:
        last = last_position_for(current_model().ref, tuple(trace.prompt_ids) + tuple(trace.generated_ids[:t]))
    return glance(trace, t, last)


def _position(trace) -> tuple[int, int]:
    key = (current_model().ref, trace.prompt_ids, trace.generated_ids)
    if st.session_state.get("loop_pos_for") != key:  # a new run: start on its first token, fully drawn
        st.session_state["loop_pos_for"] = key
        st.session_state["loop_pos"] = (0, len(STAGES) - 1)
    return st.session_state["loop_pos"]


@errors.fragment
def loop_picture(trace) -> None:
    """One picture of the loop for the current prompt's real values, stepped one stage or token at a time."""
    n = len(trace.steps)
    t, stage = _position(trace)
    cols = st.columns(5)
    back = cols[0].button("Previous stage", icon=":material/skip_previous:", key="loop_back", width="stretch")
    nxt = cols[1].button("Next stage", icon=":material/arrow_forward:", key="loop_next", width="stretch", type="primary")
    tok = cols[2].button("Next token", icon=":material/skip_next:", key="loop_token", width="stretch",
                         disabled=t + 1 >= n)
    play = cols[3].button("Play token", icon=":material/play_arrow:", key="loop_play", width="stretch",
                          disabled=t + 1 >= n, help="Send the next token round the loop, one stage at a time.")
    reset = cols[4].button("Reset", icon=":material/restart_alt:", key="loop_reset", width="stretch")
    if back:
        t, stage = previous_position(t, stage)
    elif nxt:
        t, stage = next_position(t, stage, n)
    elif tok:
        t, stage = min(t + 1, n - 1), len(STAGES) - 1
    elif reset:
        t, stage = 0, len(STAGES) - 1
    st.caption(f"Stage: **{STAGES[stage]}** · token {t + 1} of {n} · each box opens its page.")
    box = st.empty()
    if play:
        t = t + 1
        g = _glance(trace, t)
        for s in range(DECODE_START, len(STAGES)):
            box.html(picture(g, s, trace.info.n_layers, state.share_params()))
            time.sleep(PLAY_PAUSE)
        stage = len(STAGES) - 1
    st.session_state["loop_pos"] = (t, stage)
    box.html(picture(_glance(trace, t), stage, trace.info.n_layers, state.share_params()))
    note = softmax_note(trace.settings)
    if note:
        st.caption(note)


@errors.fragment
def block_inside(trace) -> None:
    """The layer slider reruns only this part: the values inside one block for the last prompt token."""
    from ui.frame.layout import chart  # noqa: PLC0415 (layout imports state; keep this module's imports light)
    from ui.loop.details import block_table
    from ui.loop.figures import residual_norm_line
    from ui.frame.runs import block_walk_for
    from ui.frame.html import visible

    info = trace.info
    layer = st.slider("Block to look inside", 0, info.n_layers - 1, 0, key="loop_layer")
    df = block_table(block_walk_for(current_model().ref, trace.prompt_ids, layer))
    if df is None:
        f = getattr(info, "arch", None)
        layout = f"{f.norm}{', parallel residual' if f.parallel_residual else ''}" if f is not None else "unknown"
        st.caption(f"Block {layer} is not broken down here: the walk replays a block as norm \u2192 attention \u2192 add "
                   f"\u2192 norm \u2192 MLP \u2192 add and shows it only if it lands on the block's real output; this "
                   f"{info.model_type} block is laid out differently ({layout}).")
    else:
        st.dataframe(df, hide_index=True)
        st.caption(f"Real values inside block {layer} for the last prompt token {visible(trace.prompt_tokens[-1])!r}. "
                   "The two 'add' rows are the residual stream after each sub-layer writes into it.")
    chart(residual_norm_line(trace.analysis.residual_norms[:, -1], trace.prompt_tokens[-1]), "model",
          "The size of the last position's residual-stream vector after each block (before the final norm).")
