"""The loaded model (one per name per process, shared by every session) and the fall-back on failure."""
from __future__ import annotations

import streamlit as st

from engine.models import EMBEDDED, LoadedModel, ModelLoadError, embedded_is_converted, load_model, log
from ui import state
from ui.html import md_escape


@st.cache_resource(max_entries=3, show_spinner=False)
def _load(name: str, _progress=None) -> LoadedModel:
    lm = load_model(name, progress=_progress or (lambda msg: None))
    log(f"loaded model {name!r} for the app ({lm.info.n_params:,} parameters on {lm.info.device})")
    return lm


def get_model(name: str) -> LoadedModel:
    """Load ``name`` (cached); the first start converts the embedded model with visible progress."""
    if name == EMBEDDED and not embedded_is_converted():
        with st.status("First start: converting the embedded model (one time, about 30 s)...", expanded=True) as box:
            lm = _load(name, _progress=lambda msg: box.write(msg))
            box.update(label="Embedded model ready", state="complete", expanded=False)
        return lm
    with st.spinner(f"Loading model {md_escape(name)} ..."):
        return _load(name)


def on_model_change() -> None:
    """Callback of the sidebar's model box: try the new name at once; on failure put the old one back in the
    box and keep a message for the sidebar (callbacks run before the script, so widget state may change)."""
    old = state.settings()["model"]
    name = (st.session_state.get("w_model") or "").strip() or EMBEDDED
    try:
        get_model(name)
    except ModelLoadError as exc:
        st.session_state["model_error"] = f"{exc} Still using '{old}'."
        st.session_state["w_model"] = old
        return
    state.set_value("model", name)


def current_model() -> LoadedModel:
    """The model the settings ask for; if it cannot be loaded, say why and keep the previous one."""
    s = state.settings()
    name = s["model"]
    try:
        lm = get_model(name)
        st.session_state["last_good_model"] = name
        return lm
    except ModelLoadError as exc:
        fallback = st.session_state.get("last_good_model", EMBEDDED)
        if fallback == name:
            fallback = EMBEDDED
        st.session_state["model_error"] = f"{exc} Still using '{fallback}'."
        state.set_value("model", fallback)
        return get_model(fallback)
