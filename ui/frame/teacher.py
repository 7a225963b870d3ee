"""Who is the teacher, and what the teacher decides for the room.

The teacher is a session whose address carries the class view's token (``/batching?teacher=<token>``): the token is
``ILE_TEACHER_TOKEN`` when set (scripts/start.sh makes a fresh one for each start and prints the link); otherwise
this server process makes one at its first use and prints the link in the server's log. Students never get it.

On a class server the engine mode is the teacher's choice, never a student's: a compile holds the engine for
minutes on a CPU (and each model, precision and cache length is a new one), so a student who typed
``?mode=compiled`` would stall everyone. Every student session runs in the room's mode: ``ILE_CLASS_ENGINE`` at
start, then whatever the teacher's own session picks (kept here, per server process).
"""
from __future__ import annotations

import logging
import secrets
import threading

import streamlit as st

from engine.core.loaded import Mode
from engine.settings import CLASS_ENGINE, TEACHER_TOKEN

logger = logging.getLogger(__name__)

PARAM = "teacher"
_PROVEN = "_teacher_proven"  # session state: this session has shown the token

_LOCK = threading.Lock()
_MADE: str | None = None
_TABS: set[str] = set()  # ids of the sessions that have shown the token: the teacher's own tabs (not students)
_ROOM_MODE: dict[str, Mode] = {}  # "mode" -> the engine mode the teacher picked for the room (unset: CLASS_ENGINE)


def teacher_token() -> str:
    """The token the class view's URL must carry (the environment's, or one made once for this process)."""
    global _MADE
    env = TEACHER_TOKEN.get()
    if env:
        return env
    with _LOCK:
        if _MADE is None:
            _MADE = secrets.token_urlsafe(9)
            logger.info(f"Class view for the teacher (keep this link to yourself): {_server_url()}/batching?"
                f"{PARAM}={_MADE}")
        return _MADE


def _server_url() -> str:
    """This server's root for a link another machine can open (ui/frame/address.py), from its own options."""
    from ui.frame.address import for_others

    return for_others(st.get_option("server.address"), st.get_option("server.port"),
                      st.get_option("server.baseUrlPath") or "").url


def is_teacher() -> bool:
    """Has this session's address carried the teacher's token? Kept for the session once proven: the teacher opens
    the class view, then moves to other pages to demonstrate, and stays the teacher there."""
    try:
        if st.session_state.get(_PROVEN):
            return True
        given = str(st.query_params.get(PARAM, "") or "")
    except Exception:  # no session (a test or the command line calling in): nobody is the teacher
        return False
    proven = bool(given) and secrets.compare_digest(given.encode(), teacher_token().encode())
    if proven:
        st.session_state[_PROVEN] = True
        note_teacher_tab()
    return proven


def note_teacher_tab() -> None:
    """Remember this session as one of the teacher's tabs (it stays one when it moves to another page)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is not None:
        with _LOCK:
            _TABS.add(ctx.session_id)


def teacher_tabs(active: set[str]) -> set[str]:
    """The teacher's own tabs among the ``active`` session ids (a closed tab is forgotten): the class view's count
    of students leaves them out."""
    with _LOCK:
        _TABS.intersection_update(active)
        return set(_TABS)


def room_mode() -> Mode:
    """The engine mode of every student session on a class server."""
    with _LOCK:
        return _ROOM_MODE.get("mode") or CLASS_ENGINE.get()


def set_room_mode(mode: Mode) -> None:
    """The teacher's session picked ``mode`` (its Settings.mode): the room runs in it from the next run of each
    student's page."""
    with _LOCK:
        _ROOM_MODE["mode"] = Mode(mode)
