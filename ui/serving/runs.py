"""Connection settings and measured runs for the serving page (the only serving code touching st.session_state
and query params).

Open mode: the base URL and model name go into the share link. Class mode (engine.serving.servers): the person
picks one of the servers the teacher listed, by label; only the label reaches the page and the link, never the
address. The API key never reaches the URL (it lives in this session only, is not shown back, and is not logged).

Every request runs as a job on the network worker (engine.jobs.worker.get_net_worker, through ui.frame.work.run): the
script thread only waits and draws progress. When the tab closes, the person clicks something newer or presses
Cancel, the waiter detaches and the worker cancels the job; the client's sockets see the cancel within a
fraction of a second and close. One sweep per server at a time across all sessions (other sessions' requests
would distort the numbers and pile load on the server).
"""
from __future__ import annotations

import threading
import time

import streamlit as st

from engine.jobs import worker
from engine.jobs.job import cancel_event, relay
from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import concurrency as Co
from engine.serving import measure as Me
from engine.serving.probe import probe
from engine.serving.servers import ServerPolicy, server_policy_from_env
from engine.store import BoundedStore
from ui.frame import kept, state, work
from ui.frame.html import md_escape

DEFAULT_URL = "http://127.0.0.1:8000"
_CONN = "serving_conn"
# server address -> its lock. Bounded: in open mode every typed address adds one. A lock dropped while held only
# lets a measurement of that server start beside the running one after 64 other servers were measured since.
_BUSY: BoundedStore[str, threading.Lock] = BoundedStore("serving locks", 64)


def policy() -> ServerPolicy:
    """Open mode, or class mode with the teacher's list of servers (ILE_SERVERS; see engine.serving.servers)."""
    return server_policy_from_env(server_address=st.get_option("server.address"))


def connection() -> dict:
    """{server, model, api, api_key}: ``server`` is an address (open mode) or a listed label (class mode); the
    first run of a session takes it and the model from the share link."""
    if _CONN not in st.session_state:
        q = st.query_params
        pol = policy()
        if pol.class_mode:
            server = str(q.get("serve", ""))[:100]
            if server not in pol.labels:  # a link naming no listed server: the first listed one, no error
                server = pol.labels[0] if pol.labels else ""
        else:
            server = str(q.get("serve_url", DEFAULT_URL))[:500]
        st.session_state[_CONN] = {"server": server, "model": str(q.get("serve_model", ""))[:300],
                                   "api": "completions", "api_key": ""}
    return st.session_state[_CONN]


def share(conn: dict) -> None:
    """Put the server (its label in class mode, else its URL if valid) and model, never the key, into this run's
    page parameters."""
    try:
        cfg = config(conn)
    except E.BadURL:
        return
    params = {"serve": cfg.label} if cfg.label else {"serve_url": cfg.base_url}
    if conn["model"]:
        params["serve_model"] = conn["model"]
    state.put_page_params(**params)


def config(conn: dict) -> K.ServerConfig:
    """Raises BadURL (or ServerNotListed, in class mode) with a readable message."""
    return policy().config(conn["server"], conn["model"], conn["api_key"], api=conn["api"])


def _key(cfg: K.ServerConfig) -> tuple:
    return (cfg.base_url, cfg.model, cfg.api, hash(cfg.api_key))


def results() -> dict:
    """This session's kept serving results: {(server key, what, settings): result}, oldest first."""
    return dict(kept.items("serving"))


def stored(cfg: K.ServerConfig, what: str, settings: tuple = ()):
    return kept.get(("serving", _key(cfg), what, settings))


def _store(cfg, what, settings, value) -> None:
    kept.put(("serving", _key(cfg), what, settings), value)  # the one bounded store of kept results


def connect(cfg: K.ServerConfig):
    """Probe the server (models, /metrics) and keep the answer (or the error) for this session."""
    return run(cfg, "probe", (), "Connecting", lambda p, c: probe(cfg, cancel=c), exclusive=False)


LOCK_WAIT_S = 3.0


def _acquire(lock: threading.Lock, cancel: threading.Event, wait_s: float) -> bool:
    end = time.monotonic() + wait_s
    while not lock.acquire(timeout=0.1):
        if cancel.is_set() or time.monotonic() > end:
            return False
    return True


def _busy_lock(url: str) -> threading.Lock:
    return _BUSY.get_or_put(url, threading.Lock)


def _job(cfg: K.ServerConfig, fn, exclusive: bool):
    """On the network worker: ``fn(progress, cancel)``'s record, or the ServingError it raised (kept, shown)."""
    lock = _busy_lock(cfg.base_url) if exclusive else None
    cancel = cancel_event()
    # a job this session just replaced (a newer click) lets go within about a second: wait that long for it
    if lock is not None and not _acquire(lock, cancel, LOCK_WAIT_S):
        return E.ServingError("Another measurement of this server is running (another session's, or one still "
                              "stopping); try again when it is done (two at once would distort each other's numbers).")
    try:
        return fn(relay("progress"), cancel)
    except E.ServingError as exc:
        return exc
    finally:
        if lock is not None:
            lock.release()


def run(cfg: K.ServerConfig, what: str, settings: tuple, label: str, fn, exclusive: bool = True):
    """Run ``fn(progress, cancel)`` on the network worker with a progress bar; keep and return its record, or
    the ServingError it raised. If Streamlit stops this script (the tab closed, Cancel, a newer click), the
    exception passes through ``work.run``, which detaches from the job; the worker then cancels it."""
    bar = st.progress(0.0, text=label)

    def progress(frac, msg):
        bar.progress(min(max(float(frac), 0.0), 1.0), text=f"{label}: {msg}")

    try:
        value = work.run(_job, cfg, fn, exclusive, key=("serving", what, _key(cfg), settings),
                         events={"progress": progress}, on=worker.get_net_worker())
    finally:
        bar.empty()
    _store(cfg, what, settings, value)
    return value


def single(cfg, prompt: str, new_tokens: int):
    return run(cfg, "single", (prompt, new_tokens), "One request",
               lambda p, c: (p(0.1, "streaming"), Me.measure_request(cfg, prompt, new_tokens, cancel=c))[1])


def next_token(cfg, prompt: str, k: int):
    return run(cfg, "next", (prompt, k), "Next-token distribution",
               lambda p, c: (p(0.1, "asking for one token"), Me.next_token(cfg, prompt, k, cancel=c))[1])


def prompt_sweep(cfg, lengths: tuple, new_tokens: int, repeats: int):
    return run(cfg, "prompt_sweep", (lengths, new_tokens, repeats), "Prompt-length sweep",
               lambda p, c: Me.prompt_sweep(cfg, lengths, new_tokens, repeats, progress=p, cancel=c))


def concurrency_sweep(cfg, levels: tuple, new_tokens: int, prompt_tokens: int):
    return run(cfg, "concurrency", (levels, new_tokens, prompt_tokens), "Concurrency sweep",
               lambda p, c: Co.concurrency_sweep(cfg, levels, new_tokens, prompt_tokens, progress=p, cancel=c))


def shown(result):
    """A stored result made ready to draw: a server error is shown as an error box (None returned), and a
    measurement's own warnings (implausible numbers) are shown above it before it is returned."""
    if isinstance(result, E.ServingError):
        st.error(f"**{md_escape(result.kind.capitalize())}.** {md_escape(result)}", icon=":material/error:")
        return None
    for f in getattr(result, "flags", ()) if result is not None else ():
        st.warning(md_escape(f), icon=":material/warning:")
    return result
