"""A serving engine under load, seen from outside: the concurrency sweep (rounds of 1, 2, 4, ... parallel streamed
requests, with the server's /metrics polled between), what it says about batching (``batching_verdict``) and how
many users it serves under a time-per-token target (``capacity``). Bounded like every sweep of
engine.serving.measure (its caps and its deadline-carrying client)."""
from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait, FIRST_COMPLETED
from dataclasses import dataclass

from engine.serving import client as C
from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import fence as F
from engine.serving.measure import (MAX_CONCURRENCY, MAX_PROMPT_TOKENS, MAX_REQUESTS, MAX_SWEEP_S, NOISE,
                                    SWEEP_BYTES, RequestTimeline, measure_request, noop, past, server_split, timeline,
                                    unique_prompt, unit_tokens)
from engine.serving.metrics import MetricsSample, Scraper
from engine.measure.spread import Spread


# ------------------------------------------------------------------------------------------------ concurrency
@dataclass(frozen=True)
class ConcurrencyLevel:
    """N requests sent at the same moment (one round), each with its own prompt.

    throughput_tok_s = all completion tokens / (last request's end - first request's start)"""

    concurrency: int
    requests: tuple[RequestTimeline, ...]
    wall_s: float
    throughput_tok_s: float
    latency_s: Spread
    ttft_s: Spread
    tpot_s: Spread
    failed: int
    errors: tuple[str, ...]
    metrics: tuple[MetricsSample, ...]

    def to_dict(self) -> dict:
        return {"concurrency": self.concurrency, "wall_s": self.wall_s, "throughput_tok_s": self.throughput_tok_s,
                "latency_s": self.latency_s.range_dict(), "ttft_s": self.ttft_s.range_dict(),
                "tpot_s": self.tpot_s.range_dict(),
                "failed": self.failed, "errors": list(self.errors),
                "metrics": [m.to_dict() for m in self.metrics],
                "requests": [r.to_dict() for r in self.requests]}


@dataclass(frozen=True)
class ConcurrencySweep:
    prompt_tokens_hint: int
    new_tokens: int
    levels: tuple[ConcurrencyLevel, ...]
    truncated: bool
    flags: tuple[str, ...]
    metrics_before: MetricsSample | None = None
    metrics_after: MetricsSample | None = None

    def to_dict(self) -> dict:
        return {"prompt_tokens_hint": self.prompt_tokens_hint, "new_tokens": self.new_tokens,
                "truncated": self.truncated, "flags": list(self.flags),
                "metrics_before": self.metrics_before.to_dict() if self.metrics_before else None,
                "metrics_after": self.metrics_after.to_dict() if self.metrics_after else None,
                "levels": [lv.to_dict() for lv in self.levels]}


class _Either(threading.Event):
    """Set when the sweep's own stop is set (its deadline) or the caller's cancel is (its tab closed); ``set``
    sets the sweep's own only."""

    def __init__(self, own: threading.Event, outer: threading.Event | None):
        super().__init__()
        self._own, self._outer = own, outer

    def is_set(self) -> bool:
        return self._own.is_set() or (self._outer is not None and self._outer.is_set())

    def set(self) -> None:
        self._own.set()

    def wait(self, timeout=None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return True


def _round(cfg, cl, n: int, prompts, new_tokens: int, cancel: threading.Event, scraper: Scraper | None, on_tick,
           deadline: float):
    """Send n requests at once from n threads; sample /metrics (and /slots) while they run (every 0.25 s)."""
    barrier = threading.Barrier(n)
    t0 = time.perf_counter()
    # the requests run on pool threads: they share the sweep's cancel and the client's deadline, not the caller's

    def one(i):
        barrier.wait(timeout=30)
        res = C.stream(cfg, prompts[i], new_tokens, client=cl, cancel=cancel, max_bytes=SWEEP_BYTES)
        return timeline(res, res.sent_at - t0)

    samples: list[MetricsSample] = []
    results, errors = [], []
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="serve-bench")
    pending = {pool.submit(one, i) for i in range(n)}
    try:
        while pending:
            done, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
            for f in done:
                exc = f.exception()
                if exc is None:
                    results.append(f.result())
                else:
                    errors.append(str(exc) if isinstance(exc, E.ServingError) else f"{type(exc).__name__}: {exc}")
            if scraper is not None:
                s = scraper.sample(time.perf_counter() - t0)
                if s is not None:
                    samples.append(s)
            on_tick(len(results) + len(errors))  # may raise (the UI stops a left session this way)
            if past(deadline) or cancel.is_set():
                cancel.set()
    finally:
        if pending:
            # Interrupted: close the open streams (the server stops generating for them). Every socket of the
            # client checks `cancel` at least every SLICE_S, so the threads end (and close their connections)
            # at once; waiting for them is what makes "closed" true when this returns.
            cancel.set()
            barrier.abort()
            pool.shutdown(wait=True, cancel_futures=True)
        else:
            pool.shutdown(wait=True)
    return results, errors, samples, time.perf_counter() - t0


def concurrency_sweep(cfg: K.ServerConfig, levels=(1, 2, 4, 8), new_tokens: int = 32, prompt_tokens: int = 64,
                      progress: C.ProgressFn = noop, cancel: threading.Event | None = None,
                      poll_metrics: bool = True, max_s: float = MAX_SWEEP_S) -> ConcurrencySweep:
    """For each N in ``levels``: N requests sent together, each its own prompt (no shared prefix), each asking for
    exactly ``new_tokens`` tokens. A server that batches continuously serves them in the same forward passes, so
    throughput grows with N while each request slows down a little; a server that runs one request at a time
    keeps throughput flat and makes the N-th request wait for the others."""
    levels = sorted({int(min(max(1, n), MAX_CONCURRENCY)) for n in levels})
    new_tokens = int(min(max(2, new_tokens), 256))
    prompt_tokens = int(min(max(4, prompt_tokens), MAX_PROMPT_TOKENS))
    total = sum(levels) + 1
    if total > MAX_REQUESTS:
        raise E.ServingError(f"{total} requests is more than this sweep allows ({MAX_REQUESTS}); use fewer levels.")
    max_s = float(min(max(0.5, max_s), MAX_SWEEP_S))
    stop = threading.Event()  # set at the deadline or on cancel: ends the round's requests
    outer = cancel
    cancel = _Either(stop, outer)
    out, truncated = [], False
    deadline = time.monotonic() + max_s
    with F.make_client(cfg, max(levels) + 4, cancel=cancel, deadline=deadline) as cl:
        scraper = Scraper(cfg, cl) if poll_metrics else None
        before = scraper.sample(0.0) if scraper is not None else None
        if before is None:
            scraper = None
        unit = unit_tokens(cfg, cl)
        progress(0.0, "warm-up request")
        measure_request(cfg, unique_prompt(16, "warm-up", unit), 2, client=cl, cancel=cancel, max_bytes=SWEEP_BYTES)
        done = 1
        for n in levels:
            if past(deadline):
                truncated = True
                break
            stamp = time.time_ns() % 10**9
            prompts = [unique_prompt(prompt_tokens, f"{n}-{i}-{stamp}", unit) for i in range(n)]
            base = done

            def tick(k, n=n, base=base):
                progress(min(1.0, (base + k) / total), f"{n} parallel request{'s' if n > 1 else ''}: {k} of {n} done")

            res, errs, samples, wall = _round(cfg, cl, n, prompts, new_tokens, cancel, scraper, tick, deadline)
            done += n
            if outer is not None and outer.is_set():
                raise E.RequestCancelled("Cancelled.")
            if not res and past(deadline) and out:
                truncated = True
                break
            if not res:
                raise E.ServingError(f"All {n} parallel requests failed: {errs[0] if errs else 'no reason given'}")
            first = min(r.start_s for r in res)
            span = max(r.start_s + r.end_s for r in res) - first
            toks = sum(r.completion_tokens for r in res)
            out.append(ConcurrencyLevel(n, tuple(sorted(res, key=lambda r: r.start_s)), span,
                                        toks / span if span > 0 else math.nan,
                                        Spread.of(r.latency_s for r in res), Spread.of(r.ttft_s for r in res),
                                        Spread.of(r.tpot_s for r in res), len(errs), tuple(errs[:5]), tuple(samples)))
            if cancel.is_set():
                truncated = True
                break
        after = scraper.sample(0.0) if scraper is not None else None
    progress(1.0, "done")
    flags = []
    if truncated:
        flags.append(f"stopped after {max_s:.0f} s: higher concurrencies were not measured")
    flags += concurrency_flags(out)
    return ConcurrencySweep(prompt_tokens, new_tokens, tuple(out), truncated, tuple(flags), before, after)


def concurrency_flags(levels) -> list[str]:
    """Higher concurrency cannot make one request faster, nor raise throughput by more than N times: flag it."""
    out = []
    for a, b in zip(levels, levels[1:]):
        if b.latency_s.median < a.latency_s.median * (1 - NOISE):
            out.append(f"implausible: {b.concurrency} parallel requests each took less time "
                       f"({b.latency_s.median:.2f} s median) than {a.concurrency} did ({a.latency_s.median:.2f} s). "
                       "More load cannot speed a request up: the server or this machine was busy with something "
                       "else during the first level. Run it again.")
    if levels:
        one = levels[0]
        for lv in levels[1:]:
            ratio = lv.concurrency / one.concurrency
            if lv.throughput_tok_s > one.throughput_tok_s * ratio * (1 + NOISE):
                out.append(f"implausible: throughput at {lv.concurrency} parallel requests is more than "
                           f"{ratio:g}\u00d7 that at {one.concurrency}.")
    for lv in levels:
        if lv.failed:
            out.append(f"{lv.failed} of {lv.concurrency} requests failed at concurrency {lv.concurrency}: "
                       f"{lv.errors[0] if lv.errors else ''}")
    return out


BATCHING_SHARE = 0.5  # of the ideal rise (N times the requests, N times the throughput) that counts as batching


def batching_bar(ratio: float, noise: float = NOISE) -> float:
    """The throughput gain (high level / low level) above which a server is said to batch: at least
    ``BATCHING_SHARE`` of the ideal gain ``ratio`` (= N_high / N_low), and never within twice the noise of 1.
    1 -> 4 requests: 2.5x; 1 -> 2: 1.5x; 1 -> 8: 4.5x."""
    return max(1 + BATCHING_SHARE * (ratio - 1), 1 + 2 * noise)


def _noise(levels) -> float:
    """Relative noise of this sweep: the default, or more when one level's requests disagreed among themselves
    (spread of their time per output token, half range over median), which a single gain cannot show."""
    spreads = [(lv.tpot_s.hi - lv.tpot_s.lo) / (2 * lv.tpot_s.median) for lv in levels
               if len(lv.requests) > 1 and lv.tpot_s.median > 0 and math.isfinite(lv.tpot_s.median)]
    return max([NOISE] + [min(x, 0.5) for x in spreads if math.isfinite(x)])


def batching_verdict(levels) -> str:
    """What the sweep says about the server's scheduling, from throughput at the highest vs lowest level.

    Batching only when throughput rose by at least half the ideal (``batching_bar``); one request after
    another when it stayed within the noise of flat; in between, no verdict (a 1.3x rise from 1 to 4 requests
    is not batching: a server can overlap tokenization or network with decoding, and machines are noisy)."""
    if len(levels) < 2:
        return "Run at least two concurrency levels to see how the server shares its time."
    a, b = levels[0], levels[-1]
    gain = b.throughput_tok_s / a.throughput_tok_s if a.throughput_tok_s > 0 else math.nan
    slow = b.latency_s.median / a.latency_s.median if a.latency_s.median > 0 else math.nan
    ratio = b.concurrency / a.concurrency
    noise = _noise(levels)
    bar = batching_bar(ratio, noise)
    if not math.isfinite(gain):
        return "The throughput could not be measured at both ends of the sweep, so nothing can be said about batching."
    if gain >= bar:
        return (f"Throughput grew {gain:.1f}\u00d7 from {a.concurrency} to {b.concurrency} parallel requests "
                f"({ratio:g}\u00d7 the requests; {bar:.1f}\u00d7 or more counts as batching) while each request took "
                f"{slow:.1f}\u00d7 as long: the server batches requests together (continuous batching seen from "
                "outside).")
    if gain <= 1 + noise:
        return (f"Throughput stayed about the same ({gain:.2f}\u00d7) from {a.concurrency} to {b.concurrency} "
                f"parallel requests while each request took {slow:.1f}\u00d7 as long: this server runs the requests "
                "one after another (no batching across requests), so extra users only wait.")
    return (f"Throughput rose {gain:.2f}\u00d7 from {a.concurrency} to {b.concurrency} parallel requests: more than "
            f"noise (\u00b1{noise:.0%}), but far from the {ratio:g}\u00d7 of full batching (the bar is {bar:.1f}\u00d7). "
            "No clear batching: the server may overlap a little work between requests (tokenizing, sending), or "
            "the machine was busy. Run it again, or with more parallel requests.")


# ------------------------------------------------------------------------------------------------ capacity
def p90(xs) -> float:
    """The 90th percentile (linear between the two nearest ranks); nan for no values."""
    v = sorted(x for x in xs if isinstance(x, (int, float)) and math.isfinite(x))
    if not v:
        return math.nan
    k = 0.9 * (len(v) - 1)
    lo = int(math.floor(k))
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


FULL_KV = 0.95  # KV use at or above this counts as full
PROMPT_SHARE = 0.25  # of a level's time spent reading prompts that counts as the cause


@dataclass(frozen=True)
class Capacity:
    """How many users at once get a time per output token under ``target_ms`` at the 90th percentile."""

    target_ms: float
    users: int  # the most parallel requests that met the target, with every lower level meeting it too (0: none)
    tried: int  # the highest level measured
    p90_ms: dict  # level -> p90 of its requests' time per output token (ms)
    reason: str | None  # why the next level (or the first) missed it
    text: str


def _level_reason(lv: ConcurrencyLevel, prev: ConcurrencyLevel | None) -> str:
    """Why a level missed the target, from what the sweep saw: failed requests, a full KV cache, prompt processing,
    requests waiting for a slot, or else decoding itself (a step serving more requests takes longer)."""
    n = lv.concurrency
    if lv.failed:
        return f"{lv.failed} of {n} requests failed ({lv.errors[0] if lv.errors else 'no reason given'})"
    kv = [m.kv_usage for m in lv.metrics if m.kv_usage is not None]
    if kv and max(kv) >= FULL_KV:
        return (f"the KV cache was full (peak {max(kv):.0%}): requests had to wait for room in it or were cut "
                "short")
    splits = [server_split(r) for r in lv.requests]
    prompt_ms = sum(x["server_prompt_ms"] for x in splits if x)
    if any(splits) and lv.wall_s > 0 and prompt_ms / (lv.wall_s * 1000) >= PROMPT_SHARE:
        return (f"prompt processing: the server spent {prompt_ms:.0f} ms reading the {n} prompts "
                f"({prompt_ms / (lv.wall_s * 1000):.0%} of the {lv.wall_s:.1f} s the level took, by its own "
                "timings), and the running requests' next tokens wait while a prompt is read")
    if not any(splits) and lv.latency_s.median > 0 and lv.ttft_s.median / lv.latency_s.median >= PROMPT_SHARE:
        return (f"prompt processing or queueing: the first token took {lv.ttft_s.median * 1000:.0f} ms (median), "
                f"{lv.ttft_s.median / lv.latency_s.median:.0%} of each request's time")
    slots = [m.n_slots for m in lv.metrics if m.n_slots]
    waiting = [m.waiting for m in lv.metrics if m.waiting is not None]
    if (slots and max(slots) < n) or (waiting and max(waiting) > 0):
        s = f"only {max(slots)} slots" if slots and max(slots) < n else "too few free slots"
        return (f"slots: the server has {s}, so some of the {n} requests waited for one "
                f"(up to {max(waiting or [0]):.0f} deferred at once)")
    before = f" from {prev.tpot_s.median * 1000:.0f} ms at {prev.concurrency}" if prev is not None else ""
    return (f"decoding: each step now carries {n} requests, and on this machine a step's time grows with them "
            f"(median time per token {lv.tpot_s.median * 1000:.0f} ms{before})")


def capacity(levels, target_ms: float) -> Capacity:
    """The capacity verdict from a concurrency sweep, in plain words: "this server gives N users at once a time
    per token under T ms (p90)", and the reason where it cannot (see ``_level_reason``)."""
    levels = [lv for lv in levels if lv.requests]
    target_ms = float(target_ms)
    if not levels:
        return Capacity(target_ms, 0, 0, {}, None, "No concurrency level was measured, so there is no verdict.")
    p = {lv.concurrency: p90(r.tpot_s * 1000 for r in lv.requests) for lv in levels}
    users, miss, prev = 0, None, None
    for lv in levels:
        ok = not lv.failed and math.isfinite(p[lv.concurrency]) and p[lv.concurrency] <= target_ms
        if not ok:
            miss = lv
            break
        users, prev = lv.concurrency, lv
    tried = levels[-1].concurrency

    def q(n):
        return "n/a" if not math.isfinite(p[n]) else f"{p[n]:.0f} ms"

    plural = lambda k: "user" if k == 1 else "users"  # noqa: E731
    if miss is None:
        caveat = ""
        top = levels[-1]
        slots = [m.n_slots for m in top.metrics if m.n_slots]
        waiting = [m.waiting for m in top.metrics if m.waiting is not None]
        if (slots and max(slots) < tried) or (waiting and max(waiting) > 0):
            caveat = (f" Not all at once, though: the server ran at most {max(slots) if slots else 'a few'} of them "
                      f"together and the others queued for a slot (first token after "
                      f"{p90(r.ttft_s * 1000 for r in top.requests):.0f} ms, p90).")
        return Capacity(target_ms, users, tried, p, None,
                        f"This server gives **{users} {plural(users)} at once** a time per token under "
                        f"**{target_ms:g} ms** (p90: {q(users)}). {tried} is the most this sweep tried, so it may "
                        f"give more.{caveat}")
    reason = _level_reason(miss, prev)
    if users == 0:
        return Capacity(target_ms, 0, tried, p, reason,
                        f"This server cannot give even {miss.concurrency} {plural(miss.concurrency)} a time per "
                        f"token under **{target_ms:g} ms** (p90 was {q(miss.concurrency)}). Reason: {reason}.")
    return Capacity(target_ms, users, tried, p, reason,
                    f"This server gives **{users} {plural(users)} at once** a time per token under "
                    f"**{target_ms:g} ms** (p90: {q(users)}). At {miss.concurrency} it was {q(miss.concurrency)}. "
                    f"Reason: {reason}.")
