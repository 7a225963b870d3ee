"""The Streamlit side of the engine worker: a script thread submits a job, waits in short polls, draws the
progress events the job posts, and lets Streamlit stop the run between polls.

Streamlit stops a script run by raising StopException / RerunException at its yield points; ``ctx.yield_check``
(Streamlit 1.67, ScriptRunContext) is that check without drawing anything. It fires when the session's tab is
closed (``disconnect_session`` -> ``request_script_stop``), on a rerun (a newer click), and when the page is left.
The waiter then detaches from the job; a job with no waiter left is cancelled by the worker within one forward
pass (after a short grace in which a rerun with the same inputs re-attaches to it instead of starting again).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import sys
import threading
from typing import Any, Callable

import numpy as np

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from engine.jobs import worker
from engine.jobs import job as jobs
from engine.jobs.job import Job
from engine.jobs.kinds import JobKind
from engine.core.cancel import Cancelled
from engine.core.loaded import LoadedModel, ModelRef
from engine.settings import TRUSTED_PROXIES, WARM_SECRET

relay = jobs.relay  # the pages draw a job's progress events through work.relay
POLL_S = 0.05


def _plain(v: Any) -> Any:
    """A value for a job's key: models by their reference, arrays and tensors by a hash of their bytes (numpy's repr of a
    49k-value array is a few numbers and "...": two different logits vectors had one key), callbacks by their tag,
    the rest by value (or repr)."""
    if isinstance(v, LoadedModel):
        return ("model", v.ref)
    if isinstance(v, ModelRef):
        return v
    torch = sys.modules.get("torch")  # a tensor can only be here if torch is loaded: never import it for this
    if torch is not None and isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        return ("tensor", str(t.dtype), tuple(t.shape), hashlib.sha1(t.reshape(-1).view(torch.uint8).numpy()).hexdigest())
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, hashlib.sha1(np.ascontiguousarray(v)).hexdigest())
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


def request_key(kind: JobKind, request: Any) -> tuple:
    """A typed request's key: its kind's name and its fields' plain values (a model by its ModelRef)."""
    return ("ask", kind.name, _plain({f.name: getattr(request, f.name) for f in dataclasses.fields(request)}))


WARM_HEADER = "X-ILE-Warm-Up"  # sent by scripts/warm.py's session (the start's warm-up run)


def is_warm_up() -> bool:
    """Is this session the start's warm-up (scripts/warm.py)? Its work is nobody's request: it runs alone and the
    class view leaves it out. The header must carry this start's secret (``ILE_WARM_SECRET``, made by
    scripts/start.sh): a header anyone could send let a script's jobs skip the seats and hide from the class view."""
    secret = WARM_SECRET.get()
    if not secret:
        return False
    try:
        given = st.context.headers.get(WARM_HEADER) or ""
    except Exception:  # no session (a test calling in), or another Streamlit
        return False
    return hmac.compare_digest(given.encode(), secret.encode())


def session_id() -> str | None:
    ctx = get_script_run_ctx(suppress_warning=True)
    return None if ctx is None else ctx.session_id


THIS_MACHINE = "this machine"  # the client of every tab opened on the server's own machine (loopback)


def client_address() -> str:
    """The computer this session's browser connects from (Streamlit's st.context.ip_address; None on the loopback,
    i.e. every tab of the server's own machine, which is one client). The worker bounds what one client may hold
    of the engine (engine/jobs/seats.py).

    Who may name another computer: only a proxy the teacher names (``ILE_TRUSTED_PROXIES``, which scripts/start.sh
    hands to the web server as ``FORWARDED_ALLOW_IPS``). With none named, an ``X-Forwarded-For`` header decides
    nothing: the web server's own default trusts it from this machine, so a peer taken from the header means the
    real peer was this machine. Forging can then only merge a tab into another client, never split one computer
    into many (34 forged addresses had taken 23 long rows instead of 3)."""
    try:
        peer = st.context.ip_address
    except Exception:  # outside a session (a test calling run() directly)
        return THIS_MACHINE
    try:
        forwarded = st.context.headers.get("X-Forwarded-For") or ""
    except Exception:  # no headers to read: nothing forwarded
        forwarded = ""
    if forwarded and not TRUSTED_PROXIES.get() and peer in {h.strip() for h in forwarded.split(",")}:
        return THIS_MACHINE
    return peer or THIS_MACHINE


SHOW_QUEUE_AFTER_S = 0.4  # a wait shorter than this draws nothing
SAY_WAITED_S = 1.0  # a job that ran alone after waiting longer says so


@contextlib.contextmanager
def _unrecorded():
    """Draw without st.cache_data recording it: the queue message is about this run only, and a cached function
    that waits (ui/runs.trace_for) must not replay it on later hits."""
    try:
        from streamlit.runtime.caching.cached_message_replay import in_cached_function
    except ImportError:  # another Streamlit: draw nothing rather than risk a replay error
        yield False
        return
    token = in_cached_function.set(False)
    try:
        yield True
    finally:
        in_cached_function.reset(token)


def _running_words(running: dict, batch: int) -> str:
    if not running:
        return "nothing (starting)"
    parts = []
    for kind, n in running.items():
        if kind == "answer":
            parts.append(f"a batch of {batch} answer{'s' if batch != 1 else ''}" if batch else "an answer")
        else:
            # the passes a page asks for take turns (engine/jobs/worker.py); anything else is a timed experiment
            turns = kind in ("analysis", "block_walk")
            parts.append(f"someone's {kind.replace('_', ' ')}" + ("" if turns else " (a timed experiment runs alone)"))
    return ", ".join(parts)


def why_words(why: dict | None) -> str:
    """Why a request waits (engine.jobs.worker.Worker.place's ``why``: an engine/jobs/seats.py reason), in words."""
    if not why:
        return ""
    r = why.get("reason")
    if r == "full":
        return f"the batch is full ({why['seats']} answers at once); yours joins as soon as one ends"
    if r == "session":
        return "this tab's previous answer is still being written (one at a time per tab)"
    if r == "long":
        return (f"long requests (a long prompt or many new tokens) wait for one of the "
                f"{why['seats'] - why['kept']} seats not kept for short questions")
    if r == "client_long":
        n = why["limit"]
        return (f"your computer already has {n} long request{'s' if n != 1 else ''} being answered, the most one "
                "computer may have at once")
    if r == "share":
        return "your computer already has its share of the batch while other computers wait"
    return ""


def queue_message(place: dict, waited: float) -> str:
    """'Waiting for the engine: 3rd of 5 in the queue; running now: a batch of 7 answers; why: ... (12 s so far).'"""
    why = why_words(place.get("why"))
    return (f"Waiting for the engine (shared by everyone on this server): place {place['place']} of "
            f"{place['queued']} in the queue; running now: {_running_words(place['running'], place['batch'])}"
            + (f"; why: {why}" if why else "") + f" ({waited:.0f} s so far).")


def run(fn: Callable, *args, key: Any = None, events: dict[str, Callable] | None = None,
        on: worker.Worker | None = None, on_poll: Callable[[], None] | None = None, **kwargs):
    """Run ``fn(*args, **kwargs)`` on the engine worker (or on ``on``, e.g. ``worker.get_net_worker()`` for
    network work) alone and return its result; ``events`` maps a relay tag (``relay("step")`` passed as a
    callback) to a function drawn here, on the script thread, for each event.
    ``on_poll``: called on the script thread at every poll while the job runs (e.g. a clock in a long warm-up).

    While the job waits its turn, a line says its place in the queue and what runs now (kinds only, never
    another person's prompt); a job that ran alone after waiting says how long it waited."""
    ctx = get_script_run_ctx(suppress_warning=True)
    pool = on or worker.get_worker()
    job = pool.submit(fn, *args, key=job_key(fn, args, kwargs) if key is None else key,
                      session=None if ctx is None else ctx.session_id,
                      client=client_address() if ctx is not None else None, warmup=is_warm_up(), **kwargs)
    return _wait(job, pool, ctx, events, on_poll)


def ask(kind: JobKind, request: Any, key: Any = None, events: dict[str, Callable] | None = None,
        on_poll: Callable[[], None] | None = None):
    """Ask the engine worker for a typed ``request`` of ``kind`` (engine/jobs/kinds.py) and return its result:
    served in a batch with other sessions' requests of its group where the kind batches, else alone. ``events``
    and ``on_poll`` as for ``run`` (an ``AnswerRequest`` with ``stream=True`` posts its "step" events)."""
    ctx = get_script_run_ctx(suppress_warning=True)
    pool = worker.get_worker()
    job = pool.ask(kind, request, key=request_key(kind, request) if key is None else key,
                   session=None if ctx is None else ctx.session_id,
                   client=client_address() if ctx is not None else None, warmup=is_warm_up())
    return _wait(job, pool, ctx, events, on_poll)


def _wait(job: Job, pool: worker.Worker, ctx, events: dict[str, Callable] | None,
          on_poll: Callable[[], None] | None):
    """Wait for ``job`` in short polls, drawing its events and its place in the queue; its result, or the run
    stops (a cancelled job says so)."""
    drawn = 0  # events drawn so far (a job joined by another session has one list of events for both)
    slot = None
    said = None  # the queue line last drawn: redrawn only when its words change (once a second at most), not
    # every poll, so that 20 waiting tabs are not sent 20 updates a second each to draw

    def drain():
        nonlocal drawn
        new = job.events(drawn)
        drawn += len(new)
        for tag, ev_args in new:
            if events and tag in events:
                events[tag](*ev_args)

    def show_place():
        nonlocal slot, said
        if ctx is None or job.started_at is not None or job.waited_s < SHOW_QUEUE_AFTER_S:
            if slot is not None and job.started_at is not None and said is not None:
                with _unrecorded():
                    slot.empty()
                said = None
            return
        line = queue_message(pool.place(job), job.waited_s)
        if line == said:
            return
        with _unrecorded() as ok:
            if not ok:
                return
            if slot is None:
                slot = st.empty()
            slot.caption(line)
            said = line

    try:
        while not job.wait(POLL_S):
            drain()
            show_place()
            if on_poll is not None:
                on_poll()
            if ctx is not None:
                ctx.yield_check()  # raises StopException / RerunException when this run should end
        drain()
        value = job.result()
        if slot is not None:
            with _unrecorded():
                if job.spec is None and job.waited_s >= SAY_WAITED_S:  # a plain job: a timed experiment
                    slot.caption(f"This waited {job.waited_s:.0f} s for the engine (other sessions' work ran "
                                 "first), then ran alone: any time it measured is its own.")
                else:
                    slot.empty()
        return value
    except Cancelled:
        st.info("This run was replaced by a newer request, or cancelled. Run it again if you still need it.",
                icon=":material/cancel:")
        st.stop()
    except BaseException:
        if not job.done:
            job.detach()
        raise


def wait_for_event(event: threading.Event) -> None:
    """Wait on the script thread until ``event`` is set, in short polls that let Streamlit stop the run (a closed
    tab, a newer click) as ``run`` does."""
    ctx = get_script_run_ctx(suppress_warning=True)
    while not event.wait(POLL_S):
        if ctx is not None:
            ctx.yield_check()


def stats() -> dict:
    return worker.get_worker().stats()
