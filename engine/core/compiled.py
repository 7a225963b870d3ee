"""The compiled engine mode, beside eager: a static KV cache and ``torch.compile`` around the decode step, the recipe
of gpt-fast's generate.py with transformers' own ``StaticCache``. Eager PyTorch runs a decode step as hundreds of
operators, each dispatched from Python (on a GPU, each one kernel launch); compiled, the step is one graph of fused
kernels, and on CUDA that graph is captured once and replayed as a CUDA graph (``mode="reduce-overhead"``): one
launch per step instead of hundreds.

What the mode serves (``engine.core.loop`` routes a pass here only when all of it holds):
- the decode step, ``[1, 1]`` token ids on a static cache made for it (``loop.new_cache(lm, tokens=...)``), one
  graph per static cache length (``cache_length``: powers of two from ``SHORTEST``, up to the model's positions),
  compiled in ``loop.warm_up`` before anything is timed, never inside a measured step.

What it refuses, in one line each (``refused``), and eager runs instead:
- a model with sliding-window layers: transformers' static sliding-window layer counts positions in a Python int,
  so dynamo recompiles the step at every position (a tiny Gemma 3 hit the recompile limit after 8 steps);
- int8 on a CPU: torch.ao's packed int8 weights are opaque to torch.compile;
- no compiler: dynamo unsupported here, no C++ compiler for the CPU backend, or no Triton for CUDA;
- the stepper and analyses: their caches are the eager loop's, so they run eager.

Shaped passes (``ShapedGraphs``, below): a speculative verify pass (one row, k + 1 tokens, rolled back by moving the
static cache's length: engine.core.static_cache), the class batcher's decode step (rows padded up to a size in
BATCH_SIZES) and a one-sequence prefill (padded to its bucket: engine.core.prefill_buckets) run as graphs of their own, one per shape,
each compiled in a warm-up before anything is timed (``compiling``), its time recorded for the next start.

KV bytes: a static cache holds its whole length from the first step; ``engine.core.kv.kv_bytes`` counts the filled
positions (the formula), ``engine.core.kv.reserved_bytes`` the allocation.

The compiled step runs the model with its projections fused (engine.core.fused: q/k/v one matrix multiply, gate/up
another), a second module tree over the same weights, and so do the shaped passes; every eager pass runs the model
as loaded.

A compiled model is a second ``LoadedModel`` over the same weights (``to_mode``); the shared model object is never
changed. Its reference (engine.core.loaded.ModelRef) says ``mode="compiled"``, so everything kept per model
reference is kept per (model, precision, mode).
"""
from __future__ import annotations

import importlib.util
import shutil
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch

from engine.core.loaded import (DEFAULT_MODE, MODES, LoadedModel, ModelLoadError,  # noqa: F401  (the modes: here too)
                                 Mode)
from engine.core.compile_record import (BATCH_SIZES, COMPILER_THREAD, batch_name, cache_length, decode_name,
                                         expected_line, last_compile_s, prefill_name, record_compile_s, verify_name)
from engine.core.static_cache import static_cache
from engine.settings import CXX, INDUCTOR_KNOBS

LABELS = {Mode.EAGER: "eager", Mode.COMPILED: "compiled (torch.compile)"}  # the sidebar's words; its help says more
# Every (model, precision, cache length) is one more compiled entry of the same decode-step code object; dynamo's
# default limit of 8 entries per code object would silently send the ninth back to eager.
RECOMPILE_LIMIT = 64


class ModeError(ModelLoadError):
    """An engine mode this model, precision or machine cannot run; the message says why in one line."""


def compiler_missing(device) -> str | None:
    """Why torch.compile cannot run on ``device`` here, or None."""
    from engine.core import fx_threads

    dev = torch.device(device)
    try:
        import torch._dynamo as dynamo

        if not dynamo.is_dynamo_supported():
            return "torch.compile is not supported on this Python and PyTorch"
    except Exception as exc:  # noqa: BLE001 - a broken install reads as no compiler
        return f"torch.compile cannot load ({type(exc).__name__})"
    if not fx_threads.install():  # compiles run beside the engine's worker (engine.core.background_compile)
        return "this PyTorch's tracer cannot compile beside a running model (engine/core/fx_threads.py)"
    if dev.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "torch.compile needs Triton on a GPU, and it is not installed"
        return None
    if dev.type != "cpu":
        return f"compiled mode is built for CPU and CUDA, not {dev.type}"
    cxx = CXX.get()
    if not any(shutil.which(c) for c in ([cxx] if cxx else []) + ["g++", "c++", "clang++"]):
        return "torch.compile's CPU backend needs a C++ compiler (g++ or clang++), and none is installed"
    return None


def refused(lm) -> str | None:
    """The one-line reason compiled mode cannot run this model (a ``LoadedModel``) on its device, or None."""
    info, device = lm.info, lm.device
    missing = compiler_missing(device)
    if missing:
        return missing
    if lm.ref.precision == "int8" and torch.device(device).type == "cpu":
        return "int8 on a CPU runs eager: torch.ao's packed int8 weights are opaque to torch.compile"
    facts = getattr(info, "arch", None)
    if facts is not None and facts.has_windows:
        return ("a model with sliding-window layers runs eager: transformers' static sliding-window cache counts "
                "positions in a Python int, so the compiled step would recompile at every position")
    return None


def inductor_knobs() -> dict[str, bool]:
    """The inductor options ILE_INDUCTOR_KNOBS turns on (each True), those inductor knows; an unknown name is dropped
    with one warning line (torch.compile would refuse the whole graph, and the run would be eager)."""
    names = [n.strip() for n in (INDUCTOR_KNOBS.get() or "").split(",") if n.strip()]
    if not names:
        return {}
    from torch._inductor import list_options

    options = set(list_options())
    for name in names:
        if name not in options:
            print(f"[engine] ILE_INDUCTOR_KNOBS: {name[:60]!r} is not an inductor option; dropped", file=sys.stderr)
    return {name: True for name in names if name in options}


class DecodeGraph:
    """The compiled decode step of one compiled model, and its static caches: one per length, made once and reused
    (a CUDA graph replays on fixed addresses; a new cache per run would make it record again). Used on the engine
    worker only, one job at a time, so each cache serves one sequence at a time."""

    def __init__(self, model: torch.nn.Module, device: torch.device, max_positions: int):
        self.model = model
        self.device = torch.device(device)
        self.max_positions = int(max_positions)
        self.caches: dict[int, object] = {}
        self.compile_s: dict[int, float] = {}  # cache length -> seconds its warm-up took (compile included)
        self.failure: str | None = None
        self.fusion = None  # engine.core.fused.FusedModel: the tree the step compiles (engine.core.loop sets it)
        # the thread compiling one of this model's graphs in the background (engine.core.background_compile); any
        # other thread's passes run eager meanwhile, so a compiled function is never run while it compiles
        self.compiling_in: int | None = None
        self._fn = None

    @property
    def cuda_graphs(self) -> bool:
        return self.device.type == "cuda"

    def _compiled(self, make: Callable[[torch.nn.Module], Callable]):
        """The compiled step: ``make(model)`` is the plain step (engine.core.loop builds it: the one module that
        passes a KV cache to a model), compiled once, on first use."""
        if self._fn is None:
            self._fn = self.compile(make)
        return self._fn

    def compile(self, make: Callable[[torch.nn.Module], Callable]):
        """``make(tree)`` under torch.compile, ``tree`` the fused one (the decode step's and every shaped pass's: a
        verify pass or a batch step that rounded differently from the plain step could flip a greedy near tie)."""
        import torch._dynamo

        if torch._dynamo.config.recompile_limit < RECOMPILE_LIMIT:
            torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
        # CUDA: "reduce-overhead" captures the step as a CUDA graph. CPU: inductor's C++ kernels, each wrapped in
        # a profiler range (the kernel-level view of a step sees them; a no-op when no profiler runs). Inductor's
        # freezing (weights as constants packed for MKL: 275 operators a step instead of 362, 1.056x) is off:
        # with it, a model's compiled passes disagreed with one another in one process (a bucketed prefill's
        # graph, then a decode graph, changed greedy tokens against eager; docs/benchmarks.md)
        # Knobs (ILE_INDUCTOR_KNOBS) go in as options; "reduce-overhead" is the option triton.cudagraphs, which
        # torch.compile then takes as an option too (it refuses a mode and options together).
        knobs = inductor_knobs()
        if self.cuda_graphs:
            kw = {"options": {"triton.cudagraphs": True, **knobs}} if knobs else {"mode": "reduce-overhead"}
        else:
            kw = {"options": {"cpp.enable_kernel_profile": True, **knobs}}
        model = self.fusion.model if self.fusion is not None else self.model
        return torch.compile(make(model), fullgraph=True, dynamic=False, **kw)

    def cache(self, tokens: int):
        """The static cache for a run of ``tokens`` tokens, emptied; None when the run is longer than any length."""
        length = cache_length(tokens, self.max_positions)
        if length is None or self.failure:
            return None
        cache = self.caches.get(length)
        if cache is None:
            cache = self.caches[length] = static_cache(self.model, 1, length)
        else:
            with torch.inference_mode():
                cache.reset()
        return cache

    def owns(self, cache) -> bool:
        return any(cache is c for c in self.caches.values())

    def elsewhere(self) -> bool:
        """Is another thread compiling one of this model's graphs now (its passes here then run eager)?"""
        return self.compiling_in is not None and self.compiling_in != threading.get_ident()

    def ready(self, tokens: int) -> bool:
        length = cache_length(tokens, self.max_positions)
        return length is not None and length in self.compile_s

    def step(self, ids: torch.Tensor, cache, make: Callable[[torch.nn.Module], Callable], *extra):
        """One compiled decode step: ids [1, 1] (and ``extra``, the step's other tensors) -> what the step returns,
        each tensor a copy on CUDA (a CUDA graph's outputs are overwritten by its next replay). ``make``: see
        ``_compiled``."""
        fn = self._compiled(make)
        # One kind of input every time (dynamo guards on strides and dispatch keys, and would compile again): a fresh
        # contiguous inference tensor, whether the caller's ids were a view of a longer row or made outside
        # inference mode.
        with torch.inference_mode():
            ids = ids.clone(memory_format=torch.contiguous_format)
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
            out = fn(ids, cache, *extra)
            return tuple(t.clone() for t in out) if isinstance(out, tuple) else out.clone()
        return fn(ids, cache, *extra)

    def fail(self, exc: BaseException) -> str:
        """Record why compiling failed (one line); every later run of this model is eager."""
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        self.failure = f"torch.compile could not compile this model's decode step ({type(exc).__name__}: {first})"
        return self.failure

    def record_warm(self, tokens: int, seconds: float) -> None:
        length = cache_length(tokens, self.max_positions)
        if length is not None:
            self.compile_s[length] = seconds


def graph_of(lm) -> DecodeGraph | None:
    """The compiled decode step of ``lm`` (a compiled LoadedModel), or None (eager, a bare model)."""
    g = getattr(lm, "decode_graph", None)
    return g if isinstance(g, DecodeGraph) else None


def mode_of(lm) -> Mode:
    return Mode.COMPILED if graph_of(lm) is not None else DEFAULT_MODE


def to_mode(lm: LoadedModel, mode: str) -> LoadedModel:
    """``lm`` in ``mode``: itself for its own mode; for "compiled" a second LoadedModel over the same weights with a
    decode graph (compiled on first use, in ``loop.warm_up``); for "eager" the eager model behind a compiled one.
    Raises ModeError (one line) where the mode cannot run."""
    if mode not in MODES:
        raise ModeError(f"'{str(mode)[:40]}' is not an engine mode; choose one of {', '.join(MODES)}.")
    if mode == mode_of(lm):
        return lm
    if mode == DEFAULT_MODE:
        return LoadedModel(lm.ref.at(mode=mode), lm.model, lm.tokenizer, lm.info)
    reason = refused(lm)
    if reason:
        raise ModeError(f"Compiled mode: {reason}.")
    return LoadedModel(lm.ref.at(mode=mode), lm.model, lm.tokenizer, lm.info,
                       decode_graph=DecodeGraph(lm.model, lm.device, lm.info.max_positions))


# ------------------------------------------------------------------------------------------------ shaped passes
# Passes of other shapes than [1, 1] on a static cache, each its own compiled graph (``dynamic=False``; on CUDA one
# CUDA graph per shape, recorded once): a speculative verify pass (one row, k + 1 tokens: one graph per k and cache
# length) and the class batcher's decode step (one token per row, rows padded up to a size in BATCH_SIZES, as serving
# engines capture them: one graph per size and cache length). Each is compiled lazily, in a warm-up before anything
# is timed (the callers of ``compiling``), and its time is recorded (``compile_status``, ``last_compile_s``).
class ShapedGraphs:
    """A compiled model's shaped passes and their static caches (one per (rows, length): a CUDA graph replays on
    fixed addresses), with what has been compiled and what is compiling now (on one thread: ``start``)."""

    def __init__(self, graph: DecodeGraph):
        self.graph = graph
        self.caches: dict[tuple[int, int, str], object] = {}
        self.warming: weakref.WeakSet = weakref.WeakSet()  # caches a background compile warms up on (``cache``)
        self.compile_s: dict[str, float] = {}  # graph name -> seconds its warm-up took (compile included)
        self.failure: str | None = None
        self.current: tuple[str, float] | None = None  # (graph name, perf_counter at its start) while compiling
        self._marked = None  # the decode graph's compiling_in before ``start`` marked it
        self.to_do: list[str] = []  # graph names a warm-up has announced and not yet compiled
        self._fn = None

    def cache(self, rows: int, length: int, role: str = ""):
        """The static cache of ``rows`` rows and ``length`` positions, emptied (``static_cache``); ``role`` keeps
        one apart from the others of its shape (the class batcher's newcomers prefill on one beside the batch's)."""
        key = (int(rows), int(length), role)
        # a compile in the background warms up on a cache of its own (one of this graph's: its passes compile), as the
        # engine's worker may be running a batch on the kept one meanwhile (eager, engine.core.background_compile)
        fresh = threading.current_thread().name == COMPILER_THREAD
        cache = None if fresh else self.caches.get(key)
        if cache is None:
            cache = static_cache(self.graph.model, rows, length)
            if fresh:
                self.warming.add(cache)
            else:
                self.caches[key] = cache
        else:
            with torch.inference_mode():
                cache.reset()
        return cache

    def owns(self, cache) -> bool:
        return any(cache is c for c in self.caches.values()) or cache in self.warming or self.graph.owns(cache)

    def ready(self, name: str) -> bool:
        return name in self.compile_s and self.failure is None

    def name_of(self, ids: torch.Tensor, cache, keep: int, attention_mask: torch.Tensor | None) -> str | None:
        """The graph that serves this pass (``ids`` [rows, n] on ``cache``), or None: one row of n tokens with no
        mask and every position kept is a verify pass; one token per row with a mask is a batched decode step."""
        if not self.owns(cache):
            return None
        rows, width = ids.shape
        length = cache.layers[0].max_cache_len
        if isinstance(keep, torch.Tensor):  # the logits of one position, given as an index: a bucketed prefill
            return prefill_name(width, length) if rows == 1 and attention_mask is None else None
        if rows == 1 and attention_mask is None and int(keep) == width > 1:
            return verify_name(width, length)
        if width == 1 and attention_mask is not None and int(keep) == 1 and rows in BATCH_SIZES:
            return batch_name(rows, length)
        return None

    def serves(self, ids: torch.Tensor, cache, keep: int, attention_mask: torch.Tensor | None) -> bool:
        """Does this pass run as a compiled graph: its graph is compiled, or is compiling now (its warm-up)?"""
        name = self.name_of(ids, cache, keep, attention_mask)
        return name is not None and self.failure is None and not self.graph.elsewhere() and (
            name in self.compile_s or (self.current is not None and self.current[0] == name))

    def run(self, make: Callable[[torch.nn.Module], Callable], ids: torch.Tensor, cache, keep: int,
            attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None) -> torch.Tensor:
        """One compiled pass: ids [rows, n] -> logits [rows, keep, vocab] (a copy, as DecodeGraph.step's)."""
        if self._fn is None:
            self._fn = self.graph.compile(make)  # the decode step's tree and weights (fused)
        with torch.inference_mode():
            ids = ids.clone(memory_format=torch.contiguous_format)
            attention_mask = None if attention_mask is None else attention_mask.contiguous()
            position_ids = None if position_ids is None else position_ids.contiguous()
            keep = keep.clone() if isinstance(keep, torch.Tensor) else int(keep)  # an inference tensor, as in warm-up
        if self.graph.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
            return self._fn(ids, cache, attention_mask, position_ids, keep).clone()
        return self._fn(ids, cache, attention_mask, position_ids, keep)

    def start(self, name: str) -> None:
        """Graph ``name`` compiles now, on this thread; other threads' passes run eager (``DecodeGraph.elsewhere``)."""
        self.current = (name, time.perf_counter())
        self._marked, self.graph.compiling_in = self.graph.compiling_in, threading.get_ident()

    def abandon(self) -> None:  # the compile ended, cancelled: nothing is recorded (``finish`` records)
        self.current, self.graph.compiling_in, self._marked = None, self._marked, None

    def finish(self, lm, seconds: float | None, exc: BaseException | None = None) -> None:
        """The graph compiling now is done (its warm-up took ``seconds``, kept here and in the cache folder), or it
        failed (``exc``: one line, and the shaped passes of this model run eager from then on)."""
        name = self.current[0] if self.current else None
        self.abandon()
        if name in self.to_do:
            self.to_do.remove(name)
        if exc is not None:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            self.failure = f"torch.compile could not compile the {name} ({type(exc).__name__}: {first})"
        elif name is not None and seconds is not None:
            self.compile_s[name] = float(seconds)
            record_compile_s(lm, name, seconds)


_SHAPED: "weakref.WeakKeyDictionary[DecodeGraph, ShapedGraphs]" = weakref.WeakKeyDictionary()


def shaped_of(lm) -> ShapedGraphs | None:
    """The shaped passes of ``lm`` (a compiled LoadedModel), made on first use; None for an eager model or one whose
    decode step failed to compile."""
    graph = graph_of(lm)
    if graph is None or graph.failure:
        return None
    shaped = _SHAPED.get(graph)
    if shaped is None:
        shaped = _SHAPED[graph] = ShapedGraphs(graph)
    return shaped


def announce(lm, names) -> None:
    """Graphs a warm-up is about to compile, in order: ``compile_status`` lists those not yet compiled as to do."""
    shaped = shaped_of(lm)
    if shaped is not None:
        shaped.to_do += [n for n in names if n not in shaped.compile_s and n not in shaped.to_do]


@contextmanager
def compiling(lm, name: str, progress: Callable[[str], None] | None = None):
    """Around the warm-up passes that compile graph ``name`` of ``lm`` (untimed, before any measured pass): says
    the last measured time (or that it is unknown) before it starts, marks it as compiling (its passes then run
    compiled, ``ShapedGraphs.serves``), and records its time. A failure is one line on the graphs, and the shaped
    passes run eager from then on; it does not propagate (cancellation does)."""
    from engine.core.cancel import Cancelled

    shaped = shaped_of(lm)
    say = progress or (lambda msg: None)
    say(expected_line(lm, name))
    shaped.start(name)
    t0 = time.perf_counter()
    try:
        yield
    except Cancelled:
        shaped.abandon()
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to compile: one line, and eager from now on
        shaped.finish(lm, None, exc)
        say(shaped.failure)
    except BaseException:  # a compile cancelled in its own thread (engine.core.background_compile), or an exit
        shaped.abandon()
        raise
    else:
        shaped.finish(lm, time.perf_counter() - t0)


@dataclass(frozen=True)
class CompileStatus:
    """What a compiled model has compiled and is compiling, as plain values for a page to show."""

    done: tuple[tuple[str, float], ...]  # (graph name, seconds its compile and warm-up took), this session
    to_do: tuple[str, ...]  # graphs a warm-up has announced and not yet compiled
    current: str | None  # the graph compiling now
    seconds_so_far: float | None  # since the current graph started
    last_seconds: float | None  # the current graph's last measured time (cache folder), None if never measured
    failure: str | None

    @property
    def line(self) -> str:
        if self.current is None:
            return f"{len(self.done)} graphs compiled" + (f", {len(self.to_do)} to do" if self.to_do else "")
        last = f"last time {self.last_seconds:.0f} s" if self.last_seconds is not None else "first compile: unknown"
        return (f"compiling the {self.current}: {self.seconds_so_far:.0f} s so far ({last}); {len(self.done)} done, "
                f"{len(self.to_do)} to do")


def compile_status(lm) -> CompileStatus | None:
    """The compile record of ``lm`` (a compiled LoadedModel; None for an eager one): the decode steps and shaped
    passes compiled, announced and compiling. Safe to call from another thread (it only reads)."""
    graph = graph_of(lm)
    if graph is None:
        return None
    shaped = _SHAPED.get(graph)
    done = [(decode_name(n), s) for n, s in sorted(graph.compile_s.items())]
    current = to_do = None
    if shaped is not None:
        done += list(shaped.compile_s.items())
        current, to_do = shaped.current, list(shaped.to_do)
    name, t0 = current if current else (None, None)
    return CompileStatus(tuple(done), tuple(n for n in to_do or () if n != name), name,
                         None if t0 is None else time.perf_counter() - t0,
                         None if name is None else last_compile_s(lm, name),
                         graph.failure or (shaped.failure if shaped else None))
