"""The loaded model (one per model per process, shared by every session) and the fall-back on failure.

Names go through the model policy (engine.models.names) before anything is loaded: every spelling of a model
maps to one canonical name, so to one cache entry; in class mode only the allow-list's models can be chosen.
"""
from __future__ import annotations

import logging
import contextlib

import streamlit as st

from engine.models.names import ModelNotAllowed, ModelPolicy, plain_name, policy_from_env
from engine.models import background
from engine.jobs import worker
from engine.models import catalog, packaged
from engine.models.catalog import Packaged
from engine.models.names import EMBEDDED
from engine.models.loading import default_device, load_model
from engine.core.loaded import LoadedModel, Mode, ModelLoadError, ModelRef
from engine.models.names import builtin
from engine.core.background_compile import COMPILER
from engine.core.compiled import DEFAULT_MODE, ModeError, graph_of, refused as mode_refused, to_mode
from engine.models.precision import LABELS, model_ref, supported, to_precision, unsupported_reason
from ui.frame import state, teacher, work
from ui.frame.html import md_escape
from ui.frame.cache import shared

logger = logging.getLogger(__name__)

def policy() -> ModelPolicy:
    """Open mode, or class mode with its allow-list (environment settings; see engine.models.names)."""
    return policy_from_env(server_address=st.get_option("server.address"))


def offered(name: str) -> bool:
    """May a page read or show the app's own model ``name`` (its tokenizer, its facts)? In class mode only when
    the allow-list offers it: nothing off the list is read or named."""
    pol = policy()
    return not pol.class_mode or name in dict(pol.allowed).values()


OPEN_EXTRA = 2  # open mode: room for two typed folders or hub ids besides the built-in models


def cache_entries(pol: ModelPolicy | None = None) -> int:
    """How many loaded copies the model cache keeps: every (model, precision) pair the server offers, so that
    visits switching among them never evict and reload one another (a 4-entry cache thrashed with 2 models at 3
    precisions). Class mode: the allow-list's models at each precision this device runs; open mode: the built-in
    models at each, plus ``OPEN_EXTRA``. Read once, when the app starts."""
    pol = pol or policy()
    n_prec = len(supported(default_device()))
    return len(pol.labels) * n_prec if pol.class_mode else len(builtin()) * n_prec + OPEN_EXTRA


@shared(cache_entries())
def _load(name: str, target: str, precision: str | None) -> LoadedModel:
    """``name`` is canonical, so one entry per (model, precision); ``precision`` None is the device's default,
    any other is a copy of the default model cast or quantized once (engine.models.precision). ``precision`` has no
    default value: Streamlit keys the cache on the arguments as passed, so a call that left it out missed the
    entry of one that passed None and loaded a second copy of the model. No st.* call may happen in here:
    Streamlit records the elements a cached function draws and replays them on every later hit, into blocks that
    may no longer exist (a CacheReplayClosureError on every page of every session)."""
    if precision is not None:
        lm = worker.run(to_precision, _load(name, target, None), precision)  # on the worker: int8 calibrates
    else:
        # on the worker, the load's check passes too, like all torch work; an allow-list label is shown by its
        # label, never by the folder or id behind it (ModelRef.path)
        lm = worker.run(load_model, ModelRef(name, path="" if target == name else target), progress=logger.info)
    copy = "" if precision is None else f" as a {precision} copy"  # the log tells a reload from a precision copy
    logger.info(f"loaded model {name!r}{copy} for the app ({lm.info.n_params:,} parameters on {lm.info.device})")
    return lm


CONVERSION_LABELS = {
    "missing": "First start: converting {called}",
    "outdated": "{Called}'s package was updated: converting its new version",
    "damaged": "The saved copy of {called} is damaged (its files do not match their checksum): converting it again",
}
CONVERSION_TIME = " ({takes} on 2 cores, longer on a busy laptop)..."


@shared(cache_entries())
def _load_compiled(name: str, target: str, precision: str | None) -> LoadedModel:
    """The compiled-mode model (engine.core.compiled) over the cached eager model's weights: one entry per (model,
    precision), as ``_load`` keeps the eager ones. Nothing is compiled here: its warm-up compiles each static cache
    length on first use (``warm_compiled``). No st.* call in here (see ``_load``)."""
    lm = worker.run(to_mode, _load(name, target, precision), Mode.COMPILED)
    logger.info(f"compiled mode for model {lm.ref.label()!r}: its decode step is compiled on first use")
    return lm


def _ensure_converted(r: Packaged) -> None:
    """The conversion of a packaged model prepared on first use (the first start's, or again after its copy was
    damaged), with its progress drawn in this run's own status box, outside the cached loader. A second session
    arriving meanwhile waits on the conversion's file lock (engine.models.packaged.prepare)."""
    why = packaged.copy_state(r)
    if why == "ready":
        return
    label = CONVERSION_LABELS.get(why, CONVERSION_LABELS["missing"]) + CONVERSION_TIME
    with st.status(label.format(called=r.called, Called=r.sentence, takes=r.takes), expanded=True) as box:
        if packaged.converting(r):
            box.write("Another visitor's first start is converting it; waiting for that to finish...")
        try:  # on the engine worker like all torch work; progress drawn here
            work.run(packaged.prepare, r, progress=work.relay("progress"), key=("convert", r.name),
                     events={"progress": lambda msg: (logger.info(msg), box.write(msg))})
        except ModelLoadError:
            box.update(label=f"{r.sentence} could not be prepared", state="error")
            raise
        box.update(label=f"{r.sentence} is ready", state="complete", expanded=False)


def first_start_in_view() -> None:
    """The first start's conversion of the embedded model (about 15 s), drawn at the top of the page, before the
    sidebar asks for the model: drawn where the sidebar asks, below the page list and the model box, it sat at the
    foot of a 768-pixel screen, cut off, beside a blank page. Nothing is drawn once the copy is ready. A failure is
    left to the sidebar, which says why (its own try reaches the same error)."""
    try:
        _, target = policy().resolve(plain_name(state.settings().model))
    except ModelLoadError:
        return  # a name this server does not offer: the sidebar says so
    r = catalog.row(target)
    if r is not None and not r.background and packaged.copy_state(r) != "ready":
        st.space(28)  # below Streamlit's header bar, where a page's title starts (ui/frame/style.py's top padding)
        with contextlib.suppress(ModelLoadError):
            _ensure_converted(r)


def start_background_preparation() -> None:
    """Called on every page run (cheap after the first): each packaged model marked ``background`` that this server
    offers (Gemma 3 270M) starts its one-time conversion in a child process (engine.models.background) as soon as the
    first page is drawn, so it never delays that page and is usually done before anyone picks it."""
    if background.disabled():
        return
    for r in catalog.rows():
        if r.background and background.current(r.name) is None and offered(r.name):
            background.start(r.name)


def _ensure_background(r: Packaged) -> None:
    """Wait, with progress, for the background preparation of ``r`` (starting it if it has not started or failed
    before). The conversion itself never runs on this script thread."""
    prep = background.start(r.name)
    if not prep.thread.is_alive() and prep.state == "ready":
        return
    with st.status(f"Preparing {r.called} (one time per machine: {r.takes} on 2 cores, longer on a busy laptop)...",
                   expanded=True) as box:
        line = st.empty()
        while prep.thread.is_alive():
            shown = prep.last_line() if prep.state == "converting" else "Checking the converted copy..."
            line.write(md_escape(shown or "Starting..."))
            prep.thread.join(1.0)
        if prep.state != "ready":
            box.update(label=f"{r.sentence} could not be prepared", state="error")
            raise ModelLoadError(f"{r.sentence} could not be prepared: {prep.message}")
        box.update(label=f"{r.sentence} is ready", state="complete", expanded=False)


def ref_for(name: str, precision: str, mode: Mode = DEFAULT_MODE) -> ModelRef:
    """The reference of the model ``name`` (as typed or as a link carried it: any precision or mode suffix in it is
    dropped) at the setting's precision and engine mode: where the settings become a model."""
    return model_ref(plain_name(name), precision, default_device(), mode)


def get_model(ref: ModelRef) -> LoadedModel:
    """Load the model ``ref`` names, cached by its canonical name, precision and mode; the first start converts the
    embedded model with progress.

    In class mode a name off the allow-list raises ModelNotAllowed, and a listed model that fails to load gives
    a message without the server's details (those go to the server's log)."""
    if not isinstance(ref, ModelRef):  # a programming error: a name string reaches here only through model_named
        raise TypeError(f"get_model takes a ModelRef, not {type(ref).__name__}")
    pol = policy()
    mode, precision = ref.mode, ref.precision or None
    if mode != DEFAULT_MODE and mode_is_the_teachers() and mode != teacher.room_mode():
        raise ModelLoadError("On a class server the teacher chooses the engine mode; this room runs "
                             f"{teacher.room_mode()}.")
    canon, target = pol.resolve(ref.name)
    r = catalog.row(target)
    if r is not None:
        _ensure_background(r) if r.background else _ensure_converted(r)
    label = f"Loading model {md_escape(canon)} ..." if precision is None else \
        f"Preparing {md_escape(canon)} at {LABELS.get(precision, precision)}: a copy cast or quantized once..."
    try:
        with st.spinner(label):
            return _load(canon, target, precision) if mode == DEFAULT_MODE else _load_compiled(canon, target, precision)
    except ModelLoadError as exc:
        if not pol.class_mode:
            raise
        logger.info(f"class mode: model {canon!r} could not be loaded: {exc}")
        raise ModelLoadError(f"The model '{canon}' could not be loaded on this server right now.") from None


def model_named(name: str) -> LoadedModel:
    """The model a person named in a text box (a drafter's ``model:NAME``), at the device's default precision,
    eager."""
    return get_model(ModelRef(plain_name(name)))


def default_model(pol: ModelPolicy | None = None) -> str:
    pol = pol or policy()
    return EMBEDDED if not pol.class_mode or EMBEDDED in pol.labels else pol.labels[0]


def model_box() -> None:
    """The sidebar's model chooser: a free text box for one person, the allow-list in class mode. The box shows
    the canonical name of what the settings ask for (checked against the policy, nothing loaded here)."""
    pol = policy()
    try:
        shown = pol.resolve(state.settings().model)[0]
    except ModelNotAllowed:  # current_model() refuses it just below and falls back
        shown = st.session_state.get("last_good_model", default_model(pol))
    if pol.class_mode and shown not in pol.labels:
        shown = default_model(pol)
    if st.session_state.get("w_model") != shown:
        st.session_state["w_model"] = shown
    pin = state.pinned()  # a pinned class link fixes the model
    if pol.class_mode:
        known = "; ".join(f"{n}: {nice_name(n)}" for n in pol.labels if catalog.row(n) is not None)
        st.selectbox("Model", pol.labels, key="w_model", on_change=on_model_change, disabled=pin,
                     help="The models this server offers" + (f" ({known})." if known else "."))
        return
    pick = shown if shown in builtin() else None
    if st.session_state.get("w_model_pick") != pick:
        st.session_state["w_model_pick"] = pick
    st.pills("Models shipped with the app", list(builtin()), key="w_model_pick", format_func=nice_name,
             on_change=_on_pick, disabled=pin, help="Both real models run offline; tiny-random is a test model.")
    st.text_input("Model", key="w_model", on_change=on_model_change, disabled=pin,
                  help=model_box_help())


def model_box_help() -> str:
    """The model box's help: every packaged model from the table, then the others it takes."""
    first, *more = catalog.rows()
    text = f"'{first.name}' is {first.title}, shipped with the app; " + "".join(
        f"'{r.name}' is {r.title} ({r.kind} model, also offline). " for r in more)
    return text + ("'tiny-random' is a tiny model with random weights. Or a Hugging Face id (needs internet) or a "
                   "local folder with safetensors weights.")


def nice_name(name: str) -> str:
    """A built-in model's name as a person reads it (the name itself for anything else)."""
    r = catalog.row(name)
    return r.nice if r is not None else "tiny random" if name == catalog.TINY else name


def _on_pick() -> None:
    """The pills above the model box: a built-in model chosen with one click (a click on the chosen one clears the
    pills; the model stays)."""
    picked = st.session_state.get("w_model_pick")
    if picked:
        st.session_state["w_model"] = picked
        on_model_change()


def draft_model_box(key: str) -> str:
    """The race page's draft-model chooser, under the same policy as the sidebar's."""
    pol = policy()
    if pol.class_mode:
        return st.selectbox("Draft model (must share the target's tokenizer)", pol.labels, key=key,
                            help="The models this server offers.")
    return plain_name(st.text_input("Draft model (must share the target's tokenizer)", "", key=key,
                                    placeholder="a local folder or hub id").strip())


def on_model_change() -> None:
    """Callback of the sidebar's model box: try the new name at once; on failure put the old one back in the
    box and keep a message for the sidebar (callbacks run before the script, so widget state may change)."""
    s = state.settings()
    old = s.model
    try:
        lm = get_model(ref_for(st.session_state.get("w_model") or "", s.precision))  # the mode is checked on its run
    except ModelLoadError as exc:
        st.session_state["model_error"] = f"{exc} Still using '{old}'."
        st.session_state["w_model"] = old
        return
    canon = lm.ref.name
    state.set_value("model", canon)
    st.session_state["w_model"] = canon  # the canonical spelling, as the URL will have it


def on_precision_change() -> None:
    """Callback of the sidebar's precision box: an unsupported precision or a failed conversion leaves a message
    and puts the current precision back."""
    s = state.settings()
    old, new = s.precision, st.session_state.get("w_precision") or s.precision
    reason = unsupported_reason(new, default_device())
    try:
        if reason:
            raise ModelLoadError(reason)
        get_model(ref_for(s.model, new))
    except ModelLoadError as exc:
        st.session_state["model_error"] = f"{exc} Still using {old}."
        st.session_state["w_precision"] = old
        return
    state.set_value("precision", new)


def on_mode_change() -> None:
    """Callback of the sidebar's engine box: a mode this model, precision or machine cannot run leaves a one-line
    message and puts the current mode back. Nothing is compiled here: the page's run warms it up, with progress."""
    s = state.settings()
    old, new = s.mode, st.session_state.get("w_mode") or s.mode
    if new != DEFAULT_MODE:
        try:
            lm = get_model(ref_for(s.model, s.precision))
            reason = mode_refused(lm)
            if reason:
                raise ModeError(f"Compiled mode: {reason}.")
        except ModelLoadError as exc:
            st.session_state["model_error"] = f"{exc} Still {old}."
            st.session_state["w_mode"] = old
            return
    state.set_value("mode", new)


def mode_is_the_teachers() -> bool:
    """Is this session's engine mode the teacher's to choose (a student's session on a class server)?"""
    return policy().class_mode and not teacher.is_teacher()


def session_mode(s: state.Settings) -> Mode:
    """The engine mode this session runs in: its own setting, except on a class server, where a student's session
    runs in the room's mode (ui/frame/teacher.py) and the teacher's own session sets it."""
    if not policy().class_mode:
        return s.mode
    if teacher.is_teacher():
        teacher.set_room_mode(s.mode)
        return s.mode
    return teacher.room_mode()


def _checked_mode(s: state.Settings, lm: LoadedModel) -> LoadedModel:
    """``lm`` (the eager model of the settings) in the session's engine mode (``session_mode``); a mode it cannot
    run leaves a one-line message, the setting back at eager, and eager runs."""
    mode = session_mode(s)
    if mode != s.mode:  # a student's ?mode= on a class server: the room's mode, quietly (the sidebar says whose)
        state.set_value("mode", mode)
        s = state.settings()
    if s.mode == DEFAULT_MODE:
        return lm
    reason = mode_refused(lm)
    if reason is None:
        try:
            compiled = get_model(ref_for(s.model, s.precision, s.mode))
        except ModelLoadError as exc:
            reason = str(exc)
        else:
            # while one of its graphs compiles in the background, the model's runs are eager (ui.frame.compiling)
            return lm if COMPILER.busy(compiled.ref) else compiled
    st.session_state["model_error"] = f"Compiled mode: {reason.removeprefix('Compiled mode: ').rstrip('.')}. Eager runs."
    state.set_value("mode", DEFAULT_MODE)
    return lm


def compiled_model() -> LoadedModel | None:
    """The settings' model in compiled mode, whether or not a graph of it compiles now; None when the session runs
    eager (its setting, a refusal or a failure)."""
    lm = current_model()
    if state.settings().mode == DEFAULT_MODE:
        return None
    return lm if graph_of(lm) is not None else get_model(lm.ref.at(mode=state.settings().mode))


def measured_model(lm: LoadedModel) -> LoadedModel:
    """The model a timed measurement of this page runs (the race, the prompt-length sweep): in compiled mode the
    compiled model even while one of its graphs compiles in the background, since such a measurement waits for its
    graphs in its own page (ui.frame.compiling.wait_for_graphs) rather than timing eager lanes beside a compile
    (``current_model`` answers eager meanwhile); ``lm`` otherwise."""
    fast = compiled_model()
    return fast if fast is not None and fast.ref.at(mode=lm.ref.mode) == lm.ref else lm


def eager_model(lm: LoadedModel, why: str) -> LoadedModel:
    """The eager model behind ``lm``, for a page whose work runs eager in either mode; in compiled mode ``why`` is
    said in one line first."""
    if graph_of(lm) is None:
        return lm
    st.caption(f":material/info: Compiled mode: {md_escape(why)}; this page runs eager.")
    return get_model(lm.ref.at(mode=DEFAULT_MODE))


def _checked_precision(s: state.Settings) -> str:
    """The settings' precision if this device runs it; else a message and the last one that worked."""
    reason = unsupported_reason(s.precision, default_device())
    if reason:
        good = st.session_state.get("last_good_precision", state.FIELDS["precision"][1])
        st.session_state["model_error"] = f"{reason} Still using {good}."
        state.set_value("precision", good)
    return state.settings().precision


def current_model() -> LoadedModel:
    """The model the settings ask for, at the settings' precision; if it cannot be loaded, say why and keep the
    previous one (at the default precision if the precision was the problem)."""
    s = state.settings()
    precision = _checked_precision(s)
    name = s.model
    try:
        try:
            lm = get_model(ref_for(name, precision))
        except ModelLoadError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to load is one line for the person who asked
            raise ModelLoadError(f"'{name[:60]}' could not be loaded: {type(exc).__name__}: "
                                 f"{(str(exc).splitlines() or [''])[0][:200]}") from exc
        canon = lm.ref.name
        if canon != name:
            state.set_value("model", canon)
        st.session_state["last_good_model"] = canon
        st.session_state["last_good_precision"] = precision
        return _checked_mode(state.settings(), lm)
    except ModelLoadError as exc:
        pol = policy()
        fallback = st.session_state.get("last_good_model", default_model(pol))
        if fallback == name and not ref_for(name, precision).precision:
            fallback = default_model(pol)
        if not (isinstance(exc, ModelNotAllowed) and name == EMBEDDED):  # the default, not a choice: no message
            st.session_state["model_error"] = f"{exc} Still using '{fallback}'."
        state.set_value("model", fallback)
        state.set_value("precision", st.session_state.get("last_good_precision", state.FIELDS["precision"][1]))
        return get_model(ref_for(fallback, state.settings().precision))
