"""Shared settings: one frozen Settings value in st.session_state, replaced by widget callbacks, mirrored to the URL.

Widgets never own the value (their keys are "w_<name>"); each widget's on_change puts a new Settings with its
value into st.session_state["settings"]. That keeps a typed value across reruns and page switches (Streamlit can
drop the state of a widget declared in app.py), and the query string lets a copied link reproduce the view.
Pages read the value (``settings().prompt``, ``settings().sampling``); only this module replaces it.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, fields, replace

import streamlit as st

from engine.settings import ON, RUN_LOG

from engine.models.names import EMBEDDED, plain_name
from engine.models.loading import default_device
from engine.core.loaded import DEFAULT_MODE, Mode, ModelRef
from engine.core.request import RunRequest
from engine.core.sampling import SamplingSettings
from engine.models.precision import default_precision
from engine.core.trace import MAX_NEW_TOKENS

DEFAULT_PROMPT = "What is the capital of France?"

# name -> (type, default, lower bound, upper bound)
FIELDS: dict[str, tuple] = {
    "model": (str, EMBEDDED, None, None),
    "precision": (str, default_precision(default_device()), None, None),  # checked when loaded (ui.frame.models)
    "mode": (Mode, DEFAULT_MODE, None, None),  # engine mode: a Mode member (a link's other text: the default)
    "prompt": (str, DEFAULT_PROMPT, None, None),
    "chat": (bool, True, None, None),
    "max_new_tokens": (int, 24, 1, MAX_NEW_TOKENS),
    "temperature": (float, 0.7, 0.0, 2.0),
    "top_k": (int, 50, 0, 1000),
    "top_p": (float, 0.95, 0.0, 1.0),
    "min_p": (float, 0.0, 0.0, 1.0),
    "seed": (int, 0, 0, 2**31 - 1),
    "present": (bool, False, None, None),  # presenter view: larger type, sidebar collapsed, one section at a time
}
MAX_URL_PROMPT = 2000  # a longer prompt is kept in the session but not put in the URL


def parse(name: str, raw):
    """A value from the URL (or anywhere) forced into its type and range; bad input gives the default."""
    typ, default, lo, hi = FIELDS[name]
    if name != "prompt" and not isinstance(raw, (bool, int, float)) and not str(raw).strip():
        return default  # "?chat=" or "?model=" (empty) means "not given", not "off" or no model
    try:
        if typ is bool:
            val = raw if isinstance(raw, bool) else str(raw).strip().lower() in ON  # the settings' "on" words
        else:
            val = typ(raw)
        if typ is float and val != val:  # NaN
            return default
    except (TypeError, ValueError, OverflowError):
        return default
    if lo is not None:
        val = min(max(val, lo), hi)
    if typ is str:
        val = val[:50_000]
    if name == "model":  # a name never carries a precision ("embedded@int8"): only the precision setting does
        val = plain_name(val) or default
    return val


@dataclass(frozen=True)
class Settings:
    """The sidebar's settings for one run (FIELDS gives each one's type, default and range)."""
    model: str
    precision: str
    mode: Mode  # engine mode
    prompt: str
    chat: bool
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int
    present: bool  # presenter view

    @property
    def sampling(self) -> SamplingSettings:
        """The sampling knobs, read by their names in ``SamplingSettings``: a new knob there is a row of FIELDS and
        a field here, and reaches the run without another edit."""
        return SamplingSettings(**{f.name: getattr(self, f.name) for f in fields(SamplingSettings)})

    def run(self, model: ModelRef) -> RunRequest:
        """The sidebar's run on ``model`` (the model as loaded: a refused compile runs eager), whole."""
        return RunRequest(model, self.prompt, self.chat, self.max_new_tokens, self.sampling, self.seed)


assert [f.name for f in fields(Settings)] == list(FIELDS), "Settings and FIELDS name the same values in order"


def settings() -> Settings:
    """The current settings, initialised from the URL on a session's first run."""
    if "settings" not in st.session_state:
        params = st.query_params
        st.session_state["settings"] = Settings(
            **{name: parse(name, params[name]) if name in params else spec[1] for name, spec in FIELDS.items()})
    return st.session_state["settings"]


def set_value(name: str, value) -> None:
    st.session_state["settings"] = replace(settings(), **{name: parse(name, value)})


def from_widget(name: str) -> None:
    """on_change callback: copy widget "w_<name>" into the settings."""
    set_value(name, st.session_state[f"w_{name}"])


PAGE_PARAMS = "_page_params"  # this run's page-specific URL values (e.g. the attention head on view)


def start_run() -> None:
    """Called by app.py before the page runs: page-specific URL values belong to one page only."""
    st.session_state[PAGE_PARAMS] = {}


def log_run(page: str) -> None:
    """Tests (ILE_RUN_LOG): one line per full script run, naming the page it ran (fragments do not)."""
    path = RUN_LOG.get()
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"run {page}\n")


def page_param(name: str, default: int, lo: int, hi: int) -> int:
    """A whole-number view setting of the current page read from the URL (clamped; bad input = default)."""
    try:
        return min(max(int(st.query_params[name]), lo), hi) if name in st.query_params else default
    except (TypeError, ValueError, OverflowError):
        return default


def page_text(name: str, choices) -> str | None:
    """A page's view setting read from the URL when it is one of ``choices`` (anything else: None)."""
    raw = st.query_params.get(name)
    return raw if raw in choices else None


def page_free_text(name: str, limit: int) -> str | None:
    """A page's free text read from the URL (a race's own prompt): at most ``limit`` characters, NUL removed; None
    when absent or blank. It is shown only in widgets that escape it."""
    raw = st.query_params.get(name)
    if not isinstance(raw, str):
        return None
    text = raw.replace("\x00", "")[:limit]
    return text if text.strip() else None


def page_number(name: str, default: float, lo: float, hi: float, step: float) -> float:
    """A numeric view setting of the current page read from the URL, clamped and snapped to ``step`` (a slider's
    grid); bad input gives the default."""
    try:
        val = float(st.query_params[name]) if name in st.query_params else default
    except (TypeError, ValueError, OverflowError):
        return default
    if val != val:
        return default
    return round(round(min(max(val, lo), hi) / step) * step, 10)


def put_page_params(**values) -> None:
    """Keep these page-specific values in the URL for this run (so a copied link opens the same view)."""
    st.session_state.setdefault(PAGE_PARAMS, {}).update({k: str(v) for k, v in values.items()})


PIN = "pin"  # a class link: "?...&pin=1" fixes the teacher's model, engine mode and settings, "pin=prompt" the prompt too
PIN_PROMPT = "prompt"


def _pin_mode() -> str:
    """"" (a free session), "settings" or "prompt": read once, on the session's first run (kept in its address)."""
    if PIN not in st.session_state:
        raw = str(st.query_params.get(PIN, "")).strip().lower()
        st.session_state[PIN] = PIN_PROMPT if raw == PIN_PROMPT else \
            "settings" if raw in ON else ""
    return st.session_state[PIN]


def pinned() -> bool:
    """Did this session open a teacher's class link? The sidebar then shows the link's model, precision and
    generation settings without letting them change, so the whole room runs with the same settings, and each
    student still types their own question (unless the link pins the prompt too: ``pinned_prompt``). A
    convenience for a lesson, not a lock: a student who edits the address away gets a free session."""
    return bool(_pin_mode())


def pinned_prompt() -> bool:
    """Does this session's class link fix the prompt too (``pin=prompt``: everyone runs the teacher's prompt)?"""
    return _pin_mode() == PIN_PROMPT


VOTER = "voter"  # a class page's random voter id (ui/frame/tally.py): a reload keeps its pick, never votes twice
_VOTER_ID = re.compile(r"[A-Za-z0-9_-]{16}")


def voter_id() -> str:
    """This tab's voter id for the class's predictions: the address's (a reload, a new session at the same address,
    is the same voter), else a fresh random one, kept in the address from now on. Random: it names no person, and a
    forged or copied one votes at most once per question like any other (the client's picks are bounded)."""
    if VOTER not in st.session_state:
        raw = st.query_params.get(VOTER, "")
        st.session_state[VOTER] = raw if isinstance(raw, str) and _VOTER_ID.fullmatch(raw) else \
            secrets.token_urlsafe(12)
    return st.session_state[VOTER]


def class_link_params(prompt: bool = False) -> dict[str, str]:
    """The current settings as a class link's values (what the teacher's class view offers to share): the model
    and settings pinned and the prompt each student's own (it starts as the teacher's), or with ``prompt`` the
    prompt pinned too."""
    want = share_params()
    want.pop("present", None)
    want.pop(VOTER, None)  # every student gets their own
    want[PIN] = PIN_PROMPT if prompt else "1"
    return want


def share_params(before_page: bool = False) -> dict[str, str]:
    """The shared settings as URL values (only what differs from the defaults keeps links short); with
    ``before_page`` every other value already in the URL is kept too (see ``write_query_params``)."""
    s = settings()
    current = {k: st.query_params[k] for k in st.query_params}
    want = {k: v for k, v in current.items() if k not in FIELDS} if before_page else {}
    for name, (typ, default, _, _) in FIELDS.items():
        val = getattr(s, name)
        if val == default or (name == "prompt" and len(val) > MAX_URL_PROMPT):
            continue
        want[name] = ("1" if val else "0") if typ is bool else str(val)
    if pinned():
        want[PIN] = PIN_PROMPT if pinned_prompt() else "1"
    if VOTER in st.session_state:
        want[VOTER] = st.session_state[VOTER]
    return want


def write_query_params(before_page: bool = False) -> None:
    """Mirror the settings into the URL, then the current page's own values.

    ``before_page``: called before the page runs, so a page that ends early with st.stop() still leaves a
    current link (nothing can be written after st.stop(): every later st call raises StopException again, and a
    query-string rewrite would stop half way, after clearing it). The page's own values are not known yet, so
    every other value in the URL is kept (the page reads its own from there)."""
    want = share_params(before_page)
    if not before_page:
        want.update(st.session_state.get(PAGE_PARAMS, {}))
    current = {k: st.query_params[k] for k in st.query_params}
    if current != want:
        st.query_params.from_dict(want)
