"""Where one step's time goes, kernel by kernel: a prefill and a decode step traced with ``torch.profiler``.

Two lanes, as a GPU profiler draws them:
- host: the work the CPU thread does to run the step: each operator called from Python (``aten::...``) or the
  compiled graph's call, with Python and dispatch in between;
- device: on a GPU the kernels it ran, its memory copies and memsets (CUDA events; never a profiler annotation,
  which on a GPU also shows up as a CUDA event: the step's own ``ile_step`` range spans the whole step, and
  counted as a kernel it would make the device look busy all along); on a CPU, where host and device are one
  thread, the operators that do their own work (aten operators and compiled kernels with most of their time their
  own, not their callees': ``aten::linear`` is a wrapper, the ``aten::mm`` under it a kernel; one that only views,
  reshapes or allocates, ``METADATA``, is not counted): the time spent computing.

From them: the number of kernels (GPU) or operators (CPU) per step, the device's busy time (the union of its
spans) as a share of the step's wall clock, and the operators that took the most time. ``regime`` names what limits
the step from those numbers and the roofline (Williams et al. 2009): launch/dispatch-bound (the device idle most
of the step), compute-bound (a pass whose FLOPs per byte pass the ridge of the measured roofline), else
bandwidth-bound (and how close to its floor).

The profiler adds its own bookkeeping to every operator, so a traced step is slower than a plain one
(``plain_ms`` is the same step unprofiled, median of repeats); the busy share is of the traced step.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from engine.core import loop
from engine.core.compiled import mode_of
from engine.core.loaded import LoadedModel, Mode
from engine.measure.spread import LESSON_RUNS, Spread
from engine.measure.timing import now

STEP = "ile_step"  # the profiler range around the traced pass
MAX_SPANS = 4000  # spans kept per lane for drawing (a GPU prefill can launch more); counts use all of them
TOP = 8
# Annotations the profiler or torch.compile's runtime add around the real work: neither operators nor kernels.
_NOT_OPS = ("TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher Runtime Wrapper Prologue",
            "Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph", STEP)
# aten operators that only describe, view, reshape or allocate memory: no arithmetic, no copy of data. (aten::mm
# on a CPU calls aten::resolve_conj: without this list the matrix multiply would not be an innermost operator.)
METADATA = frozenset(f"aten::{n}" for n in (
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "transpose", "t", "permute", "unsqueeze", "squeeze",
    "slice", "select", "narrow", "split", "unbind", "chunk", "alias", "detach", "contiguous", "resolve_conj",
    "resolve_neg", "empty", "empty_strided", "empty_like", "result_type", "lift_fresh", "_reshape_alias",
    "is_nonzero", "item", "_local_scalar_dense", "size", "stride", "numel", "dim", "flatten", "unflatten", "view_as",
    "expand_as", "broadcast_tensors", "type_as", "to", "_to_copy", "index_select_backward"))


KINDS = ("matmul", "attention", "norm", "copy", "elementwise")
# By the operator's own name (aten, CUDA libraries), then by what a fused kernel's name says it holds: inductor
# names a kernel after the operators fused into it, so a kernel with a norm's rsqrt in it is a norm even when a
# residual add rides along, and one that writes the KV cache (index_copy) is a copy.
_MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::_weight_int8pack_mm",
           "mkldnn::_linear_pointwise", "mkl_linear", "gemm", "gemv", "cutlass", "xmma", "sgemm", "splitk", "cublas")
_ATTENTION = ("scaled_dot_product", "flash_fwd", "fmha", "attention_kernel", "efficient_attention")
_NORM = ("rsqrt", "layer_norm", "rms_norm", "native_layer_norm", "group_norm")
_COPY = ("copy_", "index_copy", "index_put", "clone", "aten::cat", "memcpy", "memset", "aten::fill_", "aten::zero_")


def kind_of(name: str) -> str:
    """The kind of a kernel or operator (``KINDS``), from its name."""
    n = name.lower()
    fused = "fused" in n or n.startswith(("triton_", "graph_"))
    if not fused and any(k in n for k in _MATMUL):
        return "matmul"
    if fused and "_bmm_" in n:  # inductor's own row-times-matrix loop (a one-row bmm), whatever rides along
        return "matmul"
    if not fused and any(k in n for k in _ATTENTION):
        return "attention"
    if any(k in n for k in _NORM):
        return "norm"
    if any(k in n for k in _COPY):
        return "copy"
    return "elementwise"


@dataclass(frozen=True)
class Span:
    lane: str  # "host" | "device"
    name: str
    start_ms: float  # from the start of the step
    ms: float


@dataclass(frozen=True)
class OpTime:
    name: str
    ms: float  # total time in this operator or kernel over the step (device lane)
    count: int


@dataclass(frozen=True)
class StepProfile:
    phase: str  # "prefill" | "decode"
    mode: Mode  # the model's engine mode
    device: str  # "cpu" | "cuda"
    tokens_in: int
    context: int  # tokens in the KV cache after the pass
    wall_ms: float  # measured: the traced step's wall clock (profiler bookkeeping included)
    plain_ms: float  # measured: the same step without the profiler, median of repeats
    ops: int  # kernels launched (GPU) or innermost operators run (CPU)
    device_busy_ms: float  # union of the device lane's spans
    spans: tuple[Span, ...]
    top_ops: tuple[OpTime, ...]
    graph: bool = False  # the pass ran as the compiled graph (compiled mode's decode step; a prefill never does)
    plain: Spread = field(default_factory=lambda: Spread.of(()))  # the untraced runs: median, range, count
    kinds: tuple = ()  # (kind, count) for each of KINDS: the step's kernels (operators) by kind_of, all counted
    layers: int = 0  # the model's blocks, for per-layer counts

    @property
    def by_kind(self) -> dict:
        return dict(self.kinds)

    def per_layer(self) -> dict:
        """Kernels (operators) per layer of each kind: the step's count / the blocks (derived; the head's matrix
        multiply and the final norm are spread over the layers too)."""
        return {k: n / self.layers for k, n in self.kinds} if self.layers else {}

    @property
    def device_busy_fraction(self) -> float:
        return min(1.0, self.device_busy_ms / self.wall_ms) if self.wall_ms > 0 else float("nan")

    @property
    def op_word(self) -> str:
        return "kernels" if self.device == "cuda" else "operators"

    def to_dict(self) -> dict:
        return {"phase": self.phase, "mode": self.mode, "ran_as_graph": self.graph, "device": self.device,
                "tokens_in": self.tokens_in,
                "context": self.context, "wall_ms": self.wall_ms, "plain_ms": self.plain_ms,
                "ops_per_step": self.ops, "ops_are": self.op_word, "ops_by_kind": self.by_kind,
                "ops_per_layer_by_kind": self.per_layer(), "device_busy_ms": self.device_busy_ms,
                "device_busy_fraction": self.device_busy_fraction, "plain_ms_range": [self.plain.lo, self.plain.hi],
                "plain_runs": self.plain.n,
                "top_ops": [{"name": o.name, "ms": o.ms, "count": o.count} for o in self.top_ops]}


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end] intervals."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _is_op(e) -> bool:
    return not any(e.name.startswith(n) for n in _NOT_OPS)


OWN_WORK = 0.5  # a CPU operator is a kernel when at least this share of its time is its own (not its callees')


def _cpu_kernel(e) -> bool:
    """An operator that computes and does its own work: not METADATA, not a profiler annotation, and either calls
    nothing or spends most of its time itself (aten::mm that first clones a strided input is still the multiply;
    aten::linear, whose time is all aten::mm's, is not)."""
    if not _is_op(e) or e.name in METADATA:
        return False
    span = e.time_range.end - e.time_range.start
    return not e.cpu_children or e.self_cpu_time_total >= OWN_WORK * span


# What a GPU does of its own (kineto's activity types): kernels, copies and memsets. Everything else on the device
# timeline (a "gpu_user_annotation": a record_function range, the step's own included) is a label, not work.
DEVICE_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel"})


def is_device_work(e) -> bool:
    """A GPU event that is work (a kernel, memcpy or memset), not a profiler annotation. Older torch has no
    ``activity_type`` on its events: then the annotation flag and the names of the ranges decide."""
    if e.device_type == torch.autograd.DeviceType.CPU or getattr(e, "is_user_annotation", False):
        return False
    kind = getattr(e, "activity_type", None)
    if kind is not None:
        return kind in DEVICE_WORK
    return _is_op(e)


def _lanes(events, on_gpu: bool) -> tuple[float, float, list, list]:
    """(step start us, step end us, host events, device events) of the traced step."""
    step = next(e for e in events if e.name == STEP and e.device_type == torch.autograd.DeviceType.CPU)
    t0, t1 = step.time_range.start, step.time_range.end
    cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and e is not step
           and t0 <= e.time_range.start and e.time_range.end <= t1]
    host = [e for e in cpu if e.cpu_parent is None or e.cpu_parent.name == STEP]
    if on_gpu:
        device = [e for e in events if is_device_work(e) and e.time_range.start >= t0]
    else:
        device = [e for e in cpu if _cpu_kernel(e)]
    return t0, t1, host, device


def summarise(events, phase: str, mode: str, device: str, tokens_in: int, context: int, plain_ms: float,
              graph: bool = False, plain: Spread | None = None, layers: int = 0) -> StepProfile:
    """A StepProfile from the profiler's events of one traced step (the STEP range around it); ``plain``: the
    untraced runs whose median is ``plain_ms``; ``layers``: the model's blocks, for per-layer counts."""
    on_gpu = device == "cuda"
    t0, t1, host, dev = _lanes(events, on_gpu)
    end = max([t1] + [e.time_range.end for e in dev])  # a GPU may finish after the host range closed
    ms = lambda us: us / 1000.0  # noqa: E731
    spans = [Span("host", e.name, ms(e.time_range.start - t0), ms(e.time_range.end - e.time_range.start))
             for e in host[:MAX_SPANS]]
    spans += [Span("device", e.name, ms(e.time_range.start - t0), ms(e.time_range.end - e.time_range.start))
              for e in dev[:MAX_SPANS]]
    per: dict[str, list[float]] = defaultdict(list)
    for e in dev:
        per[e.name].append(ms(e.time_range.end - e.time_range.start))
    top = sorted((OpTime(n, sum(v), len(v)) for n, v in per.items()), key=lambda o: -o.ms)[:TOP]
    busy = ms(_union_ms([(e.time_range.start, e.time_range.end) for e in dev]))
    kinds = {k: 0 for k in KINDS}
    for e in dev:
        kinds[kind_of(e.name)] += 1
    return StepProfile(phase, mode, device, int(tokens_in), int(context), ms(end - t0), float(plain_ms), len(dev),
                       busy, tuple(spans), tuple(top), bool(graph), plain if plain is not None else Spread.of(()),
                       tuple(kinds.items()), int(layers))


def _traced(lm, run, dev) -> tuple:
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        with record_function(STEP):
            out = run()
        now(dev)  # the device's work belongs to the step: wait for it inside the traced window
    return out, prof.events()


def profile_steps(lm: LoadedModel, ids: list[int], repeats: int = LESSON_RUNS) -> tuple[StepProfile, StepProfile]:
    """(prefill, decode): one prefill over ``ids`` and one decode step after it, each traced once and also timed
    plain (``repeats`` times, median), on the loop this model runs (compiled mode: the decode step is its graph,
    warmed up first so no compile is traced)."""
    dev = lm.device
    tokens = len(ids) + 2
    loop.warm_up(lm, tokens)
    x = torch.tensor([list(ids)], device=dev)  # [1, n]

    def fresh():
        return loop.new_cache(lm, tokens=tokens)

    plain_pre, plain_dec = [], []
    for _ in range(max(1, int(repeats))):
        cache = fresh()
        t0 = now(dev)
        logits = loop.prefill(lm, x, cache)  # [1, vocab]
        t1 = now(dev)
        tok = logits.argmax(-1, keepdim=True)  # [1, 1]
        t2 = now(dev)
        loop.decode_step(lm, tok, cache)
        plain_pre.append((t1 - t0) * 1000.0)
        plain_dec.append((now(dev) - t2) * 1000.0)
    cache = fresh()
    logits, ev_pre = _traced(lm, lambda: loop.prefill(lm, x, cache), dev)
    tok = logits.argmax(-1, keepdim=True)  # [1, 1]
    served = loop.served_compiled(lm, cache)
    _, ev_dec = _traced(lm, lambda: loop.decode_step(lm, tok, cache), dev)
    layers = lm.info.n_layers
    pre = summarise(ev_pre, "prefill", mode_of(lm), dev.type, len(ids), len(ids), statistics.median(plain_pre),
                    plain=Spread.of(plain_pre), layers=layers)
    dec = summarise(ev_dec, "decode", mode_of(lm), dev.type, 1, len(ids) + 1, statistics.median(plain_dec),
                    graph=served, plain=Spread.of(plain_dec), layers=layers)
    return pre, dec


@dataclass(frozen=True)
class Regime:
    name: str  # "launch/dispatch-bound" | "compute-bound" | "bandwidth-bound"
    reason: str  # the numbers that name it, in one sentence


BUSY_BELOW = 0.5  # a device idle more than half of the step is waiting on the host
NEAR_FLOOR = 0.5  # a step at least this share of its floor's pace is bound by the roof it is under


def pace(p: StepProfile, floor_ms: float) -> float:
    """The step's pace against its floor: floor / untraced time (1 = as fast as the roof allows; nan: unknown)."""
    return floor_ms / p.plain_ms if p.plain_ms > 0 and floor_ms > 0 else float("nan")


def regime(p: StepProfile, floor_ms: float, intensity: float, ridge: float) -> Regime:
    """What limits this step, named from its measured pace first (Williams et al. 2009's roofline): ``floor_ms`` is
    the pass's floor under the measured roof (max of bytes / read bandwidth and FLOPs / matmul FLOP/s), ``ridge``
    the roof's ridge (matmul FLOP/s / read bandwidth, the matmul in the model's dtype).

    - near its floor (pace >= NEAR_FLOOR): bound by the roof it is under, compute past the ridge, else bandwidth;
    - else, the device idle most of the traced step: launch/dispatch-bound, whatever its FLOPs per byte;
    - else (busy, yet far from the floor): the roof it is under, its kernels reaching only part of it."""
    busy, at = p.device_busy_fraction, pace(p, floor_ms)
    where = (f"the step runs at {at:.1%} of its floor's pace ({p.plain_ms:.2f} ms untraced vs a floor of "
             f"{floor_ms:.3g} ms)" if at == at else f"the step takes {p.plain_ms:.2f} ms untraced")
    dev = "GPU" if p.device == "cuda" else "CPU"
    if not at >= NEAR_FLOOR and busy < BUSY_BELOW:
        return Regime("launch/dispatch-bound",
                      f"{where}, and the {dev} computes only {busy:.0%} of the traced step; the rest is the host "
                      f"calling {p.ops:,} {p.op_word} one by one")
    if intensity >= ridge:
        near = "close to its floor" if at >= NEAR_FLOOR else "its kernels reach only part of the arithmetic peak"
        return Regime("compute-bound",
                      f"{where}: {near}; {intensity:,.0f} FLOPs per byte is past the roofline's ridge ({ridge:,.0f}), "
                      "so the arithmetic, not the memory, sets the pace")
    near = "close to its floor" if at >= NEAR_FLOOR else "its kernels reach only part of the bandwidth"
    return Regime("bandwidth-bound",
                  f"{where}: {near}; busy {busy:.0%} of the traced step at {intensity:,.1f} FLOPs per byte (ridge "
                  f"{ridge:,.0f})")
