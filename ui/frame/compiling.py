"""Compiled mode's compiles, as a person sees them: each graph compiles in the background (engine.core.
background_compile), never on the engine's worker, so neither this page nor anyone else's waits for it.

- A page that draws the sidebar's run (``warm_for_run``): its decode graph, then its prompt's prefill bucket
  (engine.core.prefill_buckets), then the class batcher's step where the batcher serves the answer, compile while
  the page answers eager; a box says what compiles (the graph, torch's
  phase, the time so far against the last time, graphs done and to do) and the page runs again, compiled, when
  they are ready. ui.frame.models routes a model's runs eager while one of its graphs compiles.
- The race (``warm_race``) and the prompt-length sweep (``wait_for_graphs``): their graphs must be compiled before
  their clocks start, so the page waits for them, in a box with a clock; the engine serves everyone else
  meanwhile.
- Cancel stops the compile (its thread stops at its next step) and puts this session back in eager mode. On a class
  server the room's mode is the teacher's, and so is the button.
"""
from __future__ import annotations

import streamlit as st

from engine.core.background_compile import COMPILER, CompileJob, CompileState
from engine.core.batch import page_graphs
from engine.core.compile_watch import compile_prefill, compile_warm_up
from engine.core.compiled import DEFAULT_MODE, announce, compile_status, graph_of, shaped_of
from engine.core.compile_record import cache_length, decode_name, verify_name
from engine.core.prefill_buckets import bucket_graphs
from engine.core.loaded import LoadedModel, ModelRef
from engine.core.prompt import PromptError, encode_prompt
from engine.jobs import worker
from engine.jobs.classbatch import group
from ui.frame import state
from ui.frame.html import md_escape

_WAITING = "compile_waiting_for"  # (model ref, graph name): the page runs again, compiled, when it is ready
_FRACTION = "compile_fraction"  # the bar's last fraction: it never goes back

# How far along a compile is, by what it last said: loop.warm_up's steps, and within step 1 torch's own compile
# phases (engine.core.compile_watch's phrases). Used only when no earlier time is on record.
_PHASES = (("Prefill", 0.03), ("Step 1", 0.05), ("tracing", 0.08), ("graph traced", 0.25), ("the compiler", 0.3),
           ("inductor", 0.35), ("kernels built", 0.8), ("graph compiled", 0.85), ("Step 2", 0.9), ("Step 3", 0.95))


def compile_progress_text(step: str, phase: str, seconds: float, last: float | None) -> str:
    """The compile box's progress line: the warm-up's step, torch's phase within it, the time so far against the
    last time of the same graph, model, precision and device."""
    against = f"last time {last:.0f} s" if last else "no earlier time on record for this model and cache length"
    return " · ".join(x for x in (step, phase, f"{seconds:.0f} s so far ({against})") if x)


def compile_fraction(said: str, seconds: float, last: float | None, before: float) -> float:
    """The bar's fraction: time against the last time when there is one (capped below 1: this one may be slower),
    else the phase's place; never going back."""
    if last:
        guess = min(0.97, seconds / last)
    else:
        guess = next((f for p, f in _PHASES if said.startswith(p) or p in said), before)
    return max(before, guess)


def may_cancel() -> bool:
    from ui.frame.models import mode_is_the_teachers

    return not mode_is_the_teachers()


def cancel_compile() -> None:
    """The box's button: the compile stops, and this session runs eager."""
    from ui.frame.models import get_model, ref_for

    s = state.settings()
    if s.mode != DEFAULT_MODE:
        COMPILER.cancel(get_model(ref_for(s.model, s.precision, s.mode)).ref)
    state.set_value("mode", DEFAULT_MODE)
    st.session_state.pop(_WAITING, None)
    st.session_state["model_error"] = "Compiling cancelled: it stopped, and eager runs."


def _graphs_line(lm_ref: ModelRef, job: CompileJob) -> str:
    done = [j for j in COMPILER.jobs(lm_ref) if j.state is CompileState.READY]
    queued = [j for j in COMPILER.jobs(lm_ref) if j.active and j is not job]
    line = f"Graphs compiled in this server: {len(done)}"
    if done:
        line += " (" + "; ".join(f"{j.name} in {j.seconds or 0:.0f} s" for j in done[-3:]) + ")"
    return line + f". To do after this one: {len(queued)}."


def _cancel_button(key: str) -> None:
    if may_cancel():
        st.button("Cancel: stop compiling, run eager", key=key, on_click=cancel_compile, icon=":material/cancel:")


def _job_box(job: CompileJob) -> None:
    """The lines of a compile that runs or waits: what it is, how far, the graphs done and to do."""
    frac = compile_fraction(job.phase or job.step, job.so_far(), job.last_s, st.session_state.get(_FRACTION, 0.0))
    st.session_state[_FRACTION] = frac
    text = ("Waiting for the compile before it" if job.state is CompileState.QUEUED
            else compile_progress_text(job.step, job.phase, job.so_far(), job.last_s))
    st.progress(frac, text=md_escape(text))
    st.caption(md_escape(_graphs_line(job.ref, job)) + " Compiled kernels are kept on disk: the next start compiles "
               "faster (tens of seconds instead of minutes on a 2-core CPU).")


@st.fragment(run_every=2.0)
def _background_box(ref: ModelRef, names: tuple[str, ...]) -> None:
    jobs = [j for n in names for j in COMPILER.jobs(ref) if j.name == n]
    if not jobs:
        return
    ended = next((j for j in jobs if j.state in (CompileState.FAILED, CompileState.CANCELLED)), None)
    if ended is not None:
        st.session_state.pop(_WAITING, None)
        st.warning(md_escape(f"Compiled mode: {ended.line()}. Eager runs."), icon=":material/warning:")
        return
    job = next((j for j in jobs if j.active), None)
    if job is None:
        if st.session_state.pop(_WAITING, None) == (ref, names):
            st.rerun()  # the whole page again: its run is compiled now
        st.success(md_escape(f"Compiled: the {'; the '.join(j.name for j in jobs)} "
                             f"{'is' if len(jobs) == 1 else 'are'} ready ({sum(j.so_far() for j in jobs):.0f} s). ")
                   + "Runs from now on are compiled.", icon=":material/check_circle:")
        return
    with st.container(border=True):
        st.markdown(f":material/hourglass_top: **Compiled mode: compiling the {md_escape(job.name)} in the "
                    "background.** This page answers eager meanwhile (its numbers say eager) and runs again, "
                    "compiled, when its graphs are ready; nobody else waits for them.")
        _job_box(job)
        _cancel_button("compile_cancel")


def warm_for_run(page: str = "loop") -> None:
    """Compiled mode, before a page that draws the sidebar's run (ui.frame.nav.SIDEBAR_RUN): the decode graph for
    that run (prompt + max new tokens), the class batcher's step where it serves the answer, and the prompt's prefill
    bucket where the run uses it (engine.core.background_compile.page_graphs) compile in the background, shown in a
    box that refreshes itself, with a button that cancels them. A compile that failed leaves one line, and eager
    runs."""
    from ui.frame.models import compiled_model
    from ui.frame.nav import ALONE_RUN, SIDEBAR_RUN

    s = state.settings()
    if s.mode == DEFAULT_MODE or (page or "loop") not in SIDEBAR_RUN:
        return
    lm = compiled_model()
    graph = graph_of(lm) if lm is not None else None
    if graph is None or graph.failure:
        return
    try:
        n = len(encode_prompt(lm.tokenizer, s.prompt, s.chat).ids)
    except PromptError:
        return  # the page says what is wrong with the prompt
    batched = worker.get_worker().batching and group(lm) is not None  # the class batcher serves the answer
    graphs = page_graphs(lm, n, n + int(s.max_new_tokens), batched, alone=(page or "loop") in ALONE_RUN)
    if not graphs:
        return
    announce(lm, [name for name, fn, _ in graphs if fn is not compile_warm_up])  # shaped graphs: to do
    jobs = [COMPILER.submit(lm, name, fn, *args) for name, fn, args in graphs]
    names = tuple(j.name for j in jobs)
    if any(j.active for j in jobs):
        st.session_state[_WAITING] = (lm.ref, names)
    st.space(28)  # below Streamlit's header bar, where a page's title starts
    _background_box(lm.ref, names)


def warm_race(lm: LoadedModel, tokens: int, k: int, prompt_tokens: int = 0) -> None:
    """Compiled mode, before the race is measured: the plain lane's decode step (a run of ``tokens`` tokens), the
    verify pass of k + 1 tokens and the prompt's prefill bucket on each lane's static cache compile in the
    background, and this page waits for them (``wait_for_graphs``)."""
    from engine.speculative.decoding import warm_verify

    graph = graph_of(lm)
    if graph is None or graph.failure:
        return
    length = cache_length(tokens + k + 1, graph.max_positions)
    if length is None:
        return
    shaped = shaped_of(lm)
    steps = []
    if not graph.ready(tokens):
        steps.append((decode_name(cache_length(tokens, graph.max_positions)), compile_warm_up, (lm, tokens)))
    if shaped is not None and not shaped.ready(verify_name(k + 1, length)):
        steps.append((verify_name(k + 1, length), warm_verify, (lm, tokens + k + 1, k + 1)))
    if prompt_tokens:  # the plain lane's cache holds its run, the speculative lane's its last padded verify pass too
        steps += [(name, compile_prefill, (lm, prompt_tokens, t))
                  for name, t in bucket_graphs(lm, prompt_tokens, (tokens, tokens + k + 1))]
    wait_for_graphs(lm, steps, "the race")


def wait_for_graphs(lm: LoadedModel, steps: list[tuple], before: str) -> bool:
    """Compiled mode, before a measurement whose clocks must not hold a compile (``before``: "the race", "the
    sweep"): its graphs, (name, fn, args) each, compile in the background and this page waits for them, in a box
    each with its last time and a clock; the engine serves everyone else meanwhile. Returns whether all are ready;
    a compile that fails or is cancelled is one line, and the measurement runs eager where it must."""
    announce(lm, [name for name, fn, _ in steps if fn is not compile_warm_up])  # the shaped passes' graphs: to do
    jobs = [COMPILER.submit(lm, name, fn, *args) for name, fn, args in steps]
    for i, job in enumerate(jobs):
        with st.status(f"Compiled mode: compiling the {job.name} ({i + 1} of {len(jobs)}) before {before}...",
                       expanded=True) as box:
            st.caption(f"In the background: the engine goes on serving everyone else; {before}'s clocks start when "
                       "its graphs are ready.")
            st.session_state[_FRACTION] = 0.0
            _cancel_button(f"compile_cancel_{before.split()[-1]}_{i}")
            slot = st.empty()
            while not job.done.wait(1.0):
                with slot.container():
                    _job_box(job)
            slot.empty()
            status = compile_status(lm)
            if job.state is not CompileState.READY or (status is not None and status.failure):
                box.update(label="Compiled mode could not compile this graph: eager runs there", state="error")
                st.error(md_escape(f"Compiled mode: {job.line()}."), icon=":material/error:")
                return False
            box.update(label=f"Compiled: the {job.name} is ready ({job.so_far():.0f} s)", state="complete",
                       expanded=False)
    return True
