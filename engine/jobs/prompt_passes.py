"""Untimed passes over many prompts at once, on the worker: the prompts' analysis (``ANALYSIS``: a ``PromptRequest``
each, one ``PromptAnalysis`` back) and the runner it shares with the block walk's kind (engine/loop/inspect.py):
``prompt_passes``. Every job of a group already waiting joins one right-padded pass, in chunks of at most
``ANALYSIS_CHUNK_TOKENS`` padded positions; a closed tab's prompt is dropped before its pass. The class batcher
(engine/jobs/classbatch.py) runs its finished answers' analysis in the same chunks."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from engine.core.cancel import Cancelled
from engine.core.loaded import LoadedModel
from engine.core.trace import PromptAnalysis, analyse_prompt, analyse_prompts
from engine.jobs.kinds import BatchHost, JobKind, JobState

ANALYSIS_CHUNK_TOKENS = 1024  # padded positions per analysis pass (it keeps logits at every position)


def chunks(rows: list, budget: int) -> list[list]:
    """Consecutive groups whose padded size (rows x longest prompt) stays within ``budget`` (one row may
    exceed it alone)."""
    out: list[list] = []
    for r in rows:
        if out and (len(out[-1]) + 1) * max(len(r.ids), *(len(x.ids) for x in out[-1])) <= budget:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def cancelled(job) -> Cancelled:
    """Why a job whose waiter went away ends: it left the batch (engine.core.cancel.Cancelled)."""
    return Cancelled(f"job {job.key!r} cancelled (left the batch)")


class HasPrompt(Protocol):
    """A request ``prompt_passes`` can serve: a model and a prompt's token ids."""

    lm: LoadedModel
    ids: tuple[int, ...]


@dataclass(frozen=True)
class PromptRequest:
    """One prompt's untimed analysis pass."""

    lm: LoadedModel = field(repr=False)
    ids: tuple[int, ...]


def analysis_alone(r: PromptRequest) -> PromptAnalysis:
    return analyse_prompt(r.lm, list(r.ids))


def prompt_passes(phase: str, many: Callable[[HasPrompt, list[list[int]]], list]) -> Callable[[BatchHost, Any], None]:
    """A ``together`` runner for a kind whose requests are one prompt each (``HasPrompt``): the job handed over
    and every job of its group already waiting run as passes over several prompts, in chunks of at most
    ANALYSIS_CHUNK_TOKENS padded positions. ``many(first_request, prompts)`` returns one result per prompt; what
    else it reads of the first request (a block walk's layer) is the same for the whole group (its kind's
    ``group`` says so). Jobs that arrive meanwhile run next. ``phase`` names its passes in the class view."""

    def serve(w: BatchHost, first) -> None:
        pending = [first] + w.admit(first.batch, w.max_batch - 1)  # everyone already waiting joins the first pass
        while pending:
            items = [_Ids(job, tuple(int(i) for i in job.request.ids)) for job in pending]
            for n, chunk in enumerate(chunks(items, ANALYSIS_CHUNK_TOKENS)):
                if n:
                    w.pause()  # between passes, off the clock: other work takes its turn
                chunk = _live(w, chunk)  # a closed tab's prompt is dropped before its pass, not after it
                if not chunk:
                    continue
                start = time.monotonic()
                try:
                    found = many(first.request, [list(c.ids) for c in chunk])
                except Exception as exc:
                    for c in chunk:
                        w.complete(c.job, JobState.FAILED, error=exc)
                    continue
                w.note_step(phase, start, time.monotonic(), len(chunk))
                for c, a in zip(chunk, found):
                    c.job.rows = max(c.job.rows, len(chunk))
                    w.complete(c.job, JobState.DONE, result=a)
            w.pause()
            pending = w.admit(first.batch, w.max_batch)

    return serve


def _live(w: BatchHost, chunk: list) -> list:
    """The items of ``chunk`` whose job still has a waiter; the others are ended as cancelled."""
    out = []
    for c in chunk:
        if c.job.should_stop():
            w.complete(c.job, JobState.CANCELLED, error=cancelled(c.job))
        else:
            out.append(c)
    return out


class _Ids:
    __slots__ = ("job", "ids")

    def __init__(self, job, ids):
        self.job, self.ids = job, ids


ANALYSIS = JobKind("analysis", alone=analysis_alone,
                   together=prompt_passes("analysis", lambda r, prompts: analyse_prompts(r.lm, prompts)),
                   group=lambda r: ("analysis", r.lm.ref, id(r.lm)))
