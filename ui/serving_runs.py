"""Connection settings and measured runs for the serving page (the only serving code touching st.session_state
and query params).

The base URL and model name go into the share link; the API key never does (it lives in this session only, is not
shown back, and is not logged). Runs happen only on a button; one sweep per server at a time across all sessions
(other sessions' requests would distort the numbers and pile load on the server); a run stops when its session
leaves or its Cancel button is pressed (Streamlit interrupts the script, the engine closes the open streams).
"""
from __future__ import annotations

import threading

import streamlit as st

from engine.serving import client as C
from engine.serving import measure as Me
from engine.serving.probe import probe
from ui import state
from ui.serving_view import literal

DEFAULT_URL = "http://127.0.0.1:8000"
_CONN = "serving_conn"
_RESULTS = "serving_results"
_BUSY: dict[str, threading.Lock] = {}
_BUSY_LOCK = threading.Lock()


def connection() -> dict:
    """{base_url, model, api, api_key}; the first run of a session takes URL and model from the share link."""
    if _CONN not in st.session_state:
        q = st.query_params
        st.session_state[_CONN] = {"base_url": str(q.get("serve_url", DEFAULT_URL))[:500],
                                   "model": str(q.get("serve_model", ""))[:300], "api": "completions",
                                   "api_key": ""}
    return st.session_state[_CONN]


def share(conn: dict) -> None:
    """Put URL and model (never the key) into this run's page parameters, if the URL is a valid one."""
    try:
        url = C.normalize_base_url(conn["base_url"])
    except C.BadURL:
        return
    params = {"serve_url": url}
    if conn["model"]:
        params["serve_model"] = conn["model"]
    state.put_page_params(**params)


def config(conn: dict) -> C.ServerConfig:
    """Raises BadURL with a readable message."""
    return C.ServerConfig(conn["base_url"], conn["model"], conn["api_key"], api=conn["api"])


def _key(cfg: C.ServerConfig) -> tuple:
    return (cfg.base_url, cfg.model, cfg.api, hash(cfg.api_key))


def results() -> dict:
    return st.session_state.setdefault(_RESULTS, {})


def stored(cfg: C.ServerConfig, what: str, settings: tuple = ()):
    return results().get((_key(cfg), what, settings))


def _store(cfg, what, settings, value) -> None:
    res = results()
    res[(_key(cfg), what, settings)] = value
    while len(res) > 24:  # bounded per session
        res.pop(next(iter(res)))


def connect(cfg: C.ServerConfig):
    """Probe the server (models, /metrics) and keep the answer (or the error) for this session."""
    try:
        value = probe(cfg)
    except C.ServingError as exc:
        value = exc
    _store(cfg, "probe", (), value)
    return value


def _busy_lock(url: str) -> threading.Lock:
    with _BUSY_LOCK:
        return _BUSY.setdefault(url, threading.Lock())


def run(cfg: C.ServerConfig, what: str, settings: tuple, label: str, fn):
    """Run ``fn(progress, cancel)`` with a progress bar; keep and return its record, or the ServingError it raised.

    If Streamlit stops this script (the person left, pressed Cancel or changed a widget), the exception passes
    through ``progress`` and the finally sets ``cancel``, which closes the requests still streaming."""
    lock = _busy_lock(cfg.base_url)
    if not lock.acquire(blocking=False):
        err = C.ServingError("Another session is measuring this server right now; try again when it is done "
                             "(two sweeps at once would distort each other's numbers).")
        return err
    cancel = threading.Event()
    bar = st.progress(0.0, text=label)
    try:
        def progress(frac, msg):
            bar.progress(min(max(float(frac), 0.0), 1.0), text=f"{label}: {msg}")

        try:
            value = fn(progress, cancel)
        except C.ServingError as exc:
            value = exc
        _store(cfg, what, settings, value)
        return value
    finally:
        cancel.set()
        lock.release()
        bar.empty()


def single(cfg, prompt: str, new_tokens: int):
    return run(cfg, "single", (prompt, new_tokens), "One request",
               lambda p, c: (p(0.1, "streaming"), Me.measure_request(cfg, prompt, new_tokens, cancel=c))[1])


def next_token(cfg, prompt: str, k: int):
    return run(cfg, "next", (prompt, k), "Next-token distribution",
               lambda p, c: (p(0.1, "asking for one token"), Me.next_token(cfg, prompt, k))[1])


def prompt_sweep(cfg, lengths: tuple, new_tokens: int, repeats: int):
    return run(cfg, "prompt_sweep", (lengths, new_tokens, repeats), "Prompt-length sweep",
               lambda p, c: Me.prompt_sweep(cfg, lengths, new_tokens, repeats, progress=p, cancel=c))


def concurrency_sweep(cfg, levels: tuple, new_tokens: int, prompt_tokens: int):
    return run(cfg, "concurrency", (levels, new_tokens, prompt_tokens), "Concurrency sweep",
               lambda p, c: Me.concurrency_sweep(cfg, levels, new_tokens, prompt_tokens, progress=p, cancel=c))


def shown(result):
    """A stored result made ready to draw: a server error is shown as an error box (None returned), and a
    measurement's own warnings (implausible numbers) are shown above it before it is returned."""
    if isinstance(result, C.ServingError):
        st.error(f"**{literal(result.kind.capitalize())}.** {literal(result)}", icon=":material/error:")
        return None
    for f in getattr(result, "flags", ()) if result is not None else ():
        st.warning(literal(f), icon=":material/warning:")
    return result
