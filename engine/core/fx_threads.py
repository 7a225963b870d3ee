"""torch.fx's tracers patch for one thread only.

While torch.fx traces (``Tracer.trace``: AOT autograd's ``make_fx`` in every compile, inductor's pattern set-up),
it replaces ``torch.nn.Module.__call__`` and ``__getattr__`` (and a few wrapped functions) on the class itself, for
the whole process, and puts them back when it is done. A compile in the background (engine.core.background_compile)
traces on its own thread while the engine's worker runs the model eagerly on another: the worker's modules then went
through the tracer's patched call and failed ("NameError: module is not installed as a submodule"), at random,
whenever a compile happened to be tracing.

``install`` makes each of those patches a function that does the tracer's work on the thread that made the patch
and the original on every other thread. torch keeps the patches in small records (``_PatchedFn*``) with a ``patch``
method each; that method is wrapped here. These are torch's private classes: when a torch release renames them,
``install`` returns False and compiles run on the worker (blocking, but correct) instead of in the background.
"""
from __future__ import annotations

import builtins
import threading

_MARK = "_ile_one_thread"


def install() -> bool:
    """Make torch.fx's patches apply to the patching thread only (idempotent); False if torch has no such records."""
    try:
        from torch.fx import _symbolic_trace as fx_trace

        kinds = (fx_trace._PatchedFnSetAttr, fx_trace._PatchedFnSetItem, fx_trace._PatchedFnDel)
    except (ImportError, AttributeError):
        return False
    for kind in kinds:
        if not callable(getattr(kind, "patch", None)) or not hasattr(kind, "_replace"):
            return False
    for kind in kinds:
        if not getattr(kind.patch, _MARK, False):
            kind.patch = _one_thread(kind.patch)
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

        for flag in ("__fx_already_patched", "_Patcher__fx_already_patched"):  # torch's "already patched" flag
            if hasattr(new, flag):
                setattr(routed, flag, getattr(new, flag))
        patch(record._replace(new_fn=routed))

    setattr(patch_for_this_thread, _MARK, True)
    return patch_for_this_thread
