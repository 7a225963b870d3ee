"""Precision of a loaded model: float32, bfloat16, float16 (CUDA only) or int8 weights.

A precision is part of a loaded model's identity: ``to_precision`` returns a *new* LoadedModel (a copy cast or
quantized), never changing the model it was given, which other sessions may be using. Its reference
(engine.core.loaded.ModelRef) carries the precision ("" for the device's default, ``model_ref``), so anything kept
per model reference is kept per (model, precision); the engine mode is the reference's third field
(engine.core.compiled).

int8 means 8-bit integer weights with a scale, activations quantized on the fly per token ("dynamic"), the
matrix multiplies done in int8 with int32 accumulation (Jacob et al. 2018, arXiv:1712.05877):
- on CUDA, torchao's ``Int8DynamicActivationInt8WeightConfig`` via ``quantize_`` (its current home);
- on CPU, ``torch.ao.quantization.quantize_dynamic`` (FBGEMM/oneDNN VNNI kernels): torchao's int8 configs have no
  fast CPU kernel behind them and decoded slower than float32, while torch.ao's ran faster (docs/benchmarks.md).
  So torch.ao, deprecated but still shipped with torch 2.13 and fast on CPU, is the documented fallback there;
  torchao is not needed on a CPU machine. Decode steps run on one thread (engine/measure/threads.py): each of
  int8's ~180 small matrix multiplies per step would otherwise wake the sleeping second thread.
Only ``nn.Linear`` layers are quantized (the embedding table is looked up, not multiplied), except the MLP's
``down_proj``: its input carries the model's outlier activations (Dettmers et al. 2022, LLM.int8(),
arXiv:2208.07339), and 8-bit dynamic quantization of them wrecks SmolLM2-135M's agreement with float32 (per-channel
weight scales do not help: the loss is in the activations). Before quantizing, SmoothQuant scales are folded into
the RMSNorm weights (engine/models/smoothing.py: exact in float32) and weights get a scale per output row, which
brings top-1 agreement back at the same speed (figures in docs/benchmarks.md). The KV cache and activations
between layers stay in the compute dtype (float32 on CPU).
"""
from __future__ import annotations

import copy
import importlib.util
import warnings
from dataclasses import replace

import torch

from engine.models import smoothing
from engine.core.compiled import DEFAULT_MODE
from engine.core.loaded import PRECISIONS, LoadedModel, ModelLoadError, ModelRef  # noqa: F401  (PRECISIONS: here too)

LABELS = {
    "float32": "float32 (4 bytes per weight)",
    "bfloat16": "bfloat16 (2 bytes per weight)",
    "float16": "float16 (2 bytes per weight)",
    "int8": "int8 weights (1 byte per weight + scales)",
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The MLP's output projection under each family's name (Llama down_proj, GPT-2 mlp.c_proj, OPT/Phi fc2, GPT-NeoX/
# Falcon/Bloom dense_4h_to_h, GPT-J/CodeGen fc_out): its input carries the outlier activations (module docstring).
INT8_KEEP_FLOAT = ("down_proj", "mlp.c_proj", "fc2", "dense_4h_to_h", "fc_out")


class PrecisionError(ModelLoadError):
    """A precision this device or installation cannot run; the message says why."""


def default_precision(device) -> str:
    """float32 on CPU (the model's own values); bfloat16 on a GPU that supports it, else float16."""
    if torch.device(device).type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def int8_backend(device) -> str | None:
    """Which library quantizes to int8 on this device, or None if none is available."""
    if torch.device(device).type == "cuda":
        return "torchao" if importlib.util.find_spec("torchao") is not None else None
    engines = set(torch.backends.quantized.supported_engines) - {"none"}
    return "torch.ao" if engines else None


def unsupported_reason(precision: str, device) -> str | None:
    """None if ``precision`` runs on ``device``; else a sentence for the person who asked for it."""
    dev = torch.device(device)
    if precision not in PRECISIONS:
        return f"'{precision}' is not a precision this app knows; choose one of {', '.join(PRECISIONS)}."
    if precision == "float16" and dev.type != "cuda":
        return "float16 runs only on a CUDA GPU here (CPU float16 matrix multiplies are emulated and slow)."
    if precision == "bfloat16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "This GPU has no bfloat16 support; use float16."
    if precision == "int8" and int8_backend(dev) is None:
        return ("int8 needs torchao on a GPU (pip install torchao)." if dev.type == "cuda" else
                "int8 needs PyTorch's quantized CPU kernels, which this PyTorch build lacks.")
    return None


def supported(device) -> tuple[str, ...]:
    return tuple(p for p in PRECISIONS if unsupported_reason(p, device) is None)


def model_ref(name: str, precision: str, device, mode: str = DEFAULT_MODE) -> ModelRef:
    """The reference of model ``name`` at ``precision`` in engine ``mode`` on ``device``: the device's default
    precision is "" (the weights as loaded), so a setting that names it and a model loaded without one are one
    reference, one cache entry."""
    return ModelRef(name, "" if precision == default_precision(device) else precision, mode)


def _as_plain_linear(model: torch.nn.Module) -> list[str]:
    """Replace, in place, each family's own linear layer types by ``nn.Linear`` computing the same thing, so the
    int8 quantizer (which swaps exact ``nn.Linear`` modules) sees them: GPT-2's Conv1D (y = x W + b, W stored
    [in, out]) and subclasses of nn.Linear (Falcon's FalconLinear), each checked on a random input. Returns the
    names of weight-bearing layers left as they were (a type with other maths)."""
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # pragma: no cover
        Conv1D = ()
    left = []
    for name, mod in list(model.named_modules()):
        if not name or type(mod) is torch.nn.Linear:
            continue
        if Conv1D and isinstance(mod, Conv1D):
            w = mod.weight  # [in, out]
            lin = torch.nn.Linear(w.shape[0], w.shape[1], bias=mod.bias is not None, device=w.device, dtype=w.dtype)
            with torch.no_grad():
                lin.weight.copy_(w.T)
                if mod.bias is not None:
                    lin.bias.copy_(mod.bias)
        elif isinstance(mod, torch.nn.Linear):
            lin = torch.nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None,
                                  device=mod.weight.device, dtype=mod.weight.dtype)
            lin.weight, lin.bias = mod.weight, mod.bias
        else:
            continue
        with torch.no_grad():
            x = torch.randn(3, lin.in_features, dtype=lin.weight.dtype, device=lin.weight.device)
            if not torch.allclose(mod(x), lin(x), atol=1e-4, rtol=1e-4):
                left.append(name)
                continue
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, lin)
    return left


def _tied_head_name(model: torch.nn.Module) -> str | None:
    """The name of the output head when it shares its weight with the input embedding table, else None."""
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or getattr(head, "weight", None) is None or head.weight.data_ptr() != emb.weight.data_ptr():
        return None
    return next((n for n, m in model.named_modules() if m is head), None)


def _quantize_int8(model: torch.nn.Module, device, skip: tuple[str, ...] = (), only: str | None = None
                   ) -> torch.nn.Module:
    ok = lambda name: name == only if only is not None else _quantized(name) and name not in skip  # noqa: E731
    if int8_backend(device) == "torchao":
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        quantize_(model, Int8DynamicActivationInt8WeightConfig(),
                  filter_fn=lambda mod, fqn: isinstance(mod, torch.nn.Linear) and ok(fqn))
        return model
    with warnings.catch_warnings():  # torch.ao's deprecation notice: see the module docstring for why it is used
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        # a scale per output row of each weight: with smoothing (engine/models/smoothing.py) it agrees with float32 more
        # often than one scale per tensor (docs/benchmarks.md)
        spec = {n: per_channel_dynamic_qconfig for n, m in model.named_modules()
                if isinstance(m, torch.nn.Linear) and ok(n)}
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)


def _quantized(name: str) -> bool:
    return not any(name.endswith(k) for k in INT8_KEEP_FLOAT)


def to_precision(lm: LoadedModel, precision: str) -> LoadedModel:
    """A copy of ``lm`` at ``precision`` (``lm`` itself if it already is). Raises PrecisionError if unsupported."""
    current = lm_precision(lm)
    if precision == current:
        return lm
    reason = unsupported_reason(precision, lm.device)
    if reason:
        raise PrecisionError(reason)
    if current != "float32" and current != default_precision(lm.device):
        raise PrecisionError(f"Convert from the model's default precision, not from {current}.")
    try:
        return _converted(lm, precision)
    except PrecisionError:
        raise
    except Exception as exc:  # a model whose layers a quantizer or cast cannot handle: say so, do not crash
        raise PrecisionError(f"Could not convert {lm.name} to {precision}: {type(exc).__name__}: "
                             f"{str(exc)[:200]}") from exc


def _converted(lm: LoadedModel, precision: str) -> LoadedModel:
    model = copy.deepcopy(lm.model)
    # RoPE's inverse frequencies stay float32: in 16 bits, positions past a few hundred lose their angle.
    keep = {n: b.clone() for n, b in lm.model.named_buffers() if n.endswith("inv_freq")}
    notes: tuple = ()
    if precision == "int8":
        model, notes = _int8_copy(lm, model)
        dtype = "float32" if lm.device.type == "cpu" else lm.info.dtype
    else:
        model = model.to(DTYPES[precision])
        dtype = precision
    for n, b in keep.items():
        mod_name, _, buf = n.rpartition(".")
        model.get_submodule(mod_name).register_buffer(buf, b.float(), persistent=False)
    info = replace(lm.info, dtype=dtype, int8_float=notes)
    # a copy is eager: to_mode compiles it
    return LoadedModel(lm.ref.at(precision, DEFAULT_MODE), model, lm.tokenizer, info)


def _int8_copy(lm: LoadedModel, model: torch.nn.Module) -> tuple[torch.nn.Module, tuple[str, ...]]:
    """``model`` (a private copy of ``lm.model``) with its linear layers in int8, and one line per kind of layer
    left in float and why. A head tied to the embedding table is quantized only if the model still shrinks
    (its int8 copy is extra bytes: the table itself stays float for the lookup)."""
    model = model.float() if lm.device.type == "cpu" else model
    left = _as_plain_linear(model)
    smoothed = smoothing.smooth(model, smoothing.calibration_ids(lm.tokenizer))  # exact; eases quantization
    notes = []
    kept = sorted({k for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and not _quantized(n)
                   for k in INT8_KEEP_FLOAT if n.endswith(k)})
    if kept:
        notes.append(f"MLP output projections ({', '.join(kept)}) stay float: their inputs carry outlier "
                     "activations that 8-bit dynamic quantization wrecks")
    if left:
        notes.append(f"{len(left)} layers of a type with other maths stay float ({', '.join(left[:3])})")
    if not smoothed:
        notes.append(f"no SmoothQuant: its scales are folded into RMSNorm weights only for known layouts "
                     f"({', '.join(smoothing.SUPPORTED_TYPES)}), not {lm.info.model_type}")
    head = _tied_head_name(model)
    if head is None:
        return _quantize_int8(model, lm.device), tuple(notes)
    before = weight_bytes(lm.model)
    w = model.get_submodule(head).weight
    head_cost = w.numel() + w.shape[0] * 16  # int8 values + a float64 scale and an int64 zero point per row
    model = _quantize_int8(model, lm.device, skip=(head,))
    if weight_bytes(model) + head_cost < before:
        return _quantize_int8(model, lm.device, only=head), tuple(notes)
    notes.append("the output head stays float: it is the embedding table itself (tied), and an int8 copy of it "
                 "would make this small model bigger")
    return model, tuple(notes)


def lm_precision(lm: LoadedModel) -> str:
    return lm.ref.precision or lm.info.dtype


# ------------------------------------------------------------------------------------------ weight bytes


def _tensor_bytes(t) -> int:
    """Bytes a tensor really stores: a tensor subclass (torchao) is the sum of its inner tensors; a quantized
    tensor (torch.ao) is its int8 values plus its scale and zero point."""
    if hasattr(t, "__tensor_flatten__") and type(t) not in (torch.Tensor, torch.nn.Parameter):
        names, _ = t.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in names)
    if t.is_quantized:
        extra = 8 if t.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric) else \
            t.q_per_channel_scales().numel() * 8 + t.q_per_channel_zero_points().numel() * 8
        return t.numel() * t.element_size() + extra
    return t.numel() * t.element_size()


def _weights(model: torch.nn.Module):
    """(dedup key or None, tensor) for every parameter, plus the weight and bias of torch.ao quantized linear
    layers (static or dynamic; unpacked on request: fresh tensors each time, so never deduplicated by address)."""
    for mod in model.modules():
        for p in mod.parameters(recurse=False):
            yield _key(p), p
        if isinstance(mod, torch.ao.nn.quantized.Linear):
            yield None, mod.weight()
            if mod.bias() is not None:
                yield None, mod.bias()


def _key(t) -> int:
    try:
        return t.data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor subclass without its own storage
        return id(t)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of all weights as stored (tied matrices counted once; int8 weights with their scales)."""
    seen, total = set(), 0
    for k, t in _weights(model):
        if k is None or k not in seen:
            seen.add(k)
            total += _tensor_bytes(t)
    return total


def decode_weight_bytes(model: torch.nn.Module) -> int:
    """Weight bytes one decode step reads: everything except the input embedding table, of which one row per
    token is looked up, unless that same table is the output projection (tied, then read in full)."""
    emb = model.get_input_embeddings().weight
    head = getattr(model.get_output_embeddings(), "weight", None)
    tied = isinstance(head, torch.Tensor) and _key(head) == _key(emb)
    return weight_bytes(model) - (0 if tied else _tensor_bytes(emb))
