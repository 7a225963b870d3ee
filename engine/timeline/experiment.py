"""Prefill vs decode, and where the time goes: measurements of the inference loop on this machine.

Every function here runs the real model and returns a frozen record of plain values:

- ``timeline``: a trace's steps laid end to end in milliseconds (a Gantt chart's bars), with time to first
  token (TTFT), time per output token (TPOT: median and spread) and tokens/s.
- ``prompt_length_sweep``: measured TTFT and TPOT for several prompt lengths (warm-up, medians of repeats).
- ``cache_comparison``: greedy decoding with the KV cache vs recomputing the whole sequence every step.
- ``stage_breakdown``: time per stage of one forward pass (embedding, attention, MLP, norms, output
  projection, sampling), measured with module pre-/post-hooks that sync the device and read the clock.

The machine's floors (the hardware probe, the roofline, a decode step beside its bandwidth floor) are
engine/timeline/roofline.py's; training vs inference memory is engine/timeline/memory.py's.

Timings follow the house rule: warm-up first, device sync before each clock read, medians over repeats,
and the spread (min..max over repeats) reported beside every median. The machine may be shared: the spread
is the honest part of the number.
"""
from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from engine.core import arch
from engine.core.loaded import LoadedModel, Mode
from engine.core.prompt import token_text
from engine.core.sampling import SamplingSettings, make_generator, sample
from engine.measure.timing import now
from engine.core.trace import Trace
from engine.core.loop import decode_step, full_pass, new_cache, prefill, timed_greedy, warm_up
from engine.core.prefill_buckets import PrefillMode, run_tokens
from engine.measure.spread import Spread
from engine.timeline import SWEEP_LENGTHS

Progress = Callable[[float, str], None]  # (fraction done 0..1, message)

STAGES = ("embedding", "attention", "MLP", "norms", "output projection", "sampling", "other")
SWEEP_TEXT = (
    "The inference loop of a language model has two phases. Prefill reads the whole prompt in one pass and "
    "fills the key-value cache; decode then produces one token per pass, reading every weight each time. "
)


def _noop(frac: float, msg: str) -> None:
    pass




# ---------------------------------------------------------------------------------------------- timeline


@dataclass(frozen=True)
class TimelineBar:
    index: int
    phase: str  # "prefill" | "decode"
    tokens_in: int
    start_ms: float
    ms: float
    token: str


@dataclass(frozen=True)
class Timeline:
    bars: tuple[TimelineBar, ...]
    prompt_tokens: int
    new_tokens: int
    ttft_ms: float  # measured: the prefill pass plus sampling the first token
    tpot_ms: Spread  # measured: decode steps (median, min..max)
    total_ms: float
    tokens_per_s: float  # new tokens / total time of all passes
    decode_tokens_per_s: float  # 1000 / median decode step


def timeline(trace: Trace) -> Timeline:
    """The trace's passes laid end to end on one time axis (milliseconds). Times are the trace's own
    measurements (forward pass + sampling, after a device sync); the loop's bookkeeping between passes
    (well under a millisecond) is not drawn."""
    bars, t = [], 0.0
    for s in trace.steps:
        ms = s.seconds * 1000.0
        bars.append(TimelineBar(s.index, s.phase, s.tokens_in, t, ms, s.token))
        t += ms
    decode = [s.seconds * 1000.0 for s in trace.steps if s.phase == "decode"]
    tpot = Spread.of(decode)
    return Timeline(
        bars=tuple(bars), prompt_tokens=len(trace.prompt_ids), new_tokens=len(trace.generated_ids),
        ttft_ms=trace.ttft * 1000.0, tpot_ms=tpot, total_ms=t,
        tokens_per_s=len(trace.generated_ids) / (t / 1000.0) if t > 0 else float("nan"),
        decode_tokens_per_s=1000.0 / tpot.median if decode and tpot.median > 0 else float("nan"),
    )


# ------------------------------------------------------------------------------------------ length sweep


@dataclass(frozen=True)
class SweepRow:
    prompt_tokens: int
    ttft_ms: Spread  # measured over repeats
    tpot_ms: Spread  # median decode step of each repeat, then median (and range) over repeats
    # how its prefill ran in the timed repeats: "compiled" (its bucket's graph, padded to the bucket) in every one,
    # else "eager"; ``prefill`` says it in words, and why it was eager (engine.core.prefill_buckets.PrefillMode.line)
    prefill_mode: Mode = Mode.EAGER
    prefill: str = "eager"


@dataclass(frozen=True)
class Sweep:
    rows: tuple[SweepRow, ...]
    new_tokens: int
    repeats: int


def sweep_prompt(lm: LoadedModel, length: int) -> list[int]:
    """A natural-looking prompt of exactly ``length`` tokens (a fixed paragraph, repeated and cut)."""
    base = lm.tokenizer(SWEEP_TEXT, add_special_tokens=False)["input_ids"]
    reps = length // len(base) + 1
    return (base * reps)[:length]


def _timed_generate(lm: LoadedModel, ids: list[int], new_tokens: int, reserve: int = 0,
                    on_prefill: Callable[[PrefillMode], None] | None = None) -> tuple[float, list[float]]:
    """Greedy prefill + decode with the cache; returns (TTFT seconds, decode step seconds). Compiled mode: the
    prefill runs as its bucket's graph where that is compiled (``sweep_graphs``), and ``on_prefill`` hears which."""
    _, first, steps = timed_greedy(lm, ids, new_tokens, reserve=reserve, on_prefill=on_prefill)
    return first, steps


def sweep_reserve(lm: LoadedModel, lengths, new_tokens: int, reserve: int = 0) -> int:
    """The tokens the sweep's one static cache holds (compiled mode): at least ``reserve``, the longest prompt and its
    new tokens, and that prompt's prefill bucket (``run_tokens``), so every length's bucket fits one decode graph's
    cache."""
    longest = max((int(n) for n in lengths), default=0)
    return run_tokens(lm, longest, max(int(reserve), longest + max(2, int(new_tokens))))


def sweep_graphs(lm: LoadedModel, lengths, new_tokens: int, reserve: int = 0) -> list[tuple[str, Callable, tuple]]:
    """Compiled mode: the graphs a sweep of these prompt lengths needs and does not have yet (the decode step on its
    one static cache, then each length's prefill bucket: engine.core.background_compile.run_graphs), as (graph
    name, fn, args): the app's background compiler compiles them, the command line before its sweep
    (``warm_sweep``). The sweep itself never compiles one: a length whose graph is not ready runs eager and says
    so."""
    from engine.core.background_compile import run_graphs  # compiled mode's compiler, imported where it is asked for

    lengths = sorted({int(n) for n in lengths if int(n) > 0})
    reserve = sweep_reserve(lm, lengths, new_tokens, reserve)
    out: dict[str, tuple[str, Callable, tuple]] = {}
    for n in lengths:
        for name, fn, args in run_graphs(lm, n, reserve):
            out.setdefault(name, (name, fn, args))
    return list(out.values())


def warm_sweep(lm: LoadedModel, lengths, new_tokens: int, reserve: int = 0) -> None:
    """The command line's compile of ``sweep_graphs``, before anything is timed (not for the engine's worker: the
    app queues them on its background compiler)."""
    for _, fn, args in sweep_graphs(lm, lengths, new_tokens, reserve):
        fn(*args)


# Where prefill "really climbs": the sweep goes on doubling the prompt until its time to first token is at least
# CLIMB times the shortest prompt's (on a GPU a few hundred tokens cost no more than a few: the device is waiting on
# launches), and names the first length past STARTED times the shortest as where it started to climb.
CLIMB = 2.0
STARTED = 1.5


def climbed(rows) -> bool:
    """Has the sweep's time to first token climbed (longest prompt's median >= CLIMB x the shortest's)?"""
    return len(rows) >= 2 and rows[-1].ttft_ms.median >= CLIMB * rows[0].ttft_ms.median


def climb_start(rows) -> int | None:
    """The first prompt length whose median time to first token is at least STARTED x the shortest prompt's."""
    return next((r.prompt_tokens for r in rows[1:] if r.ttft_ms.median >= STARTED * rows[0].ttft_ms.median), None)


def next_length(rows, max_positions: int, new_tokens: int) -> int | None:
    """The next prompt length of an extended sweep (double the longest), or None past the model's positions."""
    n = 2 * rows[-1].prompt_tokens
    return n if n + new_tokens <= max_positions else None


def sweep_length(lm: LoadedModel, length: int, new_tokens: int, repeats: int, reserve: int = 0) -> SweepRow | None:
    """One prompt length of the sweep (its own warm-up, then the repeats); None when the device ran out of memory
    for it (the sweep ends there and says so)."""
    try:
        return prompt_length_sweep(lm, (length,), new_tokens, repeats, reserve=reserve).rows[0]
    except torch.OutOfMemoryError:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return None


def prompt_length_sweep(lm: LoadedModel, lengths=SWEEP_LENGTHS, new_tokens: int = 8, repeats: int = 3,
                        progress: Progress = _noop, reserve: int = 0) -> Sweep:
    """Measured TTFT and TPOT per prompt length. Each length is warmed up once, then the lengths are
    interleaved repeat by repeat so slow drift of a shared machine hits every length alike. ``reserve``: compiled
    mode's static cache holds at least this many tokens (by default the longest prompt + its new tokens), so the
    whole sweep runs on one compiled graph."""
    lengths = sorted({int(n) for n in lengths if int(n) > 0})
    new_tokens = max(2, int(new_tokens))
    repeats = max(1, int(repeats))
    prompts = {n: sweep_prompt(lm, n) for n in lengths}
    ttft: dict[int, list[float]] = {n: [] for n in lengths}
    tpot: dict[int, list[float]] = {n: [] for n in lengths}
    total, done = len(lengths) * (repeats + 1), 0
    reserve = sweep_reserve(lm, lengths, new_tokens, reserve)
    warm_up(lm, reserve)
    ran: dict[int, list[PrefillMode]] = {n: [] for n in lengths}  # how each timed prefill ran
    for r in range(repeats + 1):  # round 0 is the warm-up, not recorded
        for n in lengths:
            progress(done / total, f"{'warm-up' if r == 0 else f'repeat {r}/{repeats}'}: {n} prompt tokens")
            first, steps = _timed_generate(lm, prompts[n], new_tokens, reserve, (ran[n].append if r else None))
            if r:
                ttft[n].append(first * 1000.0)
                tpot[n].append(statistics.median(steps) * 1000.0)
            done += 1
    progress(1.0, "done")
    rows = tuple(SweepRow(n, Spread.of(ttft[n]), Spread.of(tpot[n]), *_ran(ran[n])) for n in lengths)
    return Sweep(rows, new_tokens, repeats)


def _ran(modes: list[PrefillMode]) -> tuple[Mode, str]:
    """A length's prefill mode over its repeats: compiled only if every repeat was; a graph that became ready
    part-way through is said (those repeats' times mix the two modes)."""
    compiled = sum(m.compiled for m in modes)
    if modes and compiled == len(modes):
        return Mode.COMPILED, modes[-1].line
    if compiled:
        return Mode.EAGER, f"mixed: compiled in {compiled} of {len(modes)} repeats"
    return Mode.EAGER, modes[-1].line if modes else "eager"


# ------------------------------------------------------------------------------- with vs without cache


@dataclass(frozen=True)
class CacheComparison:
    prompt_tokens: int
    cached_ids: tuple[int, ...]
    recompute_ids: tuple[int, ...]
    cached_ms: tuple[float, ...]  # per step; step 0 is the prefill
    recompute_ms: tuple[float, ...]  # per step; step i runs over prompt_tokens + i tokens
    identical: bool
    tokens: tuple[str, ...]  # the cached run's tokens as text

    @property
    def first_difference(self) -> int | None:
        for i, (a, b) in enumerate(zip(self.cached_ids, self.recompute_ids)):
            if a != b:
                return i
        return None


@torch.inference_mode()
def _recompute_step(lm: LoadedModel, x: torch.Tensor) -> torch.Tensor:
    """No cache: a full forward pass over the whole sequence so far. x: [1, n] -> logits [1, vocab]. The same
    thread rule as a cached pass (engine.core.loop.forward), so the comparison is of the work, not of threads."""
    return full_pass(lm, x, logits_to_keep=1).logits[:, -1]


def cache_comparison(lm: LoadedModel, ids: list[int], new_tokens: int = 16) -> CacheComparison:
    """Greedy decoding twice: with the KV cache (one new token per pass) and without it (the whole
    sequence recomputed every pass). The same tokens must come out; each step is timed after a sync."""
    dev = lm.device
    new_tokens = max(1, int(new_tokens))
    warm_up(lm)
    _recompute_step(lm, torch.tensor([ids], device=dev))  # warm-up at this length
    first, steps = _timed_generate_ids(lm, ids, new_tokens)
    cached_ids, cached_s = first, steps
    seq = list(ids)
    rec_ids, rec_s = [], []
    for _ in range(new_tokens):
        x = torch.tensor([seq], device=dev)  # [1, n + i]
        t0 = now(dev)
        tok = int(_recompute_step(lm, x)[0].argmax())
        rec_s.append(now(dev) - t0)
        rec_ids.append(tok)
        seq.append(tok)
    return CacheComparison(
        prompt_tokens=len(ids), cached_ids=tuple(cached_ids), recompute_ids=tuple(rec_ids),
        cached_ms=tuple(s * 1000.0 for s in cached_s), recompute_ms=tuple(s * 1000.0 for s in rec_s),
        identical=list(cached_ids) == rec_ids, tokens=tuple(token_text(lm.tokenizer, cached_ids)),
    )


def _timed_generate_ids(lm: LoadedModel, ids: list[int], new_tokens: int) -> tuple[list[int], list[float]]:
    """Greedy with the cache, keeping the tokens: (token ids, seconds per step incl. the prefill)."""
    out, first, steps = timed_greedy(lm, ids, new_tokens)
    return out, [first, *steps]


# ----------------------------------------------------------------------------------- stage breakdown


@dataclass(frozen=True)
class PassBreakdown:
    phase: str  # "prefill" | "decode"
    tokens_in: int
    stage_ms: dict  # stage -> Spread (ms), STAGES order; "other" = hooked total - timed stages
    hooked_total_ms: Spread  # forward pass with the timing hooks, plus sampling
    plain_total_ms: Spread  # the same pass and sampling without hooks

    def shares(self) -> dict:
        """Each stage's median as a fraction of the sum of medians (the shares add up to 1)."""
        tot = sum(max(0.0, s.median) for s in self.stage_ms.values())
        return {k: (max(0.0, s.median) / tot if tot > 0 else float("nan")) for k, s in self.stage_ms.items()}

    @property
    def hook_overhead(self) -> float:
        """Hooked / plain median time - 1 (the cost of syncing and reading the clock around each module)."""
        return self.hooked_total_ms.median / self.plain_total_ms.median - 1.0


@dataclass(frozen=True)
class Breakdown:
    prefill: PassBreakdown
    decode: PassBreakdown
    repeats: int
    module_counts: dict  # stage -> how many modules were timed


def stage_modules(model) -> list[tuple[str, torch.nn.Module]]:
    """The modules that make up a forward pass, none nested in another: the embedding, each block's
    attention, MLP and norms, the final norm and the output projection (lm head)."""
    out: list[tuple[str, torch.nn.Module]] = [("embedding", model.get_input_embeddings())]
    for blk in arch.blocks(model):
        for name, child in blk.named_children():
            low = name.lower()
            if "norm" in low or low.startswith("ln"):
                out.append(("norms", child))
            elif "attn" in low or "attention" in low:
                out.append(("attention", child))
            elif "mlp" in low or "ffn" in low or "feed_forward" in low:
                out.append(("MLP", child))
    out.append(("norms", arch.final_norm(model)))
    head = model.get_output_embeddings()
    if head is not None:
        out.append(("output projection", head))
    return out


class _StageTimer:
    """Pre-hook reads the clock (after a sync), post-hook adds the elapsed time to the module's stage."""

    def __init__(self, model, device):
        self.dev = device
        self.totals: dict[str, float] = {}
        self.start: dict[int, float] = {}
        self.handles = []
        self.counts: dict[str, int] = {}
        for stage, mod in stage_modules(model):
            self.counts[stage] = self.counts.get(stage, 0) + 1
            self.handles.append(mod.register_forward_pre_hook(self._pre))
            self.handles.append(mod.register_forward_hook(self._make_post(stage)))

    def _pre(self, mod, args):
        self.start[id(mod)] = now(self.dev)

    def _make_post(self, stage):
        def post(mod, args, out):
            self.totals[stage] = self.totals.get(stage, 0.0) + now(self.dev) - self.start.pop(id(mod))
        return post

    def reset(self):
        self.totals, self.start = {}, {}

    def remove(self):
        for h in self.handles:
            h.remove()


def _sample_timed(logits: torch.Tensor, settings: SamplingSettings, gen, dev) -> float:
    t0 = now(dev)
    sample(logits[0].float().cpu(), settings, gen)
    return now(dev) - t0


def stage_breakdown(lm: LoadedModel, ids: list[int], repeats: int = 5,
                    settings: SamplingSettings = SamplingSettings(0.7, 50, 0.95),
                    progress: Progress = _noop) -> Breakdown:
    """Measured time per stage for a prefill pass over ``ids`` and for the decode pass that follows.

    Each repeat runs the pair twice: once plain (total time only) and once with hooks on every stage
    module. "other" is what the hooks do not cover (rotary tables, masks, residual adds, Python glue)."""
    dev, model = lm.device, lm.model
    repeats = max(1, int(repeats))
    gen = make_generator(0)
    raw = {p: {s: [] for s in STAGES} for p in ("prefill", "decode")}
    hooked = {"prefill": [], "decode": []}
    plain = {"prefill": [], "decode": []}
    x = torch.tensor([ids], device=dev)  # [1, n]
    warm_up(lm)
    timer = None
    try:
        for r in range(repeats + 1):  # round 0 warms up both variants
            progress(r / (repeats + 1), f"{'warm-up' if r == 0 else f'repeat {r}/{repeats}'}")
            for use_hooks in (False, True):
                if use_hooks and timer is None:
                    timer = _StageTimer(model, dev)
                if not use_hooks and timer is not None:
                    timer.remove()
                    timer = None
                cache = new_cache(lm)
                for phase in ("prefill", "decode"):
                    if timer is not None:
                        timer.reset()
                    inp = x if phase == "prefill" else tok
                    t0 = now(dev)
                    logits = (prefill if phase == "prefill" else decode_step)(lm, inp, cache)  # [1, vocab]
                    fwd = now(dev) - t0
                    samp = _sample_timed(logits, settings, gen, dev)
                    tok = logits.argmax(-1, keepdim=True)  # [1, 1] same next token in both variants
                    if r == 0:
                        continue
                    total = (fwd + samp) * 1000.0
                    if timer is None:
                        plain[phase].append(total)
                        continue
                    hooked[phase].append(total)
                    stages = {s: timer.totals.get(s, 0.0) * 1000.0 for s in STAGES[:5]}
                    stages["sampling"] = samp * 1000.0
                    stages["other"] = max(0.0, fwd * 1000.0 - sum(stages[s] for s in STAGES[:5]))
                    for s in STAGES:
                        raw[phase][s].append(stages[s])
        counts = dict(timer.counts) if timer is not None else {}
    finally:
        if timer is not None:
            timer.remove()
    progress(1.0, "done")

    def make(phase, tokens_in):
        return PassBreakdown(phase, tokens_in, {s: Spread.of(raw[phase][s]) for s in STAGES},
                             Spread.of(hooked[phase]), Spread.of(plain[phase]))

    return Breakdown(make("prefill", len(ids)), make("decode", 1), repeats, counts)


def spread_dict(s: Spread, nd: int = 3) -> dict:
    return {"median": round(s.median, nd), "min": round(s.lo, nd), "max": round(s.hi, nd), "n": s.n}
