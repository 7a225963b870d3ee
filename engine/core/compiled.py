"""The compiled engine mode, beside eager: a static KV cache and ``torch.compile`` around the decode step, the recipe
of gpt-fast's generate.py with transformers' own ``StaticCache``. Eager PyTorch runs a decode step as hundreds of
operators, each dispatched from Python (on a GPU, each one kernel launch); compiled, the step is one graph of fused
kernels, and on CUDA that graph is captured once and replayed as a CUDA graph (``mode="reduce-overhead"``): one
launch per step instead of hundreds.

What the mode serves (``engine.core.loop`` routes a pass here only when all of it holds):
- the decode step, ``[1, 1]`` token ids on a static cache made for it (``loop.new_cache(lm, tokens=...)``); the
  prefill stays eager (its shape changes with every prompt) and writes into the same static cache;
- one graph per static cache length (``cache_length``: powers of two from ``SHORTEST``, up to the model's positions),
  compiled in ``loop.warm_up`` before anything is timed, never inside a measured step.

What it refuses, in one line each (``refused``), and eager runs instead:
- a model with sliding-window layers: transformers' static sliding-window layer counts positions in a Python int,
  so dynamo recompiles the step at every position (a tiny Gemma 3 hit the recompile limit after 8 steps);
- int8 on a CPU: torch.ao's packed int8 weights are opaque to torch.compile;
- no compiler: dynamo unsupported here, no C++ compiler for the CPU backend, or no Triton for CUDA;
- anything that is not one sequence fed one token at a time: a speculative verify pass and its rollback (``crop``),
  the class batcher's padded batches, the stepper, analyses. Their caches are the eager loop's, so they run eager.

KV bytes: a static cache holds its whole length from the first step; ``engine.core.kv.kv_bytes`` counts the
positions filled (what the formula gives), ``engine.core.kv.reserved_bytes`` the allocation.

The compiled step runs the model with its projections fused (engine.core.fused: q/k/v one matrix multiply, gate/up
another), a second module tree over the same weights; prefill and everything eager run the model as loaded.

A compiled model is a second ``LoadedModel`` over the same weights (``to_mode``); the shared model object is never
changed. Its reference (engine.core.loaded.ModelRef) says ``mode="compiled"``, so everything kept per model
reference is kept per (model, precision, mode).
"""
from __future__ import annotations

import importlib.util
import shutil
from dataclasses import replace
from typing import Callable

import torch

from engine.core.loaded import LoadedModel, ModelLoadError
from engine.settings import CXX

MODES = ("eager", "compiled")
DEFAULT_MODE = "eager"
LABELS = {"eager": "eager", "compiled": "compiled (torch.compile)"}  # the sidebar's words; its help says more
SHORTEST = 256  # the shortest static cache: the app's default prompt and answer fit in it
# Every (model, precision, cache length) is one more compiled entry of the same decode-step code object; dynamo's
# default limit of 8 entries per code object would silently send the ninth back to eager.
RECOMPILE_LIMIT = 64


class ModeError(ModelLoadError):
    """An engine mode this model, precision or machine cannot run; the message says why in one line."""


def compiler_missing(device) -> str | None:
    """Why torch.compile cannot run on ``device`` here, or None."""
    dev = torch.device(device)
    try:
        import torch._dynamo as dynamo

        if not dynamo.is_dynamo_supported():
            return "torch.compile is not supported on this Python and PyTorch"
    except Exception as exc:  # noqa: BLE001 - a broken install reads as no compiler
        return f"torch.compile cannot load ({type(exc).__name__})"
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


def refused(info, device) -> str | None:
    """The one-line reason compiled mode cannot run this model (``ModelInfo``) on ``device``, or None."""
    missing = compiler_missing(device)
    if missing:
        return missing
    if getattr(info, "precision", "") == "int8" and torch.device(device).type == "cpu":
        return "int8 on a CPU runs eager: torch.ao's packed int8 weights are opaque to torch.compile"
    facts = getattr(info, "arch", None)
    if facts is not None and facts.has_windows:
        return ("a model with sliding-window layers runs eager: transformers' static sliding-window cache counts "
                "positions in a Python int, so the compiled step would recompile at every position")
    return None


def cache_length(tokens: int, max_positions: int) -> int | None:
    """The static cache length for a run of ``tokens`` tokens: the smallest power of two from SHORTEST that holds
    them (one compiled graph per length, so few lengths), capped at the model's positions; None if too long."""
    tokens = max(1, int(tokens))
    if tokens > max_positions:
        return None
    n = SHORTEST
    while n < tokens:
        n *= 2
    return min(n, int(max_positions))


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
        self._fn = None

    @property
    def cuda_graphs(self) -> bool:
        return self.device.type == "cuda"

    def _compiled(self, make: Callable[[torch.nn.Module], Callable]):
        """The compiled step: ``make(model)`` is the plain step (engine.core.loop builds it: the one module that
        passes a KV cache to a model), compiled once, on first use."""
        if self._fn is None:
            import torch._dynamo

            if torch._dynamo.config.recompile_limit < RECOMPILE_LIMIT:
                torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
            # CUDA: "reduce-overhead" captures the step as a CUDA graph. CPU: inductor's C++ kernels, each wrapped in
            # a profiler range (the kernel-level view of a step sees them; a no-op when no profiler runs), and the
            # weights frozen as constants packed for MKL: no copy of each matmul's input row, fewer operators, a
            # faster step, at the cost of a packed copy of the linear weights (docs/benchmarks.md, issue 51).
            kw = {"mode": "reduce-overhead"} if self.cuda_graphs else {"options": {"cpp.enable_kernel_profile": True}}
            model = self.fusion.model if self.fusion is not None else self.model
            fn = torch.compile(make(model), fullgraph=True, dynamic=False, **kw)
            self._fn = fn if self.cuda_graphs else _frozen(fn)
        return self._fn

    def cache(self, tokens: int):
        """The static cache for a run of ``tokens`` tokens, emptied; None when the run is longer than any length."""
        from transformers import StaticCache

        length = cache_length(tokens, self.max_positions)
        if length is None or self.failure:
            return None
        cache = self.caches.get(length)
        if cache is None:
            cache = StaticCache(config=self.model.config, max_cache_len=length)
            self.caches[length] = cache
        else:
            with torch.inference_mode():  # its tensors were made in the inference-mode pass that first filled it
                cache.reset()
        return cache

    def owns(self, cache) -> bool:
        return any(cache is c for c in self.caches.values())

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


def _frozen(fn: Callable) -> Callable:
    """``fn`` compiled (on its first call, and any recompile) with inductor's freezing: passed as a torch.compile
    option it did not take effect here (the step kept aten::mm), so the config is patched around each call."""
    import torch._inductor.config as inductor_config

    def frozen(*args):
        with inductor_config.patch(freezing=True):
            return fn(*args)

    return frozen


def graph_of(lm) -> DecodeGraph | None:
    """The compiled decode step of ``lm`` (a compiled LoadedModel), or None (eager, a bare model)."""
    g = getattr(lm, "decode_graph", None)
    return g if isinstance(g, DecodeGraph) else None


def mode_of(lm) -> str:
    return "compiled" if graph_of(lm) is not None else DEFAULT_MODE


def to_mode(lm: LoadedModel, mode: str) -> LoadedModel:
    """``lm`` in ``mode``: itself for its own mode; for "compiled" a second LoadedModel over the same weights with a
    decode graph (compiled on first use, in ``loop.warm_up``); for "eager" the eager model behind a compiled one.
    Raises ModeError (one line) where the mode cannot run."""
    if mode not in MODES:
        raise ModeError(f"'{str(mode)[:40]}' is not an engine mode; choose one of {', '.join(MODES)}.")
    if mode == mode_of(lm):
        return lm
    if mode == DEFAULT_MODE:
        return LoadedModel(lm.ref.at(mode=mode), lm.model, lm.tokenizer, replace(lm.info, mode=mode))
    reason = refused(lm.info, lm.device)
    if reason:
        raise ModeError(f"Compiled mode: {reason}.")
    return LoadedModel(lm.ref.at(mode=mode), lm.model, lm.tokenizer, replace(lm.info, mode=mode),
                       decode_graph=DecodeGraph(lm.model, lm.device, lm.info.max_positions))

