"""Measurements of a serving engine seen from outside, as plain records: one request's timeline, a prompt-length
sweep, and the next-token distribution from ``top_logprobs`` (the concurrency sweep and its verdicts are
engine.serving.concurrency).

What is measured is the client's clock when each streamed chunk arrives (``time.perf_counter``), so network and
server queueing are included, as a user sees them. Token counts come from the server where it reports them
(``usage`` in the stream, llama.cpp's ``timings``, or the length of a chunk's logprobs list); otherwise one token
per chunk is assumed and the record says so (a chunk may hold several tokens: vLLM's stream interval,
speculative decoding).

Bounds: every sweep is capped (``MAX_CONCURRENCY``, ``MAX_REQUESTS``, ``MAX_SWEEP_S``) so that nobody can make
the app hammer a URL for long. ``MAX_SWEEP_S`` is a real cap: the sweep's client carries it as a deadline that
every socket operation checks (engine.serving.fence.Fence), so a silent or dripping server cannot stretch it;
``cancel`` (a threading.Event) ends a sweep within a fraction of a second and closes its connections.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from dataclasses import dataclass

from engine.serving import client as C
from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import fence as F
from engine.measure.spread import Spread

MAX_CONCURRENCY = 32  # parallel requests in one round
MAX_REQUESTS = 160  # requests in one sweep, all rounds together
MAX_SWEEP_S = 300.0  # a sweep stops starting new requests after this long
MAX_PROMPT_TOKENS = 4096
NOISE = 0.15  # relative difference treated as noise when flagging implausible numbers
SWEEP_BYTES = K.MAX_SWEEP_STREAM_BYTES  # per request of a sweep: 32 at once stay within 64 MB

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
    if len(text) > K.MAX_KEPT_TEXT:
        text = text[:K.MAX_KEPT_TEXT]
        notes.append(f"the streamed text is kept up to {K.MAX_KEPT_TEXT:,} characters")
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


def measure_request(cfg: K.ServerConfig, prompt: str, new_tokens: int, *, client=None, cancel=None,
                    top_logprobs: int = 0, prompt_tokens: int | None = None,
                    max_bytes: int = K.MAX_STREAM_BYTES) -> RequestTimeline:
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


def noop(frac: float, msg: str) -> None:
    pass


def unit_tokens(cfg, client) -> float | None:
    n = C.tokenize_count(cfg, FILLER * 4, client)
    return n / 4 if n else None


def past(deadline: float) -> bool:
    return time.monotonic() >= deadline - 0.05


def prompt_sweep(cfg: K.ServerConfig, lengths=(16, 64, 256, 1024), new_tokens: int = 16, repeats: int = 2,
                 progress: C.ProgressFn = noop, cancel: threading.Event | None = None,
                 max_s: float = MAX_SWEEP_S) -> PromptSweep:
    """One request at a time at each prompt length (after one warm-up request); all of it within ``max_s``."""
    max_s = float(min(max(0.5, max_s), MAX_SWEEP_S))
    lengths = sorted({int(min(max(4, n), MAX_PROMPT_TOKENS)) for n in lengths})
    repeats = int(min(max(1, repeats), 5))
    new_tokens = int(min(max(2, new_tokens), 128))
    total = 1 + len(lengths) * repeats
    if total > MAX_REQUESTS:
        raise E.ServingError(f"{total} requests is more than this sweep allows ({MAX_REQUESTS}).")
    points, flags, truncated = [], [], False
    deadline = time.monotonic() + max_s
    with F.make_client(cfg, 4, cancel=cancel, deadline=deadline) as cl:
        unit = unit_tokens(cfg, cl)
        progress(0.0, "warm-up request")
        measure_request(cfg, unique_prompt(16, "warm-up", unit), 2, client=cl, cancel=cancel, max_bytes=SWEEP_BYTES)
        done = 1
        for n in lengths:
            runs = []
            counted = None
            for r in range(repeats):
                if past(deadline):
                    truncated = True
                    break
                prompt = unique_prompt(n, f"{n}-{r}-{time.time_ns() % 10**9}", unit)
                progress(done / total, f"prompt of about {n} tokens, run {r + 1} of {repeats}")
                try:
                    if counted is None:
                        counted = C.tokenize_count(cfg, prompt, cl)
                    runs.append(measure_request(cfg, prompt, new_tokens, client=cl, cancel=cancel,
                                                prompt_tokens=counted, max_bytes=SWEEP_BYTES))
                except E.ServerTimeout:
                    if not past(deadline) or not points:
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


def next_token(cfg: K.ServerConfig, prompt: str, k: int = 10, client=None, cancel=None) -> NextToken:
    """One streamed request for a single token with ``top_logprobs = k`` (greedy)."""
    k = int(min(max(1, k), K.MAX_TOP_LOGPROBS))
    res = C.stream(cfg, prompt, 1, top_logprobs=k, fixed_length=False, client=client, cancel=cancel)
    top = next((c.top_logprobs for c in res.chunks if c.top_logprobs), ())
    if not top:
        raise E.NoLogprobs(
            "The server streamed the token but no log-probabilities, so the next-token distribution cannot be "
            "shown. vLLM and SGLang return them when asked (vLLM caps how many with --max-logprobs), and so does "
            "llama.cpp's server; llama-cpp-python needs logits_all (its server default); transformers serve "
            "returns none; TGI (in maintenance mode) only on /v1/chat/completions.")
    pairs = sorted(((t, math.exp(lp)) for t, lp in top if math.isfinite(lp)), key=lambda x: -x[1])[:k]
    chosen = res.chunks[0].text
    return NextToken(prompt, tuple(t for t, _ in pairs), tuple(p for _, p in pairs), chosen)
