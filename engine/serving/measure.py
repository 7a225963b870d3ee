"""Measurements of a serving engine seen from outside, as plain records: one request's timeline, a prompt-length
sweep, a concurrency sweep, and the next-token distribution from ``top_logprobs``.

What is measured is the client's clock when each streamed chunk arrives (``time.perf_counter``), so network and
server queueing are included, as a user sees them. Token counts come from the server where it reports them
(``usage`` in the stream, llama.cpp's ``timings``, or the length of a chunk's logprobs list); otherwise one token
per chunk is assumed and the record says so (a chunk may hold several tokens: vLLM's stream interval,
speculative decoding).

Bounds: every sweep is capped (``MAX_CONCURRENCY``, ``MAX_REQUESTS``, ``MAX_SWEEP_S``) so that nobody can make
the app hammer a URL for long. ``MAX_SWEEP_S`` is a real cap: the sweep's client carries it as a deadline that
every socket operation checks (engine.serving.client.Fence), so a silent or dripping server cannot stretch it;
``cancel`` (a threading.Event) ends a sweep within a fraction of a second and closes its connections.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait, FIRST_COMPLETED
from dataclasses import dataclass

from engine.serving import client as C
from engine.serving.metrics import MetricsSample, Scraper
from engine.measure.spread import Spread  # noqa: F401  (re-exported: records here are built of it)

MAX_CONCURRENCY = 32  # parallel requests in one round
MAX_REQUESTS = 160  # requests in one sweep, all rounds together
MAX_SWEEP_S = 300.0  # a sweep stops starting new requests after this long
MAX_PROMPT_TOKENS = 4096
NOISE = 0.15  # relative difference treated as noise when flagging implausible numbers
SWEEP_BYTES = C.MAX_SWEEP_STREAM_BYTES  # per request of a sweep: 32 at once stay within 64 MB

FILLER = ("The river carried the boat past quiet villages, old bridges and green fields, while the travellers "
          "talked about the weather, the harvest, and the long road that still lay ahead of them. ")




# ------------------------------------------------------------------------------------------------ one request
@dataclass(frozen=True)
class RequestTimeline:
    """One streamed request. Times in seconds since it was sent; ``start_s`` places it among parallel ones.

    ttft_s        = arrival of the first chunk with text
    itl_s[i]      = gap between chunk i and chunk i+1 (inter-token latency when every chunk holds one token)
    tpot_s        = (last chunk - first chunk) / (tokens after the first chunk)  (time per output token)
    decode_tok_s  = 1 / tpot_s;   overall_tok_s = completion tokens / total time
    """

    start_s: float
    ttft_s: float
    end_s: float
    chunk_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    text: str
    completion_tokens: int
    token_source: str  # "usage" | "llama.cpp timings" | "logprobs" | "chunks (1 token assumed per chunk)"
    prompt_tokens: int | None
    prompt_source: str
    finish_reason: str | None
    server_timings: dict | None
    notes: tuple[str, ...] = ()

    @property
    def itl_s(self) -> tuple[float, ...]:
        return tuple(b - a for a, b in zip(self.chunk_s, self.chunk_s[1:]))

    @property
    def decode_s(self) -> float:
        return self.chunk_s[-1] - self.chunk_s[0]

    @property
    def tpot_s(self) -> float:
        after_first = self.completion_tokens - self.chunk_tokens[0]
        return self.decode_s / after_first if after_first > 0 else math.nan

    @property
    def decode_tok_s(self) -> float:
        t = self.tpot_s
        return 1.0 / t if t and math.isfinite(t) and t > 0 else math.nan

    @property
    def overall_tok_s(self) -> float:
        return self.completion_tokens / self.end_s if self.end_s > 0 else math.nan

    @property
    def latency_s(self) -> float:
        return self.end_s

    def to_dict(self) -> dict:
        return {"start_s": self.start_s, "ttft_s": self.ttft_s, "end_s": self.end_s, "tpot_s": self.tpot_s,
                "decode_tok_s": self.decode_tok_s, "overall_tok_s": self.overall_tok_s,
                "completion_tokens": self.completion_tokens, "token_source": self.token_source,
                "prompt_tokens": self.prompt_tokens, "prompt_source": self.prompt_source, "chunks": len(self.chunk_s),
                "chunk_s": list(self.chunk_s), "chunk_tokens": list(self.chunk_tokens),
                "finish_reason": self.finish_reason, "server_timings": self.server_timings, "notes": list(self.notes)}


def timeline(res: C.StreamResult, start_s: float = 0.0, prompt_tokens: int | None = None) -> RequestTimeline:
    """A RequestTimeline from one StreamResult, with token counts from the best source the server gave."""
    chunk_tokens = [c.tokens for c in res.chunks]
    counted = sum(chunk_tokens)
    notes = list(res.notes)
    usage, tm = res.usage or {}, res.timings or {}
    if isinstance(usage.get("completion_tokens"), (int, float)) and usage["completion_tokens"] > 0:
        n, src = int(usage["completion_tokens"]), "usage"
    elif isinstance(tm.get("predicted_n"), (int, float)) and tm["predicted_n"] > 0:
        n, src = int(tm["predicted_n"]), "llama.cpp timings"
    elif all(c.counted for c in res.chunks):
        n, src = counted, "logprobs"
    else:
        n, src = counted, "chunks (1 token assumed per chunk)"
    if n < len(res.chunks):
        notes.append(f"the server counted {n} tokens in {len(res.chunks)} chunks; using the chunk count")
        n = len(res.chunks)
    if src in ("usage", "llama.cpp timings") and n != counted and not all(c.counted for c in res.chunks):
        # the server says how many tokens there were; spread the extra ones over the chunks in proportion
        extra = n - counted
        chunk_tokens[-1] += extra if len(chunk_tokens) == 1 else 0
        if len(chunk_tokens) > 1:
            per = extra / (len(chunk_tokens) - 1)
            acc = 0.0
            for i in range(1, len(chunk_tokens)):
                acc += per
                add = int(round(acc))
                chunk_tokens[i] += add
                acc -= add
            chunk_tokens[-1] += n - sum(chunk_tokens)
        notes.append(f"{len(res.chunks)} chunks carried {n} tokens: some chunks held more than one token")
    if isinstance(usage.get("prompt_tokens"), (int, float)):
        p, psrc = int(usage["prompt_tokens"]), "usage"
    elif isinstance(tm.get("prompt_n"), (int, float)):
        p, psrc = int(tm["prompt_n"]), "llama.cpp timings (tokens not served from cache)"
    elif prompt_tokens is not None:
        p, psrc = int(prompt_tokens), "server tokenizer"
    else:
        p, psrc = None, "not reported"
    times = tuple(c.t_s for c in res.chunks)
    text = "".join(c.text for c in res.chunks)
    if len(text) > C.MAX_KEPT_TEXT:
        text = text[:C.MAX_KEPT_TEXT]
        notes.append(f"the streamed text is kept up to {C.MAX_KEPT_TEXT:,} characters")
    return RequestTimeline(start_s, times[0], res.end_s, times, tuple(chunk_tokens), text,
                           n, src, p, psrc, res.finish_reason, res.timings, tuple(notes))


def unique_prompt(n_tokens_hint: int, tag: str, unit_tokens: float | None = None) -> str:
    """A prompt of about ``n_tokens_hint`` tokens that starts with ``tag``, so no two prompts share a prefix
    (servers cache prompt prefixes: vLLM's automatic prefix caching, llama.cpp's slot reuse; a shared prefix
    would skip part of the prefill and hide its cost)."""
    per_unit = unit_tokens or 36.0  # tokens of FILLER in a typical BPE tokenizer
    head = f"Note {tag}. "
    reps = max(0.0, (n_tokens_hint - 6) / per_unit)
    whole = int(reps)
    words = FILLER.split()
    part = " ".join(words[: int(round((reps - whole) * len(words)))])
    return head + FILLER * whole + part


def measure_request(cfg: C.ServerConfig, prompt: str, new_tokens: int, *, client=None, cancel=None,
                    top_logprobs: int = 0, prompt_tokens: int | None = None,
                    max_bytes: int = C.MAX_STREAM_BYTES) -> RequestTimeline:
    res = C.stream(cfg, prompt, new_tokens, top_logprobs=top_logprobs, client=client, cancel=cancel,
                   max_bytes=max_bytes)
    return timeline(res, 0.0, prompt_tokens)


# ------------------------------------------------------------------------------------------------ prompt sweep
@dataclass(frozen=True)
class PromptPoint:
    target_tokens: int
    prompt_tokens: int | None
    prompt_source: str
    ttft_s: Spread
    tpot_s: Spread
    runs: tuple[RequestTimeline, ...]


@dataclass(frozen=True)
class PromptSweep:
    """TTFT and time per output token against prompt length, one request at a time (medians over repeats).

    Expected from the loop: prefill reads every prompt token, so TTFT grows with length; a decode step reads the
    weights once per token whatever the prompt, so TPOT stays nearly flat (it grows a little with the KV cache)."""

    new_tokens: int
    repeats: int
    points: tuple[PromptPoint, ...]
    truncated: bool
    flags: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"new_tokens": self.new_tokens, "repeats": self.repeats, "truncated": self.truncated,
                "flags": list(self.flags),
                "points": [{"target_tokens": p.target_tokens, "prompt_tokens": p.prompt_tokens,
                            "prompt_source": p.prompt_source, "ttft_s": p.ttft_s.range_dict(),
                            "tpot_s": p.tpot_s.range_dict()}
                           for p in self.points]}


def _noop(frac: float, msg: str) -> None:
    pass


def _unit_tokens(cfg, client) -> float | None:
    n = C.tokenize_count(cfg, FILLER * 4, client)
    return n / 4 if n else None


def _past(deadline: float) -> bool:
    return time.monotonic() >= deadline - 0.05


def prompt_sweep(cfg: C.ServerConfig, lengths=(16, 64, 256, 1024), new_tokens: int = 16, repeats: int = 2,
                 progress: C.ProgressFn = _noop, cancel: threading.Event | None = None,
                 max_s: float = MAX_SWEEP_S) -> PromptSweep:
    """One request at a time at each prompt length (after one warm-up request); all of it within ``max_s``."""
    max_s = float(min(max(0.5, max_s), MAX_SWEEP_S))
    lengths = sorted({int(min(max(4, n), MAX_PROMPT_TOKENS)) for n in lengths})
    repeats = int(min(max(1, repeats), 5))
    new_tokens = int(min(max(2, new_tokens), 128))
    total = 1 + len(lengths) * repeats
    if total > MAX_REQUESTS:
        raise C.ServingError(f"{total} requests is more than this sweep allows ({MAX_REQUESTS}).")
    points, flags, truncated = [], [], False
    deadline = time.monotonic() + max_s
    with C.make_client(cfg, 4, cancel=cancel, deadline=deadline) as cl:
        unit = _unit_tokens(cfg, cl)
        progress(0.0, "warm-up request")
        measure_request(cfg, unique_prompt(16, "warm-up", unit), 2, client=cl, cancel=cancel, max_bytes=SWEEP_BYTES)
        done = 1
        for n in lengths:
            runs = []
            counted = None
            for r in range(repeats):
                if _past(deadline):
                    truncated = True
                    break
                prompt = unique_prompt(n, f"{n}-{r}-{time.time_ns() % 10**9}", unit)
                progress(done / total, f"prompt of about {n} tokens, run {r + 1} of {repeats}")
                try:
                    if counted is None:
                        counted = C.tokenize_count(cfg, prompt, cl)
                    runs.append(measure_request(cfg, prompt, new_tokens, client=cl, cancel=cancel,
                                                prompt_tokens=counted, max_bytes=SWEEP_BYTES))
                except C.ServerTimeout:
                    if not _past(deadline) or not points:
                        raise  # the server's own timeout, or nothing measured at all
                    truncated = True
                    break
                done += 1
            if not runs:
                break
            pt = [x.prompt_tokens for x in runs if x.prompt_tokens is not None]
            points.append(PromptPoint(n, int(statistics.median(pt)) if pt else None, runs[0].prompt_source,
                                      Spread.of(x.ttft_s for x in runs), Spread.of(x.tpot_s for x in runs), tuple(runs)))
            if truncated:
                break
    progress(1.0, "done")
    if truncated:
        flags.append(f"stopped after {max_s:.0f} s: the remaining lengths were not measured")
    flags += prompt_flags(points)
    return PromptSweep(new_tokens, repeats, tuple(points), truncated, tuple(flags))


def prompt_flags(points) -> list[str]:
    """Numbers that contradict how prefill works are flagged, not shown plainly."""
    out = []
    if len(points) >= 2:
        a, b = points[0], points[-1]
        if b.ttft_s.median < a.ttft_s.median * (1 - NOISE):
            out.append(f"implausible: the longest prompt ({b.target_tokens} tokens) had a shorter time to first token "
                       f"({b.ttft_s.median * 1000:.0f} ms) than the shortest ({a.ttft_s.median * 1000:.0f} ms). "
                       "A prefix cache or a noisy server? Run it again.")
        if a.prompt_tokens and b.prompt_tokens and b.prompt_tokens <= a.prompt_tokens:
            out.append("implausible: the server counted no more prompt tokens for the longest prompt than for the "
                       "shortest one")
        tpots = [p.tpot_s.median for p in points if math.isfinite(p.tpot_s.median)]
        if tpots and max(tpots) > 2 * min(tpots):
            out.append(f"noisy: the time per output token ranged from {min(tpots) * 1000:.0f} to "
                       f"{max(tpots) * 1000:.0f} ms across lengths. A decode step reads the same weights whatever the "
                       "prompt, so this spread is the server or this machine being busy; run it again.")
    return out


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
                    errors.append(str(exc) if isinstance(exc, C.ServingError) else f"{type(exc).__name__}: {exc}")
            if scraper is not None:
                s = scraper.sample(time.perf_counter() - t0)
                if s is not None:
                    samples.append(s)
            on_tick(len(results) + len(errors))  # may raise (the UI stops a left session this way)
            if _past(deadline) or cancel.is_set():
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


def concurrency_sweep(cfg: C.ServerConfig, levels=(1, 2, 4, 8), new_tokens: int = 32, prompt_tokens: int = 64,
                      progress: C.ProgressFn = _noop, cancel: threading.Event | None = None,
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
        raise C.ServingError(f"{total} requests is more than this sweep allows ({MAX_REQUESTS}); use fewer levels.")
    max_s = float(min(max(0.5, max_s), MAX_SWEEP_S))
    stop = threading.Event()  # set at the deadline or on cancel: ends the round's requests
    outer = cancel
    cancel = _Either(stop, outer)
    out, truncated = [], False
    deadline = time.monotonic() + max_s
    with C.make_client(cfg, max(levels) + 4, cancel=cancel, deadline=deadline) as cl:
        scraper = Scraper(cfg, cl) if poll_metrics else None
        before = scraper.sample(0.0) if scraper is not None else None
        if before is None:
            scraper = None
        unit = _unit_tokens(cfg, cl)
        progress(0.0, "warm-up request")
        measure_request(cfg, unique_prompt(16, "warm-up", unit), 2, client=cl, cancel=cancel, max_bytes=SWEEP_BYTES)
        done = 1
        for n in levels:
            if _past(deadline):
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
                raise C.RequestCancelled("Cancelled.")
            if not res and _past(deadline) and out:
                truncated = True
                break
            if not res:
                raise C.ServingError(f"All {n} parallel requests failed: {errs[0] if errs else 'no reason given'}")
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


# ------------------------------------------------------------------------------------------------ server's own clock
def server_split(tl: RequestTimeline) -> dict | None:
    """llama.cpp's own ``timings`` beside the client's clock: the server's prompt time (prompt_ms, for prompt_n
    tokens not served from its cache) against the client's time to first token. What the server did not count,
    ``outside_ms`` = TTFT - prompt time, is queueing for a slot, HTTP and JSON, transport and the first token's
    sampling. None when the server sent no timings (every server but llama.cpp's)."""
    t = tl.server_timings or {}
    pm = t.get("prompt_ms")
    if not isinstance(pm, (int, float)) or not math.isfinite(pm) or pm < 0:
        return None
    ttft_ms = tl.ttft_s * 1000.0
    out = {"ttft_ms": ttft_ms, "server_prompt_ms": float(pm), "outside_ms": max(0.0, ttft_ms - float(pm)),
           "prompt_n": t.get("prompt_n"), "cache_n": t.get("cache_n")}
    gm = t.get("predicted_ms")
    if isinstance(gm, (int, float)) and math.isfinite(gm) and gm >= 0:
        out["server_predicted_ms"] = float(gm)
        out["predicted_n"] = t.get("predicted_n")
        out["client_stream_ms"] = (tl.chunk_s[-1] - tl.chunk_s[0]) * 1000.0
    return out


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


# ------------------------------------------------------------------------------------------------ logprobs
@dataclass(frozen=True)
class NextToken:
    """The server's distribution over the next token after ``prompt``: the top ``k`` (token, probability)
    pairs from ``top_logprobs`` (p = exp(logprob)), most likely first. ``covered`` = their total probability."""

    prompt: str
    tokens: tuple[str, ...]
    probs: tuple[float, ...]
    chosen: str

    @property
    def covered(self) -> float:
        return float(sum(self.probs))

    def to_dict(self) -> dict:
        return {"tokens": list(self.tokens), "probs": list(self.probs), "chosen": self.chosen, "covered": self.covered}


def next_token(cfg: C.ServerConfig, prompt: str, k: int = 10, client=None, cancel=None) -> NextToken:
    """One streamed request for a single token with ``top_logprobs = k`` (greedy)."""
    k = int(min(max(1, k), C.MAX_TOP_LOGPROBS))
    res = C.stream(cfg, prompt, 1, top_logprobs=k, fixed_length=False, client=client, cancel=cancel)
    top = next((c.top_logprobs for c in res.chunks if c.top_logprobs), ())
    if not top:
        raise C.NoLogprobs(
            "The server streamed the token but no log-probabilities, so the next-token distribution cannot be "
            "shown. vLLM and SGLang return them when asked (vLLM caps how many with --max-logprobs), and so does "
            "llama.cpp's server; llama-cpp-python needs logits_all (its server default); transformers serve "
            "returns none; TGI (in maintenance mode) only on /v1/chat/completions.")
    pairs = sorted(((t, math.exp(lp)) for t, lp in top if math.isfinite(lp)), key=lambda x: -x[1])[:k]
    chosen = res.chunks[0].text
    return NextToken(prompt, tuple(t for t, _ in pairs), tuple(p for _, p in pairs), chosen)
