"""Compiled mode's prefill, by buckets: how a prefill runs, and the warm-up that compiles a bucket's graph.

A prompt of one sequence on a compiled model's static cache runs as the compiled graph of its bucket
(engine.core.compile_record.PREFILL_BUCKETS: padded on the right up to the bucket, the logits kept at the last real
position, the padding's cache positions rolled back) when that graph is compiled, and eager otherwise. A prompt's
length changes with every question, so one graph per length would compile without end; a few buckets are a few
graphs, and causal attention keeps the padding out of every real position.

``prefill_mode`` decides it, once, at the call that runs the prefill (``engine.core.loop.prefill``), and says why
in words a run keeps (``PrefillMode.line``: "compiled, 64-token bucket", "eager (its graph is compiling)"), as a
decode step says whether it ran compiled. A bucket's graph is compiled by ``engine.core.loop.warm_prefill``: in
the app on the background compiler's thread (engine.core.background_compile, ``compile_watch.compile_prefill``),
on the command line before anything is timed; never inside an engine job or a timed pass.

A run's static cache holds at least its prompt's bucket (``run_tokens``), so the bucket's graph fits it: a 300-token
prompt is padded to 1,024 tokens, which the 512 positions of its 300 + 64 tokens would not hold.

The class batcher's newcomers (engine.jobs.classbatch) prefill as ``joiner_mode`` says: eager on a cache the size of
their prompts, or, where that is faster (``bucket_beats_eager``), one by one through their buckets' graphs on a
one-row static cache of their own (``joiner_cache``), their keys and values then copied into the batch's rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable

from engine.core.compiled import graph_of, shaped_of
from engine.core.compile_record import PREFILL_BUCKETS, cache_length, prefill_bucket, prefill_name


class PrefillWhy(Enum):
    """How a prefill ran, and why it ran eager where it did."""

    COMPILED = "compiled"
    EAGER_MODE = "eager"  # an eager model, several rows, or a cache that is not a compiled graph's static cache
    PAST_BUCKETS = "past the largest bucket"
    NO_ROOM = "its padded bucket does not fit the static cache"
    POSITIONS = "its padded bucket is longer than the model's positions"
    COMPILING = "its graph is compiling"
    OTHER_COMPILING = "another graph of this model is compiling"
    NOT_COMPILED = "its graph is not compiled"
    FAILED = "compiled mode could not compile this model's graphs"
    # the class batcher's newcomers (``joiner_mode``)
    CPU = "on a CPU eager prefill is faster than a padded bucket's graph"
    SLICES = "a long prompt, read in slices between the class's decode steps"
    GROUP = "one padded pass with the prompts that arrived with it"


@dataclass(frozen=True)
class PrefillMode:
    why: PrefillWhy
    tokens: int  # the prompt's tokens
    bucket: int | None  # the padded length it runs (or would run) at; None past the largest bucket

    @property
    def compiled(self) -> bool:
        return self.why is PrefillWhy.COMPILED

    @property
    def line(self) -> str:
        """What a run says of its prefill: "compiled, 64-token bucket", "eager (its graph is compiling)"."""
        if self.compiled:
            return f"compiled, {self.bucket}-token bucket"
        if self.why is PrefillWhy.EAGER_MODE:
            return "eager"
        if self.why is PrefillWhy.PAST_BUCKETS:
            return f"eager (past the largest bucket, {PREFILL_BUCKETS[-1]:,} tokens)"
        return f"eager ({self.why.value})"


def prefill_mode(lm, n: int, cache, rows: int = 1) -> PrefillMode:
    """How a prefill of ``rows`` x ``n`` tokens on ``cache`` runs now: as its bucket's compiled graph (compiled mode,
    one row on a static cache of the model's with room for the padded bucket, that bucket's graph compiled, and no
    graph of the model compiling on another thread: engine.core.compiled.DecodeGraph.elsewhere), else eager, and why."""
    n = int(n)
    bucket = prefill_bucket(n)
    graph = graph_of(lm)
    if graph is None or int(rows) != 1:
        return PrefillMode(PrefillWhy.EAGER_MODE, n, bucket)
    shaped = shaped_of(lm)
    if graph.failure or (shaped is not None and shaped.failure):
        return PrefillMode(PrefillWhy.FAILED, n, bucket)
    if shaped is None or not shaped.owns(cache):
        return PrefillMode(PrefillWhy.EAGER_MODE, n, bucket)
    if bucket is None:
        return PrefillMode(PrefillWhy.PAST_BUCKETS, n, None)
    length = cache.layers[0].max_cache_len
    if int(cache.get_seq_length()) + bucket > length:
        return PrefillMode(PrefillWhy.POSITIONS if bucket > graph.max_positions else PrefillWhy.NO_ROOM, n, bucket)
    name = prefill_name(bucket, length)
    if not shaped.ready(name):
        compiling_now = (shaped.current is not None and shaped.current[0] == name) or name in shaped.to_do
        return PrefillMode(PrefillWhy.COMPILING if compiling_now else PrefillWhy.NOT_COMPILED, n, bucket)
    if graph.elsewhere():
        return PrefillMode(PrefillWhy.OTHER_COMPILING, n, bucket)
    return PrefillMode(PrefillWhy.COMPILED, n, bucket)


def run_tokens(lm, n: int, tokens: int) -> int:
    """The tokens the static cache of a run of ``tokens`` tokens (its prompt, ``n`` tokens, and its answer) is made
    for: ``tokens``, or the prompt's bucket where that is longer and within the model's positions, so the bucket's
    graph fits the cache (a 300-token prompt and 64 new tokens need 512 positions; its bucket, 1,024). A bucket
    longer than the model's positions leaves the run eager, and ``prefill_mode`` says its bucket does not fit."""
    graph, bucket = graph_of(lm), prefill_bucket(n)
    if graph is None or bucket is None or bucket > graph.max_positions:
        return int(tokens)
    return max(int(tokens), bucket)


# How the class batcher's newcomers prefill, on each device. On a CPU a prefill is matrix multiplies, which compiling
# does not speed up, and a bucket's padding adds more of them (docs/benchmarks.md: a bucket's graph slower than eager),
# so they prefill eager, on a cache the size of their prompts. On a GPU an eager pass is launch-bound (issue 50: on an
# H200 the time to first token stayed flat from 16 to 4,096 tokens) where a compiled graph replays as one CUDA graph,
# so each newcomer runs alone through its bucket's graph; a few of them one after the other should still cost less
# than one eager pass over all of them, hence JOINER_ROWS: a guess until a GPU measures it. More newcomers at once,
# or a long prompt read in slices, run eager in one padded pass.
JOINER_ROWS = 4


def bucket_beats_eager(lm) -> bool:
    """Is a prefill through a bucket's compiled graph faster than eager on ``lm``'s device (see above)?"""
    graph = graph_of(lm)
    return graph is not None and graph.cuda_graphs


def joiner_cache(lm, n: int, tokens: int):
    """The one-row static cache, emptied, on which a newcomer of the class batch (``n`` prompt tokens, a run of
    ``tokens``) prefills through its bucket's graph: the length the page's run compiles that graph for
    (``run_tokens``), kept apart from the batch's own caches (a batch of one row uses one of that shape). None in eager
    mode or past the longest static cache."""
    shaped = shaped_of(lm)
    length = cache_length(run_tokens(lm, n, tokens), shaped.graph.max_positions) if shaped is not None else None
    return shaped.cache(1, length, role="joiner") if length is not None else None


def joiner_mode(lm, n: int, tokens: int, rows: int, whole: bool) -> PrefillMode:
    """How a newcomer of the class batch prefills: ``n`` prompt tokens of a run of ``tokens``, in a group of ``rows``
    newcomers prefilled together, ``whole`` in one round (else in slices). Its bucket's graph on its ``joiner_cache``
    where that is faster on the device (``bucket_beats_eager``), the group small and read whole, and the graph ready
    (``prefill_mode``); else eager, and why, in the words a run keeps (``PrefillMode.line``)."""
    bucket = prefill_bucket(n)
    if graph_of(lm) is None:
        return PrefillMode(PrefillWhy.EAGER_MODE, int(n), bucket)
    why = (PrefillWhy.CPU if not bucket_beats_eager(lm) else PrefillWhy.SLICES if not whole else
           PrefillWhy.GROUP if int(rows) > JOINER_ROWS else None)
    if why is not None:
        return PrefillMode(why, int(n), bucket)
    cache = joiner_cache(lm, n, tokens)
    if cache is None:
        return PrefillMode(PrefillWhy.PAST_BUCKETS if bucket is None else PrefillWhy.NO_ROOM, int(n), bucket)
    return prefill_mode(lm, n, cache)


def bucket_graphs(lm, n: int, runs: Iterable[int]) -> list[tuple[str, int]]:
    """The bucket graphs a prefill of ``n`` tokens needs and does not have yet, on the static caches of runs of
    ``runs`` tokens each (a run's prompt, answer and any padded verify pass): (graph name, run tokens), each graph
    once, in order. Empty in eager mode, past the largest bucket, or where the bucket does not fit a cache."""
    shaped, bucket = shaped_of(lm), prefill_bucket(n)
    if shaped is None or bucket is None:
        return []
    out: dict[str, int] = {}
    for tokens in runs:
        length = cache_length(tokens, shaped.graph.max_positions)
        if length is not None and bucket <= length:
            name = prefill_name(bucket, length)
            if not shaped.ready(name) and name not in out:
                out[name] = int(tokens)
    return list(out.items())
