"""The Streamlit side of the engine worker: a script thread submits a job, waits in short polls, draws the
progress events the job posts, and lets Streamlit stop the run between polls.

Streamlit stops a script run by raising StopException / RerunException at its yield points; ``ctx.yield_check``
(Streamlit 1.67, ScriptRunContext) is that check without drawing anything. It fires when the session's tab is
closed (``disconnect_session`` -> ``request_script_stop``), on a rerun (a newer click), and when the page is left.
The waiter then detaches from the job; a job with no waiter left is cancelled by the worker within one forward
pass (after a short grace in which a rerun with the same inputs re-attaches to it instead of starting again).
"""
from __future__ import annotations

from typing import Any, Callable

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from engine import worker
from engine.models import LoadedModel

POLL_S = 0.05
relay = worker.relay


def _plain(v: Any) -> Any:
    """A value for a job's key: models by name, callbacks by their tag, the rest by value (or repr)."""
    if isinstance(v, LoadedModel):
        return ("model", v.name)
    if isinstance(v, (str, int, float, bool, type(None), bytes)):
        return v
    if isinstance(v, (tuple, list)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), _plain(x)) for k, x in v.items()))
    if callable(v):
        return ("fn", getattr(v, "__qualname__", type(v).__name__))
    return repr(v)[:500]


def job_key(fn: Callable, args: tuple, kwargs: dict) -> tuple:
    return (getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn)), _plain(args), _plain(kwargs))


def session_id() -> str | None:
    ctx = get_script_run_ctx(suppress_warning=True)
    return None if ctx is None else ctx.session_id


def run(fn: Callable, *args, key: Any = None, events: dict[str, Callable] | None = None,
        on: worker.Worker | None = None, **kwargs):
    """Run ``fn(*args, **kwargs)`` on the engine worker (or on ``on``, e.g. ``worker.get_net_worker()`` for
    network work) and return its result; ``events`` maps a relay tag (``relay("step")`` passed as a callback) to
    a function drawn here, on the script thread, for each event."""
    ctx = get_script_run_ctx(suppress_warning=True)
    if key is None:
        key = job_key(fn, args, kwargs)
    pool = on or worker.get_worker()
    job = pool.submit(fn, *args, key=key, session=None if ctx is None else ctx.session_id, **kwargs)

    def drain():
        for tag, ev_args in job.events():
            if events and tag in events:
                events[tag](*ev_args)

    try:
        while not job.wait(POLL_S):
            drain()
            if ctx is not None:
                ctx.yield_check()  # raises StopException / RerunException when this run should end
        drain()
        return job.result()
    except worker.Cancelled:
        st.info("This run was replaced by a newer request, or cancelled. Run it again if you still need it.",
                icon=":material/cancel:")
        st.stop()
    except BaseException:
        if not job.done:
            job.detach()
        raise


def stats() -> dict:
    return worker.get_worker().stats()
