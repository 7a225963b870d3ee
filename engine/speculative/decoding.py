"""Speculative decoding (Leviathan, Kalman and Matias 2023, "Fast Inference from Transformers via Speculative
Decoding"): a cheap drafter guesses k tokens, the target checks them all in ONE forward pass.

Letters follow the paper: p = the target's distribution, q = the draft's, both after the same sampling
settings (temperature, top-k, top-p, min-p via ``engine.core.sampling.sampling_probs``), so the output follows the
target's *sampling* distribution exactly.

- Temperature 0: accept the longest drafted prefix that equals the target's argmax, then append the target's
  own next token. The output equals plain greedy decoding token for token.
- Temperature > 0: accept drafted token x with probability min(1, p(x)/q(x)); at the first rejection draw
  from norm(max(0, p - q)); if all k are accepted, draw a bonus token from p at the next position.

Each round feeds [last token, d1..dk] to the target with its KV cache, then crops the cache back to the
tokens that were kept (``DynamicCache.crop``). Expected speedup (paper, eq. 1 and thm. 3.8):
(1 - a^(k+1)) / ((1 - a)(k c + 1)), a = per-token acceptance rate, c = draft cost / target step cost.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch

from engine.speculative.drafters import Drafter, make_drafter
from engine.core.loaded import LoadedModel
from engine.core.prompt import token_text
from engine.core.sampling import SamplingSettings, make_generator, sample, sampling_probs
from engine.measure.timing import now
from engine.core.trace import generate_tokens
from engine.core.loop import crop, eos_ids, forward, new_cache, prefill, warm_up
from engine.core.compiled import announce, compiling, shaped_of
from engine.core.compile_record import cache_length, verify_name
from engine.speculative import MAX_K

@dataclass(frozen=True)
class SpecRound:
    """One draft-and-verify round. Lists over drafted tokens hold only the *tested* ones (up to and including
    the first rejection): later drafts were conditioned on a rejected token and were never judged."""

    index: int
    drafted: tuple[int, ...]  # what the drafter proposed (may be fewer than k, even none)
    q: tuple[float, ...]  # q(x_i): draft probability of each tested token (1.0 for a deterministic drafter)
    p: tuple[float, ...]  # p(x_i): target probability of each tested token, same sampling settings
    accepted: int  # how many drafted tokens were kept
    token: int  # the target's own token after them: a correction (after a rejection) or a bonus
    kind: str  # "correction" | "bonus" | "plain" (nothing was drafted: an ordinary decode step)
    source: str  # where that token came from, in words
    target_top_ids: tuple[int, ...]  # target's top tokens at the correction/bonus position (sampling dist.)
    target_top_probs: tuple[float, ...]
    draft_seconds: float
    verify_seconds: float  # target pass + accept/reject + cache rollback
    compiled: bool = False  # the verify pass ran as a compiled graph (k + 1 tokens, drafts padded; compiled mode)

    @property
    def accept_probs(self) -> tuple[float, ...]:
        """min(1, p/q) for each tested token."""
        return tuple(min(1.0, p / q) if q > 0 else 0.0 for p, q in zip(self.p, self.q))

    @property
    def emitted(self) -> tuple[int, ...]:
        return self.drafted[: self.accepted] + (self.token,)

    @property
    def rejected(self) -> tuple[int, ...]:
        return self.drafted[self.accepted:]


@dataclass(frozen=True)
class SpecRun:
    """Plain decoding and speculative decoding on the same prompt and settings, measured in one run."""

    model: str
    drafter: str
    k: int
    settings: SamplingSettings
    seed: int
    max_new_tokens: int
    threads: int
    prompt_ids: tuple[int, ...]
    plain_ids: tuple[int, ...]
    plain_step_seconds: tuple[float, ...]  # prefill first, then each decode step (forward + sampling)
    spec_ids: tuple[int, ...]
    spec_prefill_seconds: float
    rounds: tuple[SpecRound, ...]
    plain_tokens: tuple[str, ...] = ()
    spec_tokens: tuple[str, ...] = ()
    # The plain lane's step records (top-k logits, KV bytes) when it was decoded in this race; empty when an earlier
    # plain run was reused (a k sweep). A saved race is checked against them (engine/record).
    plain_steps: tuple = ()
    plain_mode: str = ""  # how the plain lane ran: "compiled" | "eager" ("" when an earlier plain run was reused)

    @property
    def spec_mode(self) -> str:
        """How the speculative lane's verify passes ran: "compiled", "eager", or "mixed" (some of each)."""
        kinds = {r.compiled for r in self.rounds}
        return "mixed" if len(kinds) > 1 else "compiled" if kinds == {True} else "eager"

    @property
    def plain_seconds(self) -> float:
        return float(sum(self.plain_step_seconds))

    @property
    def spec_seconds(self) -> float:
        return self.spec_prefill_seconds + sum(r.draft_seconds + r.verify_seconds for r in self.rounds)

    @property
    def plain_tokens_per_second(self) -> float:
        return len(self.plain_ids) / self.plain_seconds if self.plain_seconds > 0 else float("nan")

    @property
    def spec_tokens_per_second(self) -> float:
        return len(self.spec_ids) / self.spec_seconds if self.spec_seconds > 0 else float("nan")

    @property
    def speedup(self) -> float:
        """Measured, wall clock: speculative tokens/s over plain tokens/s (equal token counts at temperature 0)."""
        return self.spec_tokens_per_second / self.plain_tokens_per_second

    @property
    def predicted(self) -> "Predicted":
        """What the paper's formula predicts for this run, step by step toward the measured speedups."""
        return Predicted.of(self)

    @property
    def drafted(self) -> int:
        return sum(len(r.drafted) for r in self.rounds)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def tested(self) -> int:
        return sum(len(r.p) for r in self.rounds)

    @property
    def acceptance_rate(self) -> float:
        """a: accepted / tested drafted tokens (a rejection ends a round, so later drafts are never tested);
        the maximum-likelihood estimate of the paper's per-token acceptance rate."""
        return self.accepted / self.tested if self.tested else 0.0

    @property
    def target_passes(self) -> int:
        return 1 + len(self.rounds)

    @property
    def tokens_per_pass(self) -> float:
        """New tokens per target forward pass, prefill included (plain decoding: exactly 1)."""
        return len(self.spec_ids) / self.target_passes

    @property
    def target_step_seconds(self) -> float:
        steps = self.plain_step_seconds[1:]
        return statistics.median(steps) if steps else float("nan")

    @property
    def c(self) -> float:
        """Measured cost ratio: draft seconds per drafted token / median plain decode step."""
        drafted = max(1, self.drafted)
        return sum(r.draft_seconds for r in self.rounds) / drafted / self.target_step_seconds

    @property
    def measurable(self) -> bool:
        """Can this run's speed be compared at all? It needs at least one plain decode step (the first token
        comes from the prefill in both lanes) and one drafted token, else c and the formula are 0/0 and a
        "speedup" is the ratio of two prefills (noise)."""
        return len(self.plain_step_seconds) >= 2 and self.drafted > 0 and math.isfinite(self.c)

    @property
    def verify_cost_ratio(self) -> float:
        """Measured: median verify pass (rounds that drafted something) / median plain decode step. The paper's
        formula takes it as 1; NaN when no round drafted anything."""
        v = [r.verify_seconds for r in self.rounds if r.drafted]
        return statistics.median(v) / self.target_step_seconds if v else float("nan")

    @property
    def plain_decode_seconds(self) -> float:
        """The plain lane's time after its first token (the first comes from the prefill)."""
        return float(sum(self.plain_step_seconds[1:]))

    @property
    def spec_decode_seconds(self) -> float:
        """The speculative lane's time after its first token: every round's drafting and verify pass."""
        return float(sum(r.draft_seconds + r.verify_seconds for r in self.rounds))

    @property
    def decode_speedup(self) -> float:
        """Measured, decode only: tokens after the first per second of each lane's time after its first token.
        Both lanes pay the same prefill inside the wall clock, which pulls ``speedup`` toward 1; the paper's
        formula counts decode rounds only, so this is the number to set beside it. NaN when a lane decoded
        nothing."""
        pn, sn = len(self.plain_ids) - 1, len(self.spec_ids) - 1
        if pn < 1 or sn < 1 or not self.plain_decode_seconds > 0 or not self.spec_decode_seconds > 0:
            return float("nan")
        return (sn / self.spec_decode_seconds) / (pn / self.plain_decode_seconds)

    @property
    def plain_prefill_share(self) -> float:
        """Share of the plain lane's wall clock spent in the prefill (first token)."""
        return self.plain_step_seconds[0] / self.plain_seconds if self.plain_seconds > 0 else float("nan")

    @property
    def spec_prefill_share(self) -> float:
        """Share of the speculative lane's wall clock spent in the prefill (first token)."""
        return self.spec_prefill_seconds / self.spec_seconds if self.spec_seconds > 0 else float("nan")

    @property
    def drafted_per_round(self) -> float:
        """Mean drafted tokens per round (k when the drafter always proposes a full draft)."""
        return self.drafted / len(self.rounds) if self.rounds else 0.0

    @property
    def rounds_with_drafts(self) -> int:
        return sum(1 for r in self.rounds if r.drafted)

    @property
    def identical(self) -> bool:
        return self.plain_ids == self.spec_ids

    @property
    def same_work(self) -> bool:
        """Both lanes did the same work: no round drafted anything, so every speculative round was one target pass
        for one token, as every plain step is (the same passes over the same tokens). Their clocks then differ by
        noise only (engine.measure.noise.same_work_gap)."""
        return self.drafted == 0 and len(self.spec_ids) == len(self.plain_ids)

    def to_dict(self) -> dict:
        return {
            "model": self.model, "drafter": self.drafter, "k": self.k, "settings": asdict(self.settings),
            "seed": self.seed, "max_new_tokens": self.max_new_tokens, "threads": self.threads,
            "prompt_tokens": len(self.prompt_ids),
            "plain": {"ids": list(self.plain_ids), "tokens": list(self.plain_tokens), "seconds": self.plain_seconds,
                      "tokens_per_second": self.plain_tokens_per_second, "mode": self.plain_mode},
            "speculative": {"ids": list(self.spec_ids), "tokens": list(self.spec_tokens), "mode": self.spec_mode,
                            "seconds": self.spec_seconds, "tokens_per_second": self.spec_tokens_per_second,
                            "prefill_seconds": self.spec_prefill_seconds,
                            "rounds": [dict(asdict(r), accept_probs=list(r.accept_probs)) for r in self.rounds]},
            "acceptance_rate": self.acceptance_rate, "drafted": self.drafted, "accepted": self.accepted,
            "target_passes": self.target_passes, "tokens_per_target_pass": self.tokens_per_pass,
            "target_step_seconds": self.target_step_seconds, "c": self.c, "measured_speedup": self.speedup,
            **self.predicted.to_dict(), "verify_cost_ratio": self.verify_cost_ratio,
            "drafted_per_round": self.drafted_per_round, "decode_speedup": self.decode_speedup,
            "plain_prefill_share": self.plain_prefill_share, "spec_prefill_share": self.spec_prefill_share,
            "identical_output": self.identical, "same_work": self.same_work,
        }


@dataclass(frozen=True)
class Predicted:
    """The paper's predicted speedup for a run (Leviathan et al. 2023, thm. 3.8), then one assumption replaced by
    what the run measured at each step, toward the measured ``SpecRun.decode_speedup`` (the same scope: decode
    rounds, no prefill). Each is NaN where the run gives nothing to compute it from."""

    paper: float  # thm. 3.8 with the measured a, k and c; a verify pass costs one plain step
    measured_verify: float  # thm. 3.8 with the measured verify cost (SpecRun.verify_cost_ratio) in place of 1
    # Round by round as the rounds happened: a round that drafted m tokens expects (1 - a^(m+1)) / (1 - a) tokens
    # (m = 0: one, an ordinary decode step) and costs its measured drafting time / plain step + 1 verify pass;
    # the sum of expected tokens over the sum of costs. Equals ``paper`` when every round drafts k tokens at cost c;
    # unlike it, it respects a drafter that drafted nothing in most rounds and a draft cut short by the tokens
    # requested.
    rounds: float
    # ``rounds`` with each round's measured verify time in place of one plain step: everything measured but the
    # luck of acceptance (the expected tokens per round still come from a). It predicts SpecRun.decode_speedup.
    as_run: float

    # the names a saved race (engine/record) and the benchmarks' JSON give them
    KEYS = {"paper": "expected_speedup", "measured_verify": "expected_speedup_measured_verify",
            "rounds": "expected_speedup_drafted", "as_run": "expected_speedup_as_run"}

    @classmethod
    def of(cls, run: "SpecRun") -> "Predicted":
        a, k, c = run.acceptance_rate, run.k, run.c
        nan = float("nan")
        step = run.target_step_seconds
        if not run.rounds or not step > 0:
            return cls(expected_speedup(a, k, c), expected_speedup(a, k, c, run.verify_cost_ratio), nan, nan)
        a = min(max(a, 0.0), 1.0)
        tokens = sum(len(r.drafted) + 1 if a >= 1.0 else (1 - a ** (len(r.drafted) + 1)) / (1 - a)
                     for r in run.rounds)
        cost = sum(r.draft_seconds / step + 1.0 for r in run.rounds)
        return cls(expected_speedup(run.acceptance_rate, k, c), expected_speedup(run.acceptance_rate, k, c,
                                                                                 run.verify_cost_ratio),
                   tokens / cost, tokens / (run.spec_decode_seconds / step))

    def to_dict(self) -> dict:
        return {key: getattr(self, name) for name, key in self.KEYS.items()}


def expected_speedup(a: float, k: int, c: float, verify: float = 1.0) -> float:
    """Leviathan et al. 2023, thm. 3.8: (1 - a^(k+1)) / ((1 - a)(k c + 1)); the a -> 1 limit is (k+1)/(kc+1).
    ``verify`` is the cost of one verify pass in plain decode steps: the paper takes 1; pass the measured
    ratio to get k c + verify in the denominator."""
    a = min(max(float(a), 0.0), 1.0)
    tokens = k + 1 if a >= 1.0 else (1 - a ** (k + 1)) / (1 - a)
    return tokens / (k * c + verify)


def _top(probs: torch.Tensor, n: int = 3) -> tuple[tuple[int, ...], tuple[float, ...]]:
    t = torch.topk(probs, min(n, probs.shape[-1]))
    return tuple(t.indices.tolist()), tuple(round(float(v), 6) for v in t.values)


def verify(logits: torch.Tensor, drafted: list[int], q: torch.Tensor | None, settings: SamplingSettings,
           gen: torch.Generator) -> tuple[int, int, str, str, list[float], list[float], torch.Tensor]:
    """Judge the drafted tokens against the target's logits [m+1, vocab] (row i predicts the token after
    d1..di). Returns (accepted, token, kind, source, p of tested, q of tested, distribution of the token)."""
    m = len(drafted)
    if settings.greedy:
        target = logits.argmax(-1).tolist()  # [m+1]
        n = 0
        while n < m and drafted[n] == target[n]:
            n += 1
        tested = min(n + 1, m)
        p = [1.0] * n + [0.0] * (tested - n)
        kind = "bonus" if n == m else "correction"
        dist = torch.zeros(logits.shape[-1]).scatter_(0, torch.tensor([target[n]]), 1.0)
        src = "the target's argmax (temperature 0)"
        return n, target[n], "plain" if m == 0 else kind, src, p, [1.0] * tested, dist
    probs = sampling_probs(logits, settings)  # [m+1, vocab]
    ps, qs = [], []
    for i, x in enumerate(drafted):
        px = float(probs[i, x])
        qx = 1.0 if q is None else float(q[i, x])
        ps.append(px)
        qs.append(qx)
        r = float(torch.rand(1, generator=gen))
        if qx > 0 and r < px / qx:
            continue
        if q is None:  # one-hot q: max(0, p - q) is p with x removed
            resid = probs[i].clone()
            resid[x] = 0.0
        else:
            resid = (probs[i] - q[i]).clamp_min(0.0)
        total = float(resid.sum())
        if total <= 0.0:  # p == q here; cannot happen after a rejection except by rounding
            resid, total = probs[i], 1.0
        resid = resid / total
        tok = int(torch.multinomial(resid, 1, generator=gen))
        return i, tok, "correction", "a draw from norm(max(0, p - q)) after the rejection", ps, qs, resid
    tok = int(torch.multinomial(probs[m], 1, generator=gen))
    return m, tok, "plain" if m == 0 else "bonus", "a draw from p at the next position", ps, qs, probs[m]


def speculative_generate(lm: LoadedModel, ids: list[int], drafter: Drafter, k: int, settings: SamplingSettings,
                         max_new_tokens: int, seed: int, stop_at_eos: bool = True,
                         on_round: Callable[[SpecRound], None] | None = None,
                         on_prefill: Callable[[int, float], None] | None = None):
    """Draft-and-verify generation. Returns (generated ids, prefill seconds, rounds). The time spent in
    ``on_prefill(token, seconds)`` and ``on_round`` is not counted in any round's seconds."""
    settings = settings.clamp()
    k = int(min(max(k, 0), MAX_K))
    gen = make_generator(seed)
    stops = eos_ids(lm) if stop_at_eos else set()
    dev = lm.device
    rounds: list[SpecRound] = []
    with torch.inference_mode():
        warm_up(lm, width=k + 1)  # the verify pass's shape too: its first run would otherwise land in round 1
        reserve = len(ids) + int(max_new_tokens) + k + 1  # the last round's padded draft too
        width = k + 1 if k > 0 and warm_verify(lm, reserve, k + 1) else 0  # compiled mode: fixed-width passes
        # sliding-window layers can drop rejected drafts past the window (eager); compiled, a static cache
        cache = verify_cache(lm, reserve) if width else new_cache(lm, rollback=True)
        t0 = now(dev)
        logits = prefill(lm, torch.tensor([ids], device=dev), cache)[0].float().cpu()  # [vocab]
        out = [int(sample(logits, settings, gen))]
        prefill_seconds = now(dev) - t0
        if on_prefill is not None:
            on_prefill(out[0], prefill_seconds)
        drafter.start(ids, settings, gen)
        context = list(ids) + out
        while len(out) < max_new_tokens and out[-1] not in stops:
            t0 = now(dev)
            want = min(k, max_new_tokens - len(out) - 1)
            drafted, q = drafter.propose(context, want) if want > 0 else ([], None)
            drafted = [int(t) for t in drafted[:want]]
            t1 = now(dev)
            past = len(context) - 1  # the cache holds every token but the last
            fed = [context[-1]] + drafted
            fed += [fed[-1]] * (width - len(fed))  # compiled: one width per graph; the padding is rolled back below
            x = torch.tensor([fed], device=dev)  # [1, m+1] (compiled: [1, k+1])
            logits = forward(lm, x, cache, keep=len(fed))[0, : len(drafted) + 1].float().cpu()  # verify: [m+1, vocab]
            n, tok, kind, src, p, qq, dist = verify(logits, drafted, q, settings, gen)
            if not crop(cache, past + 1 + n):  # cannot happen with rollback=True; never continue on a wrong cache
                raise RuntimeError("the KV cache could not be rolled back to the accepted tokens")
            drafter.update(n)
            top_ids, top_probs = _top(dist)
            t2 = now(dev)
            rec = SpecRound(len(rounds), tuple(drafted), tuple(qq), tuple(p), n, tok, kind, src, top_ids,
                            top_probs, t1 - t0, t2 - t1, bool(width))
            rounds.append(rec)
            new = list(rec.emitted)
            for j, t in enumerate(new):
                if t in stops:
                    new = new[: j + 1]
                    break
            out.extend(new)
            context.extend(new)
            if on_round is not None:
                on_round(rec)
    return out[:max_new_tokens], prefill_seconds, rounds


def verify_cache(lm: LoadedModel, tokens: int):
    """Compiled mode: the static cache of one row that a run of ``tokens`` tokens verifies on (its length as
    ``warm_verify`` compiled it)."""
    shaped = shaped_of(lm)
    return shaped.cache(1, cache_length(tokens, shaped.graph.max_positions))


def warm_verify(lm: LoadedModel, tokens: int, width: int, progress: Callable[[str], None] | None = None) -> bool:
    """Compiled mode: make sure the verify pass of ``width`` tokens (k + 1) on the static cache that holds ``tokens``
    is compiled (untimed, before the race: a prefill, then the pass and its rollback, three times on CUDA to record
    and replay its CUDA graph). Returns whether verify passes of this run will run compiled; False in eager mode,
    for a run longer than any static cache, or when the compile failed (the run is then eager)."""
    shaped = shaped_of(lm)
    length = cache_length(tokens, shaped.graph.max_positions) if shaped is not None else None
    if length is None or shaped.failure:
        return False
    name = verify_name(width, length)
    if shaped.ready(name):
        return True
    cache = shaped.cache(1, length)
    tok = lm.tokenizer.eos_token_id or 0
    with compiling(lm, name, progress), torch.inference_mode():
        prefill(lm, torch.tensor([[tok] * 4], device=lm.device), cache)
        for _ in range(3 if shaped.graph.cuda_graphs else 1):
            forward(lm, torch.tensor([[tok] * width], device=lm.device), cache, keep=width)
            crop(cache, 4)
    return shaped.ready(name)


def race(lm: LoadedModel, ids: list[int], drafter_spec: str, k: int, settings: SamplingSettings = SamplingSettings(),
         max_new_tokens: int = 64, seed: int = 0, stop_at_eos: bool = True, drafter=None,
         on_plain_step: Callable | None = None, on_round: Callable[[SpecRound], None] | None = None,
         on_prefill: Callable[[int, float], None] | None = None, plain: tuple | None = None) -> SpecRun:
    """Plain decoding (``engine.core.trace.generate_tokens``) then speculative decoding, same prompt, settings and
    seed, measured in one run. ``plain`` = (ids, step seconds) reuses an earlier plain run (a k sweep)."""
    settings = settings.clamp()
    drafter = drafter or make_drafter(lm, drafter_spec)
    steps = ()
    if plain is None:
        p_ids, steps, _, _ = generate_tokens(lm, list(ids), settings, max_new_tokens, seed, stop_at_eos,
                                             on_step=on_plain_step)
        plain = (tuple(p_ids), tuple(s.seconds for s in steps))
    plain_mode = ("compiled" if any(s.compiled for s in steps) else "eager") if steps else ""
    s_ids, pre, rounds = speculative_generate(lm, list(ids), drafter, k, settings, max_new_tokens, seed, stop_at_eos,
                                              on_round=on_round, on_prefill=on_prefill)
    return SpecRun(
        model=lm.name, drafter=drafter.name, k=int(k), settings=settings, seed=int(seed),
        max_new_tokens=int(max_new_tokens), threads=torch.get_num_threads(), prompt_ids=tuple(ids),
        plain_ids=tuple(plain[0]), plain_step_seconds=tuple(plain[1]), spec_ids=tuple(s_ids),
        spec_prefill_seconds=pre, rounds=tuple(rounds), plain_tokens=tuple(token_text(lm.tokenizer, plain[0])),
        spec_tokens=tuple(token_text(lm.tokenizer, s_ids)), plain_steps=tuple(steps), plain_mode=plain_mode,
    )


@dataclass(frozen=True)
class SweepPoint:
    k: int
    acceptance_rate: float
    tokens_per_pass: float
    c: float
    measured_speedup: float
    expected_speedup: float  # the paper's formula round by round (SpecRun.predicted.rounds)
    identical: bool
    accepted: int = 0
    decode_speedup: float = float("nan")  # measured, each lane's time after its first token (SpecRun.decode_speedup)
    plain_decode_seconds: float = float("nan")  # the plain lane, re-measured for this k: the same work at every k


def sweep_k(lm: LoadedModel, ids: list[int], drafter_spec: str, ks, settings: SamplingSettings = SamplingSettings(),
            max_new_tokens: int = 48, seed: int = 0, on_progress: Callable[[int, int], None] | None = None,
            loader: Callable | None = None, drafter: Drafter | None = None) -> tuple[SweepPoint, ...]:
    """Speedup against k for one drafter. Plain decoding is re-measured before every k (interleaved), so a
    shared machine's drift hits both sides of each ratio alike."""
    ks = sorted({int(k) for k in ks if 1 <= int(k) <= MAX_K})
    drafter = drafter or make_drafter(lm, drafter_spec, **({"loader": loader} if loader else {}))
    lengths = {k: cache_length(len(ids) + int(max_new_tokens) + k + 1, lm.info.max_positions) for k in ks}
    announce(lm, [verify_name(k + 1, n) for k, n in lengths.items() if n])  # compiled: one verify graph per k
    points = []
    for i, k in enumerate(ks):
        r = race(lm, ids, drafter_spec, k, settings, max_new_tokens, seed, drafter=drafter)
        # the formula as the rounds happened: a draft is cut to the tokens still wanted, so with few tokens
        # requested a large k never drafts k (the plain thm. 3.8 line would promise what cannot happen)
        points.append(SweepPoint(k, r.acceptance_rate, r.tokens_per_pass, r.c, r.speedup, r.predicted.rounds,
                                 r.identical, r.accepted, r.decode_speedup, r.plain_decode_seconds))
        if on_progress is not None:
            on_progress(i + 1, len(ks))
    return tuple(points)

