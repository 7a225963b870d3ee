"""An unexpected error in a page: a short message for the person, the traceback for the server log.

Streamlit's own error box is switched off for served use (.streamlit/config.toml: client.showErrorDetails =
"none"): its traceback shows server paths and code. This is the short message a page shows instead."""
from __future__ import annotations

import logging
import contextlib
import secrets
import traceback

import streamlit as st

from engine.core.prompt import PromptError

logger = logging.getLogger(__name__)



@contextlib.contextmanager
def shown_briefly():
    """Run the block; an exception in it is logged with a reference and shown as one short line. Streamlit's
    stop and rerun signals derive from BaseException, not Exception, so they pass through."""
    try:
        yield
    except Exception:  # noqa: BLE001 - anything the page did not expect
        ref = secrets.token_hex(3)
        logger.error(f"error {ref} while running a page:\n{traceback.format_exc()}", extra={"channel": "app"})
        st.error(f"Something went wrong on this page (reference {ref}); the details are in the server log. Try "
                 "other settings, or reload the page.", icon=":material/error:")


def fragment(fn=None, **kw):
    """``st.fragment`` whose body runs inside ``shown_briefly``: an error in it is the app's one short line only.
    (An exception that leaves a fragment is also drawn by Streamlit as its own redacted error box.)"""
    import functools

    def wrap(f):
        @functools.wraps(f)
        def body(*args, **kwargs):
            with shown_briefly():
                return f(*args, **kwargs)
        return st.fragment(body, **kw)

    return wrap(fn) if fn is not None else wrap


@contextlib.contextmanager
def prompt_refused():
    """Run the block; a prompt the model cannot take (engine.core.prompt.PromptError: empty, too long for it) is
    said in its own one line, and the page stops there."""
    try:
        yield
    except PromptError as exc:
        st.warning(str(exc), icon=":material/edit_note:")
        st.stop()
