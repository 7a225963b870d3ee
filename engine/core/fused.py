"""Fused projections for compiled mode: each attention's q, k and v projections become one matrix multiply, and
each gated MLP's gate and up projections another (gpt-fast's ``wqkv`` and vLLM's ``QKVParallelLinear`` /
``MergedColumnParallelLinear``). A Llama-shaped layer then runs 4 matrix multiplies per step instead of 7: on a
step bound by per-operator overhead (a CPU, or a GPU at batch 1), the count is the cost.

How, without touching the eager model the pages read:
- ``fuse(model)`` returns a second module tree over the same weights: the modules on the path from the root to each
  fused layer are shallow copies (their own child lists, the same parameters, buffers, hooks and config), so the
  eager model keeps its own modules and never runs this code.
- Each fused layer is a ``FusedInput`` wrapper: it multiplies the input once by the concatenated weight
  ``[q; k; v]`` (or ``[gate; up]``) and hands the result to a copy of the family's own module whose q/k/v (gate/up)
  projections are ``Slice`` views of that result. The family's own forward runs unchanged (its norms on q and k,
  rotary, cache update, attention), so no family's attention is written again here.
- The weights are concatenated once into a copy the fused tree holds (for SmolLM2 in float32 about 280 MB: the q,
  k, v, gate and up weights). The eager model's parameters are left untouched: re-pointed at views of the copy made
  in the compiled step's inference mode, they became inference tensors, and the pages' training-memory pass (and
  int8 quantization of an eager copy) failed after anyone had used compiled mode. Done on the engine worker, before
  the first compiled step (``engine.core.loop.drawn_step``).

The other projections of the blocks (o, down) read a buffer already written; in the fused tree a single row runs
them through ``bmm`` (``linear``), which spares a copy per projection per step (see there). The output head stays
a plain matrix multiply.

What is refused, one line each (``FusedModel.refused``), and the unfused tree compiles instead: projections that are
not plain ``nn.Linear`` (quantized), with different inputs, dtypes or devices, some with a bias and some without, or
a parameter shared by two projections; and a fused tree whose logits differ from the eager model's on a few tokens
(a family whose forward uses its input for more than the projections). Families that already hold one projection
(GPT-2's ``c_attn``, Falcon's ``query_key_value``, Phi-3's ``qkv_proj``) have nothing to fuse.
"""
from __future__ import annotations

import copy
import inspect
import logging
import weakref
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from engine.core import arch

log = logging.getLogger(__name__)

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # projections of one input, fused in this order
CHECK_TOKENS = 6  # tokens of the check pass that compares the fused tree with the eager model
CHECK_RTOL = 1e-3  # of the logits' largest magnitude (float32 reorders a sum; a wrong split is off by far more)


class Slice(torch.nn.Module):
    """A projection whose output is already computed: its input's last dim [start, stop) (a view)."""

    def __init__(self, start: int, stop: int):
        super().__init__()
        self.start, self.stop = int(start), int(stop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., self.start:self.stop]  # [..., stop - start]


class FusedInput(torch.nn.Module):
    """One matrix multiply for several projections of the same input, then the family's module (``inner``) on
    its result, with those projections as ``Slice``s of it."""

    def __init__(self, inner: torch.nn.Module, weight: torch.Tensor, bias: torch.Tensor | None, names: tuple):
        super().__init__()
        self.inner = inner
        self.names = names
        self.arg = next(iter(inspect.signature(inner.forward).parameters))  # its input's name, when passed by name
        self.register_buffer("weight", weight, persistent=False)  # [sum of outputs, in]
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, *args, **kwargs):
        if args:
            return self.inner(self.project(args[0]), *args[1:], **kwargs)
        return self.inner(**{**kwargs, self.arg: self.project(kwargs[self.arg])})

    def project(self, x: torch.Tensor) -> torch.Tensor:
        # Not ``linear``'s row path: the fused groups read the block's norm, and inductor would inline that norm
        # into its row-times-matrix loop, computing it again for every output (1.00-1.03x eager instead of 1.10x)
        return F.linear(x, self.weight, self.bias)  # [..., in] -> [..., sum of outputs]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear`` as the compiled passes run it: [..., in] -> [..., out]. A single row (a decode step) goes through
    ``bmm`` of [1, 1, in] by the transposed weight. Through ``mm``, inductor hands the row over as a [1, in] view whose
    size-1 dimension has stride 0 (it drops size-1 dimensions from its index), which the CPU and CUDA BLAS paths
    refuse and copy first: one extra copy per projection per step. Through ``bmm`` the row keeps its own buffer; on
    a CPU inductor then writes the row-times-matrix as its own loop, fused with what produced the row (its
    "memory bound" lowering of bmm). Used for projections whose input is already written (the attention's output,
    act(gate) * up): SmolLM2's compiled step on this CPU ran 248 operators instead of 367, as fast within the
    noise (docs/benchmarks.md)."""
    if x.shape[:-1].numel() != 1:
        return F.linear(x, weight, bias)
    y = torch.bmm(x.reshape(1, 1, x.shape[-1]), weight.t().unsqueeze(0))  # [1, 1, out]
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


class Linear(torch.nn.Module):
    """A plain ``nn.Linear`` of the eager model (same parameters) run through ``linear`` in the fused tree."""

    def __init__(self, inner: torch.nn.Linear):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.inner.weight, self.inner.bias)


@dataclass
class FusedModel:
    """``model``: the tree the compiled step runs (the eager model itself when nothing was fused); ``fused``: how
    many groups were fused, by kind; ``refused``: why the rest, or the whole, was not (one line, or None)."""

    model: torch.nn.Module
    fused: dict
    refused: str | None = None

    @property
    def matmuls_saved(self) -> int:
        """Matrix multiplies one step no longer runs: each fused group of n projections runs 1 instead of n."""
        return sum(n * (len(names) - 1) for names, n in self.fused.items())

    def describe(self) -> str:
        parts = [f"{n} x {'+'.join(x.removesuffix('_proj') for x in names)}" for names, n in self.fused.items()]
        done = f"fused {', '.join(parts)} ({self.matmuls_saved} fewer matrix multiplies per step)" if parts else \
            "no projections fused"
        return done + (f"; {self.refused}" if self.refused else "")


def _why_not(mod: torch.nn.Module, names: tuple) -> str | None:
    projs = [getattr(mod, n) for n in names]
    if any(type(p) is not torch.nn.Linear for p in projs):
        return f"{'/'.join(names)} are not all plain linear layers"
    ws = [p.weight for p in projs]
    if len({w.shape[1] for w in ws}) > 1 or len({(w.dtype, w.device) for w in ws}) > 1:
        return f"{'/'.join(names)} differ in input size, dtype or device"
    if len({p.bias is None for p in projs}) > 1:
        return f"{'/'.join(names)}: some have a bias and some do not"
    if len({id(w) for w in ws}) < len(ws):
        return f"{'/'.join(names)} share a weight"
    return None


def _groups(model: torch.nn.Module):
    """(the module, its projection names) for every fusable group under the blocks; and the
    first refusal met."""
    found, refused = [], None
    for i, blk in enumerate(arch.blocks(model)):
        for name, mod in blk.named_modules():
            for names in GROUPS:
                if all(isinstance(getattr(mod, n, None), torch.nn.Module) for n in names):
                    why = _why_not(mod, names)
                    if why:
                        refused = refused or f"block {i} {name}: {why}"
                    else:
                        found.append((mod, names))
    return found, refused


@torch.no_grad()
def _concatenate(mod: torch.nn.Module, names: tuple) -> FusedInput:
    """The group's weights concatenated once, a copy the fused tree holds: the eager parameters are left as they are
    (re-pointed at views of it, they became inference tensors, and the training-memory pass could no longer ask
    them for gradients)."""
    projs = [getattr(mod, n) for n in names]
    weight = torch.cat([p.weight.detach() for p in projs], 0)  # [sum of outputs, in]
    bias = torch.cat([p.bias.detach() for p in projs], 0) if projs[0].bias is not None else None
    inner = copy.copy(mod)
    inner._modules = {n: Linear(m) if type(m) is torch.nn.Linear else m for n, m in mod._modules.items()}
    start = 0
    for n, p in zip(names, projs):
        stop = start + p.weight.shape[0]
        inner._modules[n] = Slice(start, stop)
        start = stop
    return FusedInput(inner, weight, bias, names)


def _rebuilt(mod: torch.nn.Module, path: str, new_at: dict) -> torch.nn.Module:
    """``mod`` (at ``path``) with the modules at ``new_at``'s paths replaced: every module on the way to one is a
    shallow copy with its own child list (parameters, buffers, hooks and config shared); the rest is shared."""
    if path in new_at:
        return new_at[path]
    if not any(p.startswith(path + ".") or not path for p in new_at):
        return mod
    c = copy.copy(mod)
    c._modules = {name: child if child is None else _rebuilt(child, f"{path}.{name}" if path else name, new_at)
                  for name, child in mod._modules.items()}
    return c


_MEMO: "weakref.WeakKeyDictionary[torch.nn.Module, FusedModel]" = weakref.WeakKeyDictionary()


def fuse(model: torch.nn.Module, check: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] | None = None
         ) -> FusedModel:
    """The compiled step's tree for ``model``: projections fused where they can be (see the module docstring), made
    once per model. ``check(module, ids [1, t]) -> logits``: a pass with no cache (engine.core.loop passes its own,
    the one door to the model); with it, the fused tree's logits are compared with the eager model's on a few
    tokens, and a tree that differs is refused."""
    if model in _MEMO:
        return _MEMO[model]
    try:
        groups, refused = _groups(model)
    except ValueError as exc:  # no blocks found: nothing to fuse
        groups, refused = [], str(exc)
    if refused or not groups:
        out = FusedModel(model, {}, refused)
    else:
        paths = {id(m): n for n, m in model.named_modules()}
        new_at, counts = {}, {}
        for mod, names in groups:
            new_at[paths[id(mod)]] = _concatenate(mod, names)
            counts[names] = counts.get(names, 0) + 1
        # Every other plain linear layer runs as rows too (in a Llama: o and down; those inside a fused module were
        # wrapped by ``_concatenate``, since ``_rebuilt`` does not descend into it). The output head stays
        # ``F.linear``: on this project's CPU, BLAS read its [vocab, hidden] weight faster than inductor's loop.
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        for path, mod in model.named_modules():
            inside = any(path.startswith(p + ".") for p in new_at)
            if type(mod) is torch.nn.Linear and mod is not head and not inside:
                new_at[path] = Linear(mod)
        tree = _rebuilt(model, "", new_at)
        out = FusedModel(tree, counts)
        if check is not None:
            why = _differs(model, tree, check)
            if why:
                out = FusedModel(model, {}, why)
    if out.refused:
        log.info("fused projections refused: %s", out.refused)
    _MEMO[model] = out
    return out


def _differs(model: torch.nn.Module, tree: torch.nn.Module, logits_of) -> str | None:
    """Why the fused tree does not compute the eager model's logits on a few tokens, or None."""
    vocab = int(model.get_input_embeddings().weight.shape[0])
    ids = torch.arange(1, CHECK_TOKENS + 1, device=next(model.parameters()).device)[None] % vocab  # [1, t]
    with torch.inference_mode():
        want = logits_of(model, ids).float()  # [1, t, vocab]
        got = logits_of(tree, ids).float()
    err = float((got - want).abs().max())
    scale = max(float(want.abs().max()), 1e-6)
    if not err <= CHECK_RTOL * scale:
        return (f"the fused projections change this model's logits (max difference {err:.3g} of {scale:.3g}), so "
                "the compiled step runs them unfused")
    return None
