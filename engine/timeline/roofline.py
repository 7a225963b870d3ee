"""Where a pass's floor is: this machine's memory bandwidth and matrix-multiply throughput, measured, and the
arithmetic intensity of prefill vs decode against them (the roofline, Williams et al. 2009).

- ``hardware_probe``: memory bandwidth and matrix-multiply throughput of this machine (the matmul in the model's
  dtype); ``roofline_point``: a pass's FLOPs (~ 2 x parameters x tokens, the output head once) over its bytes.
- ``floor_beside_step``: a decode step against its bandwidth floor, the probe measured beside the step, alternating.

Timings follow the house rule (engine/timeline/experiment.py): warm-up first, device sync before each clock read,
medians over repeats with their spread.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.kv import kv_bytes_for
from engine.core.loaded import LoadedModel
from engine.core.loop import decode_step, new_cache, prefill, warm_up
from engine.measure.spread import LESSON_RUNS, Spread, lesson_flags
from engine.measure.timing import now
from engine.models import precision


@dataclass(frozen=True)
class HardwareProbe:
    device: str
    threads: int
    read_gb_s: Spread  # measured: summing a tensor far larger than the caches (bytes read / time)
    copy_gb_s: Spread  # measured: copying it (bytes read + bytes written) / time
    matmul_gflop_s: Spread  # measured: square matmul, 2 n^3 FLOPs / time, in matmul_dtype
    buffer_mb: float
    matmul_n: int
    matmul_dtype: str = "float32"  # the model's own dtype: a bfloat16 model's ridge is a bfloat16 matmul's

    @property
    def ridge(self) -> float:
        """Derived: the roofline's ridge, FLOPs per byte where the matmul peak meets the read bandwidth."""
        return self.matmul_gflop_s.median / self.read_gb_s.median


def hardware_probe(device=None, buffer_mb: int = 256, matmul_n: int = 1024, repeats: int = 5,
                   dtype: torch.dtype = torch.float32, matmul_dtype: torch.dtype | str | None = None) -> HardwareProbe:
    """Memory bandwidth and matmul throughput of this machine, measured (after one warm-up each). The buffers are
    ``dtype`` (bytes are bytes); the matmul runs in ``matmul_dtype`` (the model's dtype; default ``dtype``): a GPU
    multiplies bfloat16 many times faster than float32, which moves the ridge."""
    dev = torch.device(device or "cpu")
    mm_dtype = getattr(torch, matmul_dtype) if isinstance(matmul_dtype, str) else (matmul_dtype or dtype)
    esize = torch.empty((), dtype=dtype).element_size()
    n = int(buffer_mb * 2**20 // esize)
    src = torch.ones(n, dtype=dtype, device=dev)
    dst = torch.empty_like(src)
    a = torch.randn(matmul_n, matmul_n, device=dev).to(mm_dtype)
    b = torch.randn(matmul_n, matmul_n, device=dev).to(mm_dtype)
    read, copy, mm = [], [], []
    for r in range(repeats + 1):
        t0 = now(dev)
        src.sum()
        t1 = now(dev)
        dst.copy_(src)
        t2 = now(dev)
        a @ b
        t3 = now(dev)
        if r:
            nbytes = n * esize
            read.append(nbytes / (t1 - t0) / 1e9)
            copy.append(2 * nbytes / (t2 - t1) / 1e9)
            mm.append(2 * matmul_n**3 / (t3 - t2) / 1e9)
    del src, dst, a, b
    return HardwareProbe(str(dev), torch.get_num_threads(), Spread.of(read), Spread.of(copy), Spread.of(mm),
                         n * esize / 2**20, matmul_n, str(mm_dtype).removeprefix("torch."))


def weight_bytes(lm: LoadedModel) -> int:
    """Bytes of all weights as stored, a tied embedding/head matrix counted once (int8: values + scales)."""
    return precision.weight_bytes(lm.model)


def decode_weight_bytes(lm: LoadedModel) -> int:
    """Weight bytes one decode step must read: every matrix, except an untied input embedding table, of
    which only one row per token is looked up (a tied table is read in full as the output projection)."""
    return precision.decode_weight_bytes(lm.model)


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    tokens: int  # tokens processed by the pass
    context: int  # tokens in the KV cache the pass reads
    flops: float  # derived: 2 x body parameters x tokens + 2 x output head (one position's logits)
    bytes: float  # derived: weights read + KV cache read and written
    intensity: float  # FLOPs per byte
    measured_ms: float  # measured time of such a pass (nan if none given)

    @property
    def achieved_gflop_s(self) -> float:
        return self.flops / (self.measured_ms / 1000.0) / 1e9 if self.measured_ms > 0 else float("nan")


def head_params(lm: LoadedModel) -> int:
    """Parameters of the output head (vocabulary x hidden size): a tied head is the embedding table itself."""
    return int(lm.info.vocab_size) * int(lm.info.hidden_size)


def pass_flops(lm: LoadedModel, tokens: int) -> float:
    """Derived FLOPs of one pass over ``tokens`` tokens that computes only the last position's logits, as the loop
    does (``logits_to_keep=1``): 2 x body parameters x tokens + 2 x head parameters, once. Body = every parameter
    but the embedding table (a lookup, no arithmetic) and an untied head; attention scores ignored (small at these
    lengths). Counting the head at every position would overstate a prefill's FLOPs by the head's share of the
    parameters (SmolLM2: +26%; Gemma 3, whose 262,144-word head is most of it: about 2.6x)."""
    head = head_params(lm)
    body = max(0, lm.info.n_params - head * (1 if lm.info.tied_embeddings else 2))
    return 2.0 * body * int(tokens) + 2.0 * head


def roofline_point(lm: LoadedModel, label: str, tokens: int, context: int, measured_ms: float = float("nan")
                   ) -> RooflinePoint:
    """Arithmetic intensity of one pass: FLOPs (``pass_flops``: the head once) over bytes ~ weights read once + the
    KV cache read (context) and written (tokens)."""
    flops = pass_flops(lm, tokens)
    nbytes = decode_weight_bytes(lm) + kv_bytes_for(lm.info, context + tokens)
    return RooflinePoint(label, int(tokens), int(context), flops, float(nbytes), flops / nbytes, float(measured_ms))


def pass_floor_ms(point: RooflinePoint, read_gb_s: float, matmul_gflop_s: float) -> float:
    """Derived lower bound for a pass under the measured roof: the longer of reading its bytes at the read bandwidth
    and doing its FLOPs at the matmul peak (Williams et al. 2009)."""
    return max(point.bytes / (read_gb_s * 1e9), point.flops / (matmul_gflop_s * 1e9)) * 1000.0


def decode_floor_ms(lm: LoadedModel, read_gb_s: float) -> float:
    """Derived lower bound for one decode step: weight bytes read / memory bandwidth."""
    return decode_weight_bytes(lm) / (read_gb_s * 1e9) * 1000.0


@dataclass(frozen=True)
class FloorCheck:
    """A decode step and the bandwidth probe measured beside it, alternating round by round after a warm-up, so the
    machine's load hits both alike. The probe reads as many bytes as the step (its weights), so the CPU's caches
    can hold as much of one as of the other."""

    device: str
    weight_bytes: int  # derived: the bytes one decode step reads (decode_weight_bytes)
    probe_mb: float  # the probe's buffer
    step_ms: Spread  # measured: one decode step per round
    read_gb_s: Spread  # measured: one sum over the buffer per round (bytes / time)
    floor_ms: Spread  # derived per round: weight bytes / that round's bandwidth

    @property
    def pace(self) -> float:
        """Derived: floor / step (medians); above 1 the step read faster than the probe."""
        return self.floor_ms.median / self.step_ms.median if self.step_ms.median > 0 else float("nan")

    @property
    def flags(self) -> tuple[str, ...]:
        """Why these numbers cannot carry a sentence (engine.measure.spread.lesson_flags); empty when they can."""
        return (lesson_flags(self.step_ms, "the decode step", "ms")
                + lesson_flags(self.read_gb_s, "the bandwidth probe", "GB/s"))


PROBE_MB_MAX = 1024  # the probe's buffer is the step's weight bytes, up to this (and at least 64 MiB)


def floor_beside_step(lm: LoadedModel, ids: list[int], rounds: int = LESSON_RUNS) -> FloorCheck:
    """``rounds`` rounds (at least LESSON_RUNS) after one warm-up round, each a bandwidth probe then a decode step
    (the next token of a greedy run after ``ids``), every clock read after a device sync."""
    rounds = max(LESSON_RUNS, int(rounds))
    dev = lm.device
    wbytes = decode_weight_bytes(lm)
    mb = min(PROBE_MB_MAX, max(64, wbytes / 2**20))
    buf = torch.ones(int(mb * 2**20) // 4, dtype=torch.float32, device=dev)
    nbytes = buf.numel() * 4
    tokens = len(ids) + rounds + 2
    warm_up(lm, tokens)
    cache = new_cache(lm, tokens=tokens)
    tok = prefill(lm, torch.tensor([list(ids)], device=dev), cache).argmax(-1, keepdim=True)  # [1, 1]
    steps, reads = [], []
    for r in range(rounds + 1):  # round 0 warms up both
        t0 = now(dev)
        buf.sum()
        t1 = now(dev)
        tok = decode_step(lm, tok, cache).argmax(-1, keepdim=True)  # [1, 1]
        t2 = now(dev)
        if r:
            reads.append(nbytes / (t1 - t0) / 1e9)
            steps.append((t2 - t1) * 1000.0)
    del buf
    return FloorCheck(str(dev), wbytes, nbytes / 2**20, Spread.of(steps), Spread.of(reads),
                      Spread.of([wbytes / (g * 1e9) * 1000.0 for g in reads]))
