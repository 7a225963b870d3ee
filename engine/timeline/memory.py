"""Training vs inference memory: the bytes a forward pass keeps for a backward pass, against none under
``torch.inference_mode``, measured exactly (every tensor a pass creates, seen by a dispatch mode).
"""
from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine.core.loaded import LoadedModel
from engine.core.loop import full_pass, warm_up


@dataclass(frozen=True)
class MemoryComparison:
    tokens: int
    method: str  # how the numbers were measured, in words
    saved_for_backward_bytes: int  # exact: unique storages autograd saved (parameters excluded)
    saved_tensor_count: int
    inference_saved_bytes: int  # the same hook under inference mode (0: nothing is saved)
    training_held_bytes: int  # memory still held after the forward pass while its output is alive
    inference_held_bytes: int
    training_peak_bytes: int  # peak of live tensor bytes during the pass
    inference_peak_bytes: int
    logits_bytes: int  # the output both passes keep


class _LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of every tensor storage an operation creates, until that storage is freed, and keeps
    the peak. Sits below autograd, so it sees activations saved for backward as well as transient ones.
    Exact for tensor memory (allocator slack and Python objects are not included)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._tracked: set[int] = set()

    def _free(self, key: int, nbytes: int) -> None:
        self._tracked.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors([args, list((kwargs or {}).values())])}
        for t in _tensors(out):
            st = t.untyped_storage()
            key = st.data_ptr()
            if key and key not in self._tracked and key not in inputs:  # a view or in-place result is not new
                self._tracked.add(key)
                self.live += st.nbytes()
                weakref.finalize(st, self._free, key, st.nbytes())
        self.peak = max(self.peak, self.live)
        return out


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _tensors(o)


def _measure_pass(lm: LoadedModel, x: torch.Tensor, training: bool) -> tuple[int, int, int, int, int]:
    """(held bytes, peak bytes, saved bytes, saved count, logits bytes) for one forward pass.

    For training the parameters must require grad. The shared model's are never toggled: the pass runs through
    ``torch.func.functional_call`` with views of the same storage that require grad (no copy, no change to the
    model another session might be using)."""
    model, dev = lm.model, lm.device
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    if training:
        grad_params = {n: p.detach().requires_grad_(True) for n, p in model.named_parameters()}
        run = lambda: full_pass(model, x, params=grad_params)  # noqa: E731
    else:
        run = lambda: full_pass(model, x)  # noqa: E731
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            saved[st.data_ptr()] = st.nbytes()
        return t

    cuda = dev.type == "cuda"
    gc.collect()
    ctx = torch.enable_grad() if training else torch.inference_mode()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
            logits = run().logits  # [1, n, vocab], kept like a loss would
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated(dev) - base
        peak = torch.cuda.max_memory_allocated(dev) - base
    else:
        tracker = _LiveTensorBytes()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx, tracker:
            logits = run().logits  # [1, n, vocab], kept like a loss would
        held, peak = tracker.live, tracker.peak
    lbytes = logits.numel() * logits.element_size()
    del logits
    gc.collect()
    return max(0, held), max(0, peak), sum(saved.values()), len(saved), lbytes


def training_vs_inference_memory(lm: LoadedModel, ids: list[int]) -> MemoryComparison:
    """Memory of one forward pass that keeps activations for backward (parameters require grad, as in
    training) vs the same pass under ``torch.inference_mode``. The saved-for-backward bytes are exact
    (``saved_tensors_hooks`` sees every tensor autograd stores). PyTorch has no peak-memory counter on CPU,
    so held/peak bytes there come from a dispatch mode that tracks every tensor storage the pass creates
    until it is freed; on CUDA they come from ``torch.cuda.max_memory_allocated``."""
    x = torch.tensor([ids], device=lm.device)  # [1, n]
    cuda = lm.device.type == "cuda"
    warm_up(lm)
    with torch.inference_mode():
        full_pass(lm, x)  # warm-up at this length
    inf = _measure_pass(lm, x, training=False)
    tr = _measure_pass(lm, x, training=True)
    method = ("torch.cuda.max_memory_allocated (peak) and memory_allocated (held) on the GPU"
              if cuda else "tensor bytes tracked op by op with a TorchDispatchMode (every storage a pass creates, "
                           "until it is freed; allocator slack not included)")
    method += "; saved-for-backward bytes exact via torch.autograd.graph.saved_tensors_hooks"
    return MemoryComparison(
        tokens=len(ids), method=method, saved_for_backward_bytes=tr[2], saved_tensor_count=tr[3],
        inference_saved_bytes=inf[2], training_held_bytes=tr[0], inference_held_bytes=inf[0],
        training_peak_bytes=tr[1], inference_peak_bytes=inf[1], logits_bytes=tr[4],
    )
