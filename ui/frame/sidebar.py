"""The sidebar shared by every page: model, prompt, chat template, and sampling settings."""
from __future__ import annotations

from dataclasses import fields

import streamlit as st

from ui.frame import state
from engine.core.sampling import SamplingSettings
from engine.core.compiled import LABELS as MODE_LABELS, MODES, mode_of
from engine.models.precision import LABELS, PRECISIONS, lm_precision
from ui.frame.html import md_escape
from ui.frame.models import (current_model, mode_is_the_teachers, model_box, on_mode_change, on_precision_change,
                             start_background_preparation)


# what a class link fixes, with the model, precision and mode: the run's settings, every sampling knob among them
PINNED = {"chat", "max_new_tokens", "seed", *(f.name for f in fields(SamplingSettings))}


def _widget(kind, label: str, name: str, on_change=None, **kw):
    """A widget whose value lives in the shared settings (see ui.frame.state); a class link fixes the teacher's
    settings (and the prompt only when it pins that too)."""
    if on_change is None:
        on_change, kw["args"] = state.from_widget, (name,)
    if (name in PINNED and state.pinned()) or (name == "prompt" and state.pinned_prompt()):
        kw["disabled"] = True
    return kind(label, value=getattr(state.settings(), name), key=f"w_{name}", on_change=on_change, **kw)


def mode_help(lm) -> str:
    """The engine selector's help; how a class's answers run comes from the class batcher's own decision for the
    model as loaded (engine.jobs.classbatch.how_served), not from a sentence that could drift from it."""
    from engine.jobs.classbatch import how_served

    return ("Eager: PyTorch runs each of the decode step's hundreds of operators as Python calls it. Compiled: a "
            "static KV cache and torch.compile turn the step into one graph of fused kernels (on a GPU, replayed as "
            "one CUDA graph); compiled once per model, precision and cache length before anything is timed, in the "
            "background. A prompt's prefill runs compiled too, padded to a bucket of 16 to 1,024 tokens, once that "
            f"bucket's graph is compiled; analyses run eager in both modes. In this engine mode, {how_served(lm)}. "
            "Kept in the page address.")


def render() -> None:
    with st.sidebar:
        st.markdown("### Model and prompt")
        if state.pinned_prompt():
            st.caption(":material/push_pin: Your teacher's class link sets the model, the prompt and the settings "
                       "for everyone in the room.")
        elif state.pinned():
            st.caption(":material/push_pin: Your teacher's class link sets the model and the settings for everyone "
                       "in the room. The prompt is yours: type your own question and press Ctrl+Enter.")
        model_box()  # free text for one person; the allow-list in class mode
        start_background_preparation()  # Gemma's one-time conversion, in a child process (engine.models.background)
        lm = current_model()
        err = st.session_state.pop("model_error", None)
        if err:
            st.error(md_escape(err), icon=":material/error:")
        st.selectbox("Precision", PRECISIONS, index=PRECISIONS.index(lm_precision(lm)), key="w_precision",
                     format_func=LABELS.get, on_change=on_precision_change, disabled=state.pinned(),
                     help="Bytes per weight. Decode reads every weight once per token, so fewer bytes can mean "
                          "faster decode, at some cost in accuracy. float16 needs a CUDA GPU. int8 quantizes the "
                          "linear layers' weights (a scale per row) and their inputs on the fly. The prefill vs "
                          "decode page measures each.")
        if st.session_state.get("w_mode") != mode_of(lm):  # a refusal or a cancelled compile ran eager: say so here
            st.session_state["w_mode"] = mode_of(lm)
        students = mode_is_the_teachers()  # a class server: the teacher's choice (ui/frame/teacher.py)
        st.selectbox("Engine", MODES, key="w_mode", format_func=MODE_LABELS.get,
                     on_change=on_mode_change, disabled=state.pinned() or students,
                     help=mode_help(lm))
        if students:
            st.caption(":material/school: On this class server the teacher chooses the engine mode for the room.")
        i = lm.info
        st.caption(f"{md_escape(i.source)}: {i.n_params / 1e6:,.1f} M parameters on {i.device} ({LABELS.get(lm_precision(lm))}"
                   + (f"; activations and KV cache in {i.dtype}" if lm_precision(lm) == "int8" else "") + ")")
        if lm_precision(lm) == "int8" and i.int8_float:
            st.caption("int8: " + md_escape("; ".join(i.int8_float)) + ".")
        _widget(st.text_area, "Prompt", "prompt", height=110, max_chars=50_000,
                help="Press Ctrl+Enter or click outside the box to apply.")
        _widget(st.toggle, "Use the chat template", "chat",
                help="Instruct models expect the prompt wrapped in role markers. Off: the raw text is used.")
        st.markdown("### Generation")
        _widget(st.slider, "Max new tokens", "max_new_tokens", min_value=1, max_value=state.FIELDS["max_new_tokens"][3])
        _widget(st.slider, "Temperature", "temperature", min_value=0.0, max_value=2.0, step=0.05,
                help="0 means greedy: always the most likely token.")
        _widget(st.number_input, "Top-k (0 = off)", "top_k", min_value=0, max_value=1000, step=1)
        _widget(st.slider, "Top-p (1 = off)", "top_p", min_value=0.0, max_value=1.0, step=0.01)
        _widget(st.slider, "Min-p (0 = off)", "min_p", min_value=0.0, max_value=1.0, step=0.01,
                help="Keep tokens whose probability is at least min-p times the top token's.")
        _widget(st.number_input, "Seed", "seed", min_value=0, max_value=2**31 - 1, step=1)
        _widget(st.toggle, "Presenter view", "present",
                help="For projecting: larger type, sidebar collapsed, one section at a time with Next, and each "
                     "'Try this' answer behind a button. Kept in the page address.")
        st.caption(":material/link: The page address holds these settings: copy it to share this exact view.")
