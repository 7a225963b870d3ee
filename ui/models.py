"""The loaded model (one per name per process, shared by every session) and the fall-back on failure."""
from __future__ import annotations

import streamlit as st

from engine.models import EMBEDDED, LoadedModel, ModelLoadError, default_device, embedded_is_converted, \
    load_model, log
from engine.precision import LABELS, model_key, split_key, to_precision, unsupported_reason
from ui import state


@st.cache_resource(max_entries=4, show_spinner=False)
def _load(name: str, _progress=None) -> LoadedModel:
    """``name`` is a model key (engine.precision.model_key): a plain name, or "<name>@<precision>", which is a
    copy of the plain name's cached model cast or quantized, so one model is cached per (model, precision)."""
    base, precision = split_key(name)
    if precision is not None:
        lm = to_precision(_load(base, _progress), precision)
    else:
        lm = load_model(name, progress=_progress or (lambda msg: None))
    log(f"loaded model {name!r} for the app ({lm.info.n_params:,} parameters on {lm.info.device})")
    return lm


def key_for(name: str, precision: str) -> str:
    return model_key(name, precision, default_device())


def get_model(name: str) -> LoadedModel:
    """Load ``name`` (a model key, cached); the first start converts the embedded model with visible progress."""
    base, precision = split_key(name)
    if base == EMBEDDED and not embedded_is_converted():
        with st.status("First start: converting the embedded model (one time, about 30 s)...", expanded=True) as box:
            lm = _load(name, _progress=lambda msg: box.write(msg))
            box.update(label="Embedded model ready", state="complete", expanded=False)
        return lm
    label = f"Loading model {base} ..." if precision is None else \
        f"Preparing {base} at {LABELS.get(precision, precision)}: a copy cast or quantized once (a few seconds)..."
    with st.spinner(label):
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


def on_precision_change() -> None:
    """Callback of the sidebar's precision box: an unsupported precision or a failed conversion leaves a message
    and puts the current precision back."""
    s = state.settings()
    old, new = s["precision"], st.session_state.get("w_precision") or s["precision"]
    reason = unsupported_reason(new, default_device())
    try:
        if reason:
            raise ModelLoadError(reason)
        get_model(key_for(s["model"], new))
    except ModelLoadError as exc:
        st.session_state["model_error"] = f"{exc} Still using {old}."
        st.session_state["w_precision"] = old
        return
    state.set_value("precision", new)


def _checked_precision(s: dict) -> str:
    """The settings' precision if this device runs it; else a message and the last one that worked."""
    reason = unsupported_reason(s["precision"], default_device())
    if reason:
        good = st.session_state.get("last_good_precision", state.FIELDS["precision"][1])
        st.session_state["model_error"] = f"{reason} Still using {good}."
        state.set_value("precision", good)
    return s["precision"]


def current_model() -> LoadedModel:
    """The model the settings ask for, at the settings' precision; if it cannot be loaded, say why and keep the
    previous one (at the default precision if the precision was the problem)."""
    s = state.settings()
    precision = _checked_precision(s)
    name = s["model"]
    try:
        lm = get_model(key_for(name, precision))
        st.session_state["last_good_model"] = name
        st.session_state["last_good_precision"] = precision
        return lm
    except ModelLoadError as exc:
        fallback = st.session_state.get("last_good_model", EMBEDDED)
        if fallback == name and split_key(key_for(name, precision))[1] is None:
            fallback = EMBEDDED
        st.session_state["model_error"] = f"{exc} Still using '{fallback}'."
        state.set_value("model", fallback)
        state.set_value("precision", st.session_state.get("last_good_precision", state.FIELDS["precision"][1]))
        return get_model(key_for(fallback, s["precision"]))
