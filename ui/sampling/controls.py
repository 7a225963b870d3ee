"""State and cached data for the sampling page: page-local dice settings (defaulting to the sidebar), the
per-session generation stepper, and the one-pass predictions at every prompt position.

Moving a page-local setting only re-runs cheap tensor work on logits already held (the trace's first
logits or the stepper's); no widget here starts a forward pass except the explicit "append" button.
"""
from __future__ import annotations

from dataclasses import asdict

import streamlit as st

from engine.core.predictions import PositionPredictions
from engine.sampling.positions import position_predictions
from engine.core.prompt import token_text
from engine.core.sampling import SamplingSettings
from engine.sampling.stages import Draws, Stages, draw_counts, stages_and_draw
from engine.sampling.stepper import Stepper
from engine.core.loaded import ModelRef
from ui.frame import state, work
from ui.frame.html import visible
from ui.frame.models import get_model
from ui.frame.cache import memo

NAMES = ("temperature", "top_k", "top_p", "min_p", "seed")
P = "sampling_"


def _sidebar() -> dict:
    s = state.settings()
    return {**asdict(s.sampling), "seed": s.seed}


def _reset() -> None:
    """Button callback: take the sidebar's values again."""
    side = _sidebar()
    st.session_state[P + "local"] = dict(side)
    for name in NAMES:
        st.session_state[P + name] = side[name]


def local_settings(stacked: bool = False) -> tuple[SamplingSettings, int]:
    """Five page-local widgets. They start at the sidebar's values and follow the sidebar when it changes;
    a shadow copy keeps their values when Streamlit drops widget state on a page switch. ``stacked``: one under
    another (a narrow column beside the chart they drive)."""
    ss = st.session_state
    side = _sidebar()
    shadow = ss.setdefault(P + "local", dict(side))
    if ss.get(P + "sidebar") != side:
        ss[P + "sidebar"] = side
        shadow.update(side)
        for name in NAMES:
            ss[P + name] = side[name]
    for name in NAMES:
        if P + name not in ss:
            ss[P + name] = shadow[name]
    with st.container(border=True):
        st.markdown(":material/casino: **This page's dice.** They start at the sidebar's values; moving them "
                    "re-samples from logits already computed, with no new forward pass.")
        c = [st.container() for _ in range(5)] if stacked else st.columns([3, 2, 3, 3, 2])
        t = c[0].slider("Temperature (0 = greedy)", 0.0, 2.0, step=0.05, key=P + "temperature")
        k = c[1].number_input("Top-k (0 = off)", 0, 1000, step=1, key=P + "top_k")
        p = c[2].slider("Top-p (1 = off)", 0.0, 1.0, step=0.01, key=P + "top_p")
        m = c[3].slider("Min-p (0 = off)", 0.0, 1.0, step=0.01, key=P + "min_p",
                        help="Keep tokens whose probability is at least min-p times the top token's.")
        seed = c[4].number_input("Seed", 0, 2**31 - 1, step=1, key=P + "seed")
        st.button("Use the sidebar's settings", key=P + "reset", on_click=_reset, icon=":material/restart_alt:")
    shadow.update(temperature=t, top_k=k, top_p=p, min_p=m, seed=seed)
    return SamplingSettings(float(t), int(k), float(p), float(m)).clamp(), int(seed)


def stepper(lm, trace) -> Stepper:
    """This session's stepper for (model, prompt); step 0 reuses the trace's first logits (no pass)."""
    ss = st.session_state
    key = (lm.ref, tuple(trace.prompt_ids))
    if ss.get(P + "stepper_key") != key or P + "stepper" not in ss:
        ss[P + "stepper"] = Stepper(trace.prompt_ids, trace.first_logits)
        ss[P + "stepper_key"] = key
        ss[P + "view_step"] = 0
    return ss[P + "stepper"]


def _append(lm, token_id: int, at_step: int) -> None:
    stp = st.session_state[P + "stepper"]
    if not stp.full:
        # on the engine worker; a repeated click (same step) joins the running job, a stale one is ignored
        work.run(stp.append, lm, token_id, at_step=at_step, key=("stepper", id(stp), at_step))
    st.session_state[P + "view_step"] = stp.step
    st.session_state[P + "view"] = stp.step


def _restart(step: int) -> None:
    stp = st.session_state[P + "stepper"]
    stp.restart(step)
    st.session_state[P + "view_step"] = stp.step
    st.session_state[P + "view"] = stp.step


def view_step(stp: Stepper) -> int:
    """Which step's distribution to look at (default: the newest). A slider appears once there are steps."""
    ss = st.session_state
    if stp.step == 0:
        ss[P + "view_step"] = 0
        return 0
    want = min(int(ss.get(P + "view_step", stp.step)), stp.step)
    if ss.get(P + "view") is None or ss[P + "view"] > stp.step:
        ss[P + "view"] = want
    k = st.slider("Look at step (0 = the first token after the prompt)", 0, stp.step, key=P + "view")
    ss[P + "view_step"] = k
    return k


def actions(lm, stp: Stepper, step: int, token_id: int, token: str) -> None:
    """Append the drawn token (one forward pass with the KV cache), go back to a step, or start over."""
    c = st.columns([3, 2])
    if step == stp.step:
        c[0].button(f"Append '{visible(token)}' + one decode step", key=P + "append", type="primary",
                    on_click=_append, args=(lm, token_id, step), disabled=stp.full, icon=":material/play_arrow:",
                    help="Adds this token to the text and runs one forward pass for it, reusing the KV cache.")
    else:
        c[0].button(f"Go back to step {step} (drop {stp.step - step} later token{'s' if stp.step - step > 1 else ''})",
                    key=P + "restart", on_click=_restart, args=(step,), type="primary", icon=":material/undo:",
                    help="Crops the KV cache to this step; then you can append a different token.")
    c[1].button("Start over from the prompt", key=P + "start_over", on_click=_restart, args=(0,),
                disabled=stp.step == 0, icon=":material/first_page:")


@memo(8)
def predictions_for(ref: ModelRef, ids: tuple[int, ...]) -> tuple[PositionPredictions, list[str]]:
    """One forward pass over the prompt (cached): predictions at every position, and the top guesses' text."""
    lm = get_model(ref)
    pp = work.run(position_predictions, lm, list(ids))
    return pp, token_text(lm.tokenizer, pp.top_ids[:, 0])


def predictions_of(lm, trace) -> tuple[PositionPredictions, list[str]]:
    """Predictions at every position, read from the trace's one analysis pass (no pass of its own)."""
    pp = trace.analysis.positions if trace.analysis is not None else None
    if pp is None:
        return predictions_for(lm.ref, tuple(trace.prompt_ids))
    return pp, token_text(lm.tokenizer, pp.top_ids[:, 0])


def histogram_rows(sg, draws, limit: int = 15) -> tuple[list[int], list[float], list[int]]:
    """Tokens for the histogram: the most likely possible ones, then any other token that was drawn."""
    possible = [int(i) for i, f in zip(sg.ids, sg.final) if f > 0][:12]
    ids = list(dict.fromkeys(possible + [int(i) for i in draws.ids[:limit]]))[:limit]
    probs = dict(zip(map(int, sg.ids), map(float, sg.final)))
    probs.update(zip(map(int, draws.ids), map(float, draws.probs)))
    counts = dict(zip(map(int, draws.ids), map(int, draws.counts)))
    return ids, [probs.get(i, 0.0) for i in ids], [counts.get(i, 0) for i in ids]


def stages_of(logits, settings: SamplingSettings, seed: int, step: int, show: int) -> tuple[Stages, int]:
    """The sampling path of one position's logits and the loop's draw at ``step``: a few milliseconds of vector
    work, run on the engine worker like all torch work (no forward pass)."""
    return work.run(stages_and_draw, logits, settings, seed, step, show)  # keyed on the logits' bytes (work._plain)


def draws_of(logits, settings: SamplingSettings, n: int, seed: int) -> Draws:
    """``n`` seeded draws from one position's distribution, counted, on the engine worker."""
    return work.run(draw_counts, logits, settings, n, seed)
