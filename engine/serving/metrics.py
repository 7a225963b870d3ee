"""A serving engine's Prometheus ``/metrics``, parsed with prometheus_client's own text parser, llama.cpp's
``/slots``, and the few series this app reads from them: KV-cache usage, running/waiting requests,
speculative-decoding counters (with accepted tokens per draft position where the engine exports them).

Names differ per engine and version: they live in one table, engine.serving.names (which rows were checked
against a real server, which were read from documentation). A quantity a server does not export is None here,
and the page says it is missing; it is never drawn as 0. llama.cpp's server has no KV gauge in /metrics: KV use
is then read from /slots (tokens cached in each slot against its context), when the server was started with
``--slots``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from engine.serving import client as C
from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import names as N

KV_USAGE = N.names_for("kv_usage")
RUNNING = N.names_for("running")
WAITING = N.names_for("waiting")
SPEC_DRAFTS = N.names_for("spec_drafts")
SPEC_DRAFT_TOKENS = N.names_for("spec_draft_tokens")
SPEC_ACCEPTED = N.names_for("spec_accepted")
SPEC_ACCEPTED_PER_POS = N.names_for("spec_accepted_per_pos")
SPEC_ACCEPT_LENGTH = N.names_for("spec_accept_length")
PREFIXES = N.PREFIXES
MISSING = (404, 501)  # no such endpoint; llama-server without --metrics / --slots answers 501 "not supported"


@dataclass(frozen=True)
class Metrics:
    """One scrape: every sample's value summed over its label sets, keyed by sample name (counters keep their
    '_total' suffix in sample names; the family name without it is also a key)."""

    values: dict  # name -> float (sum over label sets)
    counts: dict  # name -> number of label sets (to turn a sum of per-engine gauges into a mean)
    families: tuple[str, ...]
    labeled: dict | None = None  # name -> ((labels dict, value), ...) for every sample

    def per_label(self, names, label: str) -> tuple[str, tuple[float, ...]] | None:
        """(name, values ordered by the integer ``label``) for the first of ``names`` present, e.g. accepted
        tokens per draft position; None when absent."""
        for n in names:
            for key in (n + "_total", n):
                got = (self.labeled or {}).get(key)
                if got:
                    pos = {}
                    for labels, v in got:
                        try:
                            pos[int(labels.get(label, ""))] = pos.get(int(labels.get(label, "")), 0.0) + v
                        except ValueError:
                            continue
                    if pos:
                        return n, tuple(pos.get(i, 0.0) for i in range(max(pos) + 1))
        return None

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
    labeled: dict = {}
    fams = []
    try:
        for fam in text_string_to_metric_families(text):
            fams.append(fam.name)
            for s in fam.samples:
                if s.value is None or (isinstance(s.value, float) and math.isnan(s.value)):
                    continue
                values[s.name] = values.get(s.name, 0.0) + float(s.value)
                counts[s.name] = counts.get(s.name, 0) + 1
                if s.labels and len(labeled.get(s.name, ())) < 256:
                    labeled.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
                if fam.type == "counter" and s.name == fam.name + "_total":
                    values[fam.name] = values[s.name]
                    counts[fam.name] = counts[s.name]
    except (ValueError, TypeError, IndexError, RecursionError):
        raise E.UnexpectedReply("/metrics is not in Prometheus text format.") from None
    return Metrics(values, counts, tuple(fams), {k: tuple(v) for k, v in labeled.items()})


def fetch(cfg: K.ServerConfig, client=None, cancel=None) -> Metrics | None:
    """The server's /metrics parsed, or None if it has none (404, or llama-server's 501 without --metrics).
    Other failures raise ServingError."""
    code, body = C.get_text(cfg, "/metrics", client, cancel)
    if code in MISSING:
        return None
    if code in (401, 403):
        raise E.AuthFailed(f"/metrics refused the request ({code}). Check the API key.")
    if code >= 400:
        raise E.ServerError(f"/metrics answered {code}.")
    return parse(body)


# ------------------------------------------------------------------------------------------------ /slots
@dataclass(frozen=True)
class SlotsUse:
    """llama.cpp's /slots at one moment: how many slots, how many busy, and the tokens held in each slot's cache
    against its context (``n_prompt_tokens``: the prompt plus what it generated so far, kept after the request
    ends so a next request with the same prefix can reuse it)."""

    n_slots: int
    busy: int
    cached: tuple[int, ...]  # tokens in each slot's cache
    n_ctx: tuple[int, ...]  # each slot's context (tokens)
    speculative: bool

    @property
    def kv_usage(self) -> float | None:
        """Tokens cached in all slots / all slots' contexts. With ``--parallel N`` each slot has its own share of
        the context and this is exact. Started without ``--parallel`` (4 slots, ``--kv-unified``) the slots share
        one pool and each reports the whole pool as its n_ctx; /slots does not say which, so the figure is then
        up to N times too low (docs/serving.md says so)."""
        total = sum(self.n_ctx)
        return min(1.0, sum(self.cached) / total) if total > 0 else None


def parse_slots(data) -> SlotsUse:
    """/slots' JSON list; UnexpectedReply when it is not llama.cpp's shape."""
    if not isinstance(data, list) or not data or len(data) > 4096 or not all(isinstance(x, dict) for x in data):
        raise E.UnexpectedReply("/slots did not answer a list of slots.")

    def num(x, key):
        v = x.get(key, 0)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 else 0

    return SlotsUse(len(data), sum(1 for x in data if x.get("is_processing") is True),
                    tuple(num(x, "n_prompt_tokens") for x in data), tuple(num(x, "n_ctx") for x in data),
                    any(x.get("speculative") is True for x in data))


def fetch_slots(cfg: K.ServerConfig, client=None, cancel=None) -> SlotsUse | None:
    """llama.cpp's /slots, or None when the server has none (404, or 501: llama-server without --slots)."""
    code, body = C.get_text(cfg, "/slots", client, cancel)
    if code in MISSING:
        return None
    if code in (401, 403):
        raise E.AuthFailed(f"/slots refused the request ({code}). Check the API key.")
    if code >= 400:
        raise E.ServerError(f"/slots answered {code}.")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise E.UnexpectedReply("/slots did not answer JSON.") from None
    return parse_slots(data)


SLOTS_KV = N.LLAMA_CPP.extra["kv_usage"]


# ------------------------------------------------------------------------------------------------ samples
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
    kv_name: str | None = None  # the gauge it came from, or SLOTS_KV
    spec_accepted_per_pos: tuple[float, ...] | None = None
    n_slots: int | None = None  # llama.cpp /slots
    busy_slots: int | None = None

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        if d["spec_accepted_per_pos"] is not None:
            d["spec_accepted_per_pos"] = list(d["spec_accepted_per_pos"])
        return d


def summarize(m: Metrics | None, t_s: float = 0.0, slots: SlotsUse | None = None) -> MetricsSample:
    """One sample from a /metrics scrape and/or llama.cpp's /slots: KV use from the gauge when there is one, else
    from /slots; running requests from the gauge, else the busy slots."""
    def val(names, mean=False):
        got = m.get(names, mean) if m is not None else None
        return got[1] if got else None

    kv = m.get(KV_USAGE, mean=True) if m is not None else None
    kv_val, kv_name = (kv[1], kv[0]) if kv else (None, None)
    if kv_val is not None and kv_val > 1.0 + 1e-9:  # some versions report percent
        kv_val /= 100.0
    if kv_val is None and slots is not None and slots.kv_usage is not None:
        kv_val, kv_name = slots.kv_usage, SLOTS_KV
    running = val(RUNNING)
    if running is None and slots is not None:
        running = float(slots.busy)
    per_pos = m.per_label(SPEC_ACCEPTED_PER_POS, "position") if m is not None else None
    return MetricsSample(t_s, kv_val, running, val(WAITING), val(SPEC_DRAFTS), val(SPEC_DRAFT_TOKENS),
                         val(SPEC_ACCEPTED), val(SPEC_ACCEPT_LENGTH, mean=True), kv_name,
                         per_pos[1] if per_pos else None,
                         slots.n_slots if slots else None, slots.busy if slots else None)


class Scraper:
    """Samples a server during a sweep: /metrics, and llama.cpp's /slots when /metrics has no KV gauge. The first
    sample finds out what the server has; later ones ask only for that. Never raises but RequestCancelled."""

    def __init__(self, cfg: K.ServerConfig, client=None):
        self.cfg, self.client = cfg, client
        self.use_metrics = True
        self.use_slots: bool | None = None  # None: not asked yet

    def sample(self, t_s: float = 0.0) -> MetricsSample | None:
        m = sl = None
        if self.use_metrics:
            try:
                m = fetch(self.cfg, self.client)
            except E.RequestCancelled:
                raise
            except E.ServingError:
                m = None
            self.use_metrics = m is not None
        want_slots = self.use_slots is not False and (m is None or m.get(KV_USAGE) is None)
        if want_slots:
            try:
                sl = fetch_slots(self.cfg, self.client)
            except E.RequestCancelled:
                raise
            except E.ServingError:
                sl = None
            self.use_slots = sl is not None
        if m is None and sl is None:
            return None
        return summarize(m, t_s, sl)


def sample_metrics(cfg: K.ServerConfig, client=None, t_s: float = 0.0) -> MetricsSample | None:
    """One summarized scrape (/metrics, and /slots when it has no KV gauge), or None when the server offers
    neither (never raises: a sweep goes on)."""
    return Scraper(cfg, client).sample(t_s)


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
    slots: SlotsUse | None = None


def offer(m: Metrics | None, slots: SlotsUse | None = None) -> Offer:
    if m is None:
        return Offer(False, "llama.cpp server" if slots else None, SLOTS_KV if slots else None,
                     "/slots: busy slots" if slots else None, None, (), 0, slots)
    name = lambda names: (m.get(names) or (None,))[0]  # noqa: E731
    spec = tuple(n for n in (name(SPEC_DRAFTS), name(SPEC_DRAFT_TOKENS), name(SPEC_ACCEPTED),
                             name(SPEC_ACCEPT_LENGTH)) if n)
    kv = name(KV_USAGE) or (SLOTS_KV if slots is not None else None)
    return Offer(True, m.engine, kv, name(RUNNING), name(WAITING), spec, len(m.families), slots)


def spec_delta(before: MetricsSample | None, after: MetricsSample | None) -> dict | None:
    """Drafted and accepted tokens during a sweep (counter difference) and the acceptance rate
    accepted / drafted; accepted tokens per draft position (llama.cpp, vLLM) and the share of drafts whose
    token at that position was accepted; SGLang's mean acceptance length as reported at the end. None when not
    reported."""
    if before is None or after is None:
        return None
    out = {}
    if after.spec_draft_tokens is not None and before.spec_draft_tokens is not None:
        drafted = after.spec_draft_tokens - before.spec_draft_tokens
        accepted = (after.spec_accepted or 0.0) - (before.spec_accepted or 0.0)
        out.update(drafted=drafted, accepted=accepted, acceptance=accepted / drafted if drafted > 0 else math.nan)
        if after.spec_drafts is not None and before.spec_drafts is not None:
            out["drafts"] = after.spec_drafts - before.spec_drafts
    if after.spec_accepted_per_pos is not None:
        b = before.spec_accepted_per_pos or ()
        per = tuple(a - (b[i] if i < len(b) else 0.0) for i, a in enumerate(after.spec_accepted_per_pos))
        out["accepted_per_pos"] = per
        if out.get("drafts"):
            out["accept_rate_per_pos"] = tuple(x / out["drafts"] for x in per)
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
