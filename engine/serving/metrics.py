"""A serving engine's Prometheus ``/metrics``, parsed with prometheus_client's own text parser, and the few
series this app reads from it: KV-cache usage, running/waiting requests, speculative-decoding counters.

Names differ per engine (and per version); each quantity lists the names known for it, first match wins:

| quantity            | vLLM                                   | SGLang                 | llama.cpp (--metrics)            | TGI                   |
| KV-cache usage 0..1 | vllm:kv_cache_usage_perc (v1),         | sglang:token_usage     | llamacpp:kv_cache_usage_ratio    | (none)                |
|                     | vllm:gpu_cache_usage_perc (v0)         |                        |                                  |                       |
| running requests    | vllm:num_requests_running              | sglang:num_running_reqs| llamacpp:requests_processing     | tgi_batch_current_size|
| waiting requests    | vllm:num_requests_waiting              | sglang:num_queue_reqs  | llamacpp:requests_deferred       | tgi_queue_size        |
| drafted tokens      | vllm:spec_decode_num_draft_tokens      |                        | (per request: timings.draft_n)   |                       |
| accepted tokens     | vllm:spec_decode_num_accepted_tokens   |                        | (timings.draft_n_accepted)       |                       |
| mean accept length  |                                        | sglang:spec_accept_length |                               |                       |
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from engine.serving import client as C

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing",
           "tgi_batch_current_size")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred", "tgi_queue_size")
SPEC_DRAFTS = ("vllm:spec_decode_num_drafts",)
SPEC_DRAFT_TOKENS = ("vllm:spec_decode_num_draft_tokens",)
SPEC_ACCEPTED = ("vllm:spec_decode_num_accepted_tokens",)
SPEC_ACCEPT_LENGTH = ("sglang:spec_accept_length",)
PREFIXES = {"vllm:": "vLLM", "sglang:": "SGLang", "llamacpp:": "llama.cpp server", "tgi_": "TGI"}


@dataclass(frozen=True)
class Metrics:
    """One scrape: every sample's value summed over its label sets, keyed by sample name (counters keep their
    '_total' suffix in sample names; the family name without it is also a key)."""

    values: dict  # name -> float (sum over label sets)
    counts: dict  # name -> number of label sets (to turn a sum of per-engine gauges into a mean)
    families: tuple[str, ...]

    def get(self, names, mean: bool = False) -> tuple[str, float] | None:
        for n in names:
            for key in (n, n + "_total"):
                if key in self.values:
                    v = self.values[key]
                    return n, (v / max(1, self.counts.get(key, 1)) if mean else v)
        return None

    @property
    def engine(self) -> str | None:
        for prefix, name in PREFIXES.items():
            if any(f.startswith(prefix) for f in self.families):
                return name
        return None


def parse(text: str) -> Metrics:
    """Parse Prometheus text exposition format (prometheus_client's parser); raise UnexpectedReply if it is not."""
    values: dict = {}
    counts: dict = {}
    fams = []
    try:
        for fam in text_string_to_metric_families(text):
            fams.append(fam.name)
            for s in fam.samples:
                if s.value is None or (isinstance(s.value, float) and math.isnan(s.value)):
                    continue
                values[s.name] = values.get(s.name, 0.0) + float(s.value)
                counts[s.name] = counts.get(s.name, 0) + 1
                if fam.type == "counter" and s.name == fam.name + "_total":
                    values[fam.name] = values[s.name]
                    counts[fam.name] = counts[s.name]
    except (ValueError, TypeError, IndexError, RecursionError):
        raise C.UnexpectedReply("/metrics is not in Prometheus text format.") from None
    return Metrics(values, counts, tuple(fams))


def fetch(cfg: C.ServerConfig, client=None, cancel=None) -> Metrics | None:
    """The server's /metrics parsed, or None if it has none (404). Other failures raise ServingError."""
    code, body = C.get_text(cfg, "/metrics", client, cancel)
    if code == 404:
        return None
    if code in (401, 403):
        raise C.AuthFailed(f"/metrics refused the request ({code}). Check the API key.")
    if code >= 400:
        raise C.ServerError(f"/metrics answered {code}.")
    return parse(body)


@dataclass(frozen=True)
class MetricsSample:
    """The quantities this app shows, at ``t_s`` seconds into a sweep level (None: the server does not report it)."""

    t_s: float
    kv_usage: float | None  # fraction 0..1 of the KV-cache blocks/tokens in use
    running: float | None
    waiting: float | None
    spec_drafts: float | None
    spec_draft_tokens: float | None
    spec_accepted: float | None
    spec_accept_length: float | None
    kv_name: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def summarize(m: Metrics, t_s: float = 0.0) -> MetricsSample:
    def val(names, mean=False):
        got = m.get(names, mean)
        return got[1] if got else None

    kv = m.get(KV_USAGE, mean=True)
    kv_val = kv[1] if kv else None
    if kv_val is not None and kv_val > 1.0 + 1e-9:  # some versions report percent
        kv_val /= 100.0
    return MetricsSample(t_s, kv_val, val(RUNNING), val(WAITING), val(SPEC_DRAFTS), val(SPEC_DRAFT_TOKENS),
                         val(SPEC_ACCEPTED), val(SPEC_ACCEPT_LENGTH, mean=True), kv[0] if kv else None)


def sample_metrics(cfg: C.ServerConfig, client=None, t_s: float = 0.0) -> MetricsSample | None:
    """One summarized scrape, or None when the server has no usable /metrics (never raises: a sweep goes on)."""
    try:
        m = fetch(cfg, client)
    except C.Cancelled:
        raise  # the sweep's own stop, not a /metrics problem
    except C.ServingError:
        return None
    return summarize(m, t_s) if m is not None else None


@dataclass(frozen=True)
class Offer:
    """What the server exposes, for the page's 'what this server offers' table."""

    has_metrics: bool
    engine: str | None
    kv_usage: str | None
    running: str | None
    waiting: str | None
    spec: tuple[str, ...]
    n_families: int


def offer(m: Metrics | None) -> Offer:
    if m is None:
        return Offer(False, None, None, None, None, (), 0)
    name = lambda names: (m.get(names) or (None,))[0]  # noqa: E731
    spec = tuple(n for n in (name(SPEC_DRAFTS), name(SPEC_DRAFT_TOKENS), name(SPEC_ACCEPTED),
                             name(SPEC_ACCEPT_LENGTH)) if n)
    return Offer(True, m.engine, name(KV_USAGE), name(RUNNING), name(WAITING), spec, len(m.families))


def spec_delta(before: MetricsSample | None, after: MetricsSample | None) -> dict | None:
    """Drafted and accepted tokens during a sweep (counter difference) and the acceptance rate
    accepted / drafted; SGLang's mean acceptance length as reported at the end. None when not reported."""
    if before is None or after is None:
        return None
    out = {}
    if after.spec_draft_tokens is not None and before.spec_draft_tokens is not None:
        drafted = after.spec_draft_tokens - before.spec_draft_tokens
        accepted = (after.spec_accepted or 0.0) - (before.spec_accepted or 0.0)
        out.update(drafted=drafted, accepted=accepted, acceptance=accepted / drafted if drafted > 0 else math.nan)
        if after.spec_drafts is not None and before.spec_drafts is not None:
            out["drafts"] = after.spec_drafts - before.spec_drafts
    if after.spec_accept_length is not None:
        out["mean_accept_length"] = after.spec_accept_length
    return out or None


def timings_spec(requests) -> dict | None:
    """llama.cpp server's per-request draft counters (timings.draft_n / draft_n_accepted), summed."""
    drafted = accepted = 0
    seen = False
    for r in requests:
        t = r.server_timings or {}
        if "draft_n" in t:
            seen = True
            drafted += int(t.get("draft_n") or 0)
            accepted += int(t.get("draft_n_accepted") or 0)
    if not seen:
        return None
    return {"drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else math.nan}
