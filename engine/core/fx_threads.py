"""A compile's changes to the whole process, made to apply to the compiling thread only.

A compile in the background (engine.core.background_compile) runs on its own thread while the engine's worker runs
the model eagerly on another. Two things a compile does are process-wide in torch, and both broke the worker's eager
passes while a compile ran; ``install`` confines each to the thread that compiles:

1. torch.fx's tracer patches ``torch.nn.Module`` (below);
2. for the whole compile, torch sets one flag, read by ``torch.compiler.is_compiling()`` in every thread, and
   transformers' ``is_torchdynamo_compiling()`` reads that flag: an eager pass on another thread then took the
   paths meant for a traced graph (explicit masks where it skips them, its cache's compile-only branches), and the
   engine's own analysis hooks captured nothing. transformers' function is given the body of
   ``torch.compiler.is_dynamo_compiling()`` instead: True inside a dynamo trace (dynamo folds it, as it does the
   flag), False in eager code on any thread. The engine's own hooks ask ``is_dynamo_compiling`` directly.

torch.fx's tracer:

While torch.fx traces (``Tracer.trace``: AOT autograd's ``make_fx`` in every compile, inductor's pattern set-up),
it replaces ``torch.nn.Module.__call__`` and ``__getattr__`` (and a few wrapped functions) on the class itself, for
the whole process, and puts them back when it is done. A compile in the background (engine.core.background_compile)
traces on its own thread while the engine's worker runs the model eagerly on another: the worker's modules then went
through the tracer's patched call and failed ("NameError: module is not installed as a submodule"), at random,
whenever a compile happened to be tracing.

``install`` makes each of those patches a function that does the tracer's work on the thread that made the patch
and the original on every other thread. torch keeps the patches in small records (``_PatchedFn*``) with a ``patch``
method each; that method is wrapped here. These are torch's private classes: when a torch or transformers release
renames what is changed here, ``install`` returns False and compiled mode is refused in one line
(engine.core.compiled.compiler_missing).
"""
from __future__ import annotations

import builtins
import threading

_WRAPPED: set = set()  # the patch methods made here (install is idempotent)


def install() -> bool:
    """Confine a compile's process-wide changes to its thread (idempotent); False where they cannot be."""
    return _fx_patches() and _transformers_flag()


def _dynamo_only() -> bool:
    try:
        import torch

        return torch.compiler.is_dynamo_compiling()
    except Exception:  # noqa: BLE001 - as transformers' own: no torch.compiler reads as not compiling
        return False


def _transformers_flag() -> bool:
    try:
        from transformers.utils import import_utils

        fn = import_utils.is_torchdynamo_compiling
    except (ImportError, AttributeError):
        return False
    if fn.__code__ is not _dynamo_only.__code__:
        if fn.__code__.co_freevars:  # another shape of function than the one this replaces
            return False
        fn.__code__ = _dynamo_only.__code__  # one function object, imported by name in many modules of transformers
    return True


def _fx_patches() -> bool:
    try:
        from torch.fx import _symbolic_trace as fx_trace

        kinds = (fx_trace._PatchedFnSetAttr, fx_trace._PatchedFnSetItem, fx_trace._PatchedFnDel)
    except (ImportError, AttributeError):
        return False
    for kind in kinds:
        if not callable(getattr(kind, "patch", None)) or not hasattr(kind, "_replace"):
            return False
    for kind in kinds:
        if kind.patch not in _WRAPPED:
            kind.patch = _one_thread(kind.patch)
            _WRAPPED.add(kind.patch)
    return True


def _one_thread(patch):
    def patch_for_this_thread(record) -> None:
        owner = threading.get_ident()
        new = record.new_fn
        old = record.orig_fn if record.orig_fn is not None else getattr(builtins, record.fn_name, None)
        if old is None:  # nothing to fall back on for other threads: torch's own patch, as it was
            patch(record)
            return

        def routed(*args, **kwargs):
            return (new if threading.get_ident() == owner else old)(*args, **kwargs)

        # torch's "already patched" mark is not carried over: torch sets it under a mangled name
        # (_Patcher__fx_already_patched) and reads the plain one, so it never marks anything today either
        patch(record._replace(new_fn=routed))

    return patch_for_this_thread
