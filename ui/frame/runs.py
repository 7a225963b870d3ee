"""Runs of the model, kept per their plain inputs so nothing recomputes when its inputs did not change.

The sidebar's run is two parts, kept apart: the generation (prefill + decode loop: it depends on every setting)
and the prompt's untimed analysis (attention weights, predictions at every position, residual stream: it
depends on the prompt alone). A sampling nudge therefore reruns only the generation, and shows its progress
token by token; at temperature 0 top-k, top-p and the seed cannot change a single token, so changing them reuses
the kept run.

Both parts are served in batches with other sessions' requests for the same model (engine/jobs/classbatch.py): the
generation joins the running batch (its Trace says when a step was measured in a batch), and prompts' analysis
passes that wait together run as one. A page whose lesson is its step times asks for them measured alone
(``current_trace(alone=True)``).

Whose kept runs a session may reuse (``answer_scope``): for one person, everything kept; on a class server only
its own, so a kept answer never tells a student that someone else asked the same prompt (it would come back at
once, with no progress box), on a class link too; only the teacher's pinned prompt (``pin=prompt``) is shared."""
from __future__ import annotations

import contextlib
from dataclasses import replace

import streamlit as st

from engine.jobs.classbatch import ANSWER, AnswerRequest
from engine.jobs.prompt_passes import ANALYSIS, PromptRequest
from engine.loop.inspect import BLOCK_WALK, BlockWalkRequest
from engine.core.prompt import PromptError
from engine.core.request import RunRequest
from engine.core.trace import PromptAnalysis, Trace, run_trace
from engine.store import BoundedStore
from engine.core.loaded import ModelRef
from ui.frame import state, work
from ui.frame.models import current_model, get_model, policy
from ui.frame.cache import memo
from ui.frame.html import md_escape, visible

MAX_RUNS = 64  # generations kept, all sessions together (as a bounded cache would): a class keeps one per student
_RUNS: BoundedStore[tuple, Trace] = BoundedStore("generations", MAX_RUNS)  # RunRequest.key(scope) -> Trace
SHARED = ""  # the scope of runs everyone may reuse
CLASS_LINK = "class link"  # the scope of the sessions on a pinned class link


def answer_scope() -> str:
    """Whose kept runs this session may reuse: everyone's for one person (open mode); on a class server this
    session's own, on a class link too: a kept answer coming back at once, with no progress box, told a student
    that a classmate had asked that prompt (0.33 s against 8.3 s for one nobody had asked). The room's shared
    prompt (``pin=prompt``) is the one exception: everyone asks it, so sharing it tells nobody anything."""
    if not policy().class_mode:
        return SHARED
    if state.pinned_prompt():
        return CLASS_LINK
    return f"session {work.session_id()}"


def kept(request: RunRequest) -> Trace | None:
    """The kept generation for this request that this session may reuse, or None."""
    return _RUNS.get(request.key(answer_scope()))


def keep(request: RunRequest, trace: Trace) -> None:
    _RUNS.put(request.key(answer_scope()), trace)


def generation_for(request: RunRequest, on_step=None) -> Trace:
    """The timed generation for this request (no analysis), kept; ``on_step(record)`` is called on this thread
    for each token while it runs (not when the run was kept)."""
    tr = kept(request)
    if tr is None:
        run = request.canonical()  # greedy: the default filters and seed 0, as its key says
        answer = AnswerRequest(get_model(run.model), run, analyse=False, stream=on_step is not None)
        tr = work.ask(ANSWER, answer, key=("trace", request.key(answer_scope())),
                      events={"step": on_step} if on_step else None)
        keep(request, tr)
    return tr


def analysis_for(ref: ModelRef, ids: tuple[int, ...]) -> PromptAnalysis:
    """The prompt's untimed analysis pass (one forward pass): the same for every sampling setting."""
    return _analysis(ref, ids, answer_scope())


@memo(24)
def _analysis(ref: ModelRef, ids: tuple[int, ...], scope: str) -> PromptAnalysis:
    lm = get_model(ref)
    return work.ask(ANALYSIS, PromptRequest(lm, tuple(ids)))


def solo_generation_for(request: RunRequest) -> Trace:
    """The same generation, alone on the engine worker (never in a batch): for a page whose lesson is its step
    times (prefill vs decode)."""
    return _solo_generation(request.key(answer_scope()))


@memo(8)
def _solo_generation(key: tuple) -> Trace:
    _, run = key  # RunRequest.key: (scope, the canonical request)
    return work.run(run_trace, get_model(run.model), run.prompt, run.sampling, run.max_new_tokens, run.seed,
                    run.chat, analyse=False)


def trace_for(request: RunRequest, on_step=None) -> Trace:
    """The full trace: the kept (or a new) generation with the prompt's kept (or a new) analysis, labelled with
    exactly this request's settings."""
    tr = generation_for(request, on_step)
    return replace(tr, settings=request.sampling.clamp(), seed=int(request.seed),
                   analysis=analysis_for(request.model, tr.prompt_ids))


def _what(r: RunRequest) -> str:
    """The run about to be computed, in words (for its progress box)."""
    s = r.sampling
    if s.greedy:
        return f"Generating {r.max_new_tokens} token(s), greedy (temperature 0)"
    min_p = f", min-p {s.min_p:g}" if s.min_p > 0 else ""
    return (f"Generating {r.max_new_tokens} token(s) at temperature {s.temperature:g}, top-k {s.top_k}, "
            f"top-p {s.top_p:g}{min_p}, seed {r.seed}: a sampled run with other settings draws other tokens, so the "
            "loop runs again")


@contextlib.contextmanager
def trace_page():
    """``current_trace()``, with the page drawn in one container: ``with trace_page() as tr:``.

    While a new answer is computed, the last answer's page (its charts and tables) leaves the browser at once: an
    empty element takes its container's place, so the tab is not left redrawing a page of faded charts below the
    progress box until the new page arrives. In a class asking together every tab then draws its progress and its
    answer on a page of a few elements, and the full page once the answer is there. A kept run puts a container in
    the same place, which the browser updates in place (its charts are not drawn anew)."""
    if kept(state.settings().run(current_model().ref)) is None:
        place = st.empty()  # another kind of element than the container there: the old page is dropped now
        tr = current_trace()  # its progress below the emptied place
        body = place.container()
    else:
        body = st.container()  # the kind of element that was there: its contents are updated, not replaced
        tr = current_trace()
    with body:
        yield tr


def current_trace(alone: bool = False) -> Trace:
    """The trace for the sidebar's settings, with its progress shown while it is computed (a kept run returns at
    once, with nothing drawn). An unusable prompt shows a message and stops the page.

    ``alone``: a page that teaches from its step times needs them measured alone; when the answer was served in
    a batch with other sessions' requests, its generation is repeated alone (the same tokens)."""
    request = state.settings().run(current_model().ref)
    slot = st.empty()
    try:
        if kept(request) is None:
            with slot.status(_what(request) + "...", expanded=True) as box:
                bar = st.progress(0.0, text="Prefill: reading the prompt in one pass")

                def step(rec) -> None:
                    done = rec.index + 1
                    bar.progress(min(1.0, done / request.max_new_tokens),
                                 text=f"Token {done} of at most {request.max_new_tokens}: "
                                      f"{md_escape(visible(rec.token))} ({rec.seconds * 1000:.0f} ms)")

                gen = generation_for(request, on_step=step)
                # the answer first: with a class asking at once, the analysis and the page's drawing can take
                # longer than the answer did, and a student should not wait for them to read it
                st.markdown(f"**Answer ready:** {md_escape(gen.generated_text.strip()) or '(no text: it stopped at once)'}")
                box.update(label="Answer ready. Reading the prompt's attention and predictions (kept for every "
                                 "sampling setting)...", expanded=True)  # None would fold it: the answer hidden
                tr = trace_for(request)
        else:
            with st.spinner("Reading the prompt's attention and predictions..."):
                tr = trace_for(request)
    except PromptError as exc:
        slot.empty()
        st.warning(str(exc), icon=":material/edit_note:")
        st.stop()
    slot.empty()
    if alone and tr.timed_in_batcher:  # even a batch of one: the padded batch loop is not the solo loop's clock
        with st.spinner("Your answer was served by the class batcher; timing it alone on the plain loop..."):
            solo = solo_generation_for(request)
        tr = replace(solo, settings=tr.settings, seed=tr.seed, analysis=tr.analysis)
    return tr


def block_walk_for(ref: ModelRef, ids: tuple[int, ...], layer: int):
    """The values inside one block for the prompt's last token, in one pass with every other session's walk of
    the same block that waits (engine/loop/inspect.py's ``BLOCK_WALK``)."""
    return _block_walk(ref, ids, layer, answer_scope())


@memo(16)
def _block_walk(ref: ModelRef, ids: tuple[int, ...], layer: int, scope: str):
    return work.ask(BLOCK_WALK, BlockWalkRequest(get_model(ref), tuple(ids), int(layer)))


def last_position_for(ref: ModelRef, ids: tuple[int, ...]):
    """Embedding row, final hidden state and top logits at the last of ``ids`` (one untimed pass, cached)."""
    return _last_position(ref, ids, answer_scope())


@memo(64)
def _last_position(ref: ModelRef, ids: tuple[int, ...], scope: str):
    from engine.loop.glance import last_position

    return work.run(last_position, get_model(ref), list(ids))
