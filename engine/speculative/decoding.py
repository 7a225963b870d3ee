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

What a run measured, and the formula, are the records of engine/speculative/records.py.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from engine.speculative.drafters import Drafter, make_drafter
from engine.speculative.records import SpecRound, SpecRun, SweepPoint
from engine.core.loaded import LoadedModel
from engine.core.prompt import token_text
from engine.core.sampling import SamplingSettings, make_generator, sample, sampling_probs
from engine.measure.timing import now
from engine.core.trace import generate_tokens
from engine.core.loop import crop, eos_ids, forward, new_cache, prefill, warm_up
from engine.core.prefill_buckets import prefill_mode
from engine.core.compiled import announce, compiling, shaped_of
from engine.core.compile_record import cache_length, verify_name
from engine.speculative import MAX_K


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


class SpecOutput(NamedTuple):
    ids: list[int]  # the generated tokens
    prefill_seconds: float
    rounds: list[SpecRound]
    prefill: str  # how the prefill ran (engine.core.prefill_buckets.PrefillMode.line: "compiled, 16-token bucket")


def speculative_generate(lm: LoadedModel, ids: list[int], drafter: Drafter, k: int, settings: SamplingSettings,
                         max_new_tokens: int, seed: int, stop_at_eos: bool = True,
                         on_round: Callable[[SpecRound], None] | None = None,
                         on_prefill: Callable[[int, float], None] | None = None) -> SpecOutput:
    """Draft-and-verify generation. The time spent in ``on_prefill(token, seconds)`` and ``on_round`` is not counted
    in any round's seconds."""
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
        how = prefill_mode(lm, len(ids), cache)  # decided once, before the clock: the run says how it ran
        t0 = now(dev)
        logits = prefill(lm, torch.tensor([ids], device=dev), cache, how)[0].float().cpu()  # [vocab]
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
    return SpecOutput(out[:max_new_tokens], prefill_seconds, rounds, how.line)


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
    steps, heard = (), []
    if plain is None:
        p_ids, steps, _, _ = generate_tokens(lm, list(ids), settings, max_new_tokens, seed, stop_at_eos,
                                             on_step=on_plain_step, on_prefill=heard.append)
        plain = (tuple(p_ids), tuple(s.seconds for s in steps))
    plain_mode = ("compiled" if any(s.compiled for s in steps) else "eager") if steps else ""
    s_ids, pre, rounds, spec_prefill = speculative_generate(lm, list(ids), drafter, k, settings, max_new_tokens, seed,
                                                            stop_at_eos, on_round=on_round, on_prefill=on_prefill)
    return SpecRun(
        model=lm.name, drafter=drafter.name, k=int(k), settings=settings, seed=int(seed),
        max_new_tokens=int(max_new_tokens), threads=torch.get_num_threads(), prompt_ids=tuple(ids),
        plain_ids=tuple(plain[0]), plain_step_seconds=tuple(plain[1]), spec_ids=tuple(s_ids),
        spec_prefill_seconds=pre, rounds=tuple(rounds), plain_tokens=tuple(token_text(lm.tokenizer, plain[0])),
        spec_tokens=tuple(token_text(lm.tokenizer, s_ids)), plain_steps=tuple(steps), plain_mode=plain_mode,
        plain_prefill=heard[0].line if heard else "", spec_prefill=spec_prefill,
    )


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

