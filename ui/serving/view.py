"""Small view helpers for the serving page: the 'what this server offers' table and the numbers that go with each
figure (server text shown in markdown goes through ui.frame.html.md_escape). No figures here (ui.serving.figures) and no runs (ui.serving.runs)."""
from __future__ import annotations

import math

import pandas as pd

from engine.serving import metrics as M
from engine.serving import names as N
from engine.serving.concurrency import ConcurrencySweep
from engine.serving.measure import RequestTimeline, server_split
from engine.serving.probe import ServerInfo

def fmt(x, spec: str = ".1f", unit: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:{spec}}{unit}"


def offers_table(info: ServerInfo, logprobs: str = "not asked yet", tokens: str = "not measured yet") -> pd.DataFrame:
    o = info.offer
    no = "not offered"
    rows = [
        ("Models (/v1/models)", ", ".join(info.models) or "none listed"),
        ("Engine", info.engine or "unknown (not said by /v1/models or /metrics)"),
        ("Token counts per request", tokens),
        ("Log-probabilities (top_logprobs)", logprobs),
        ("Prometheus /metrics", f"yes, {o.n_families} metric families" if o.has_metrics else "no"),
        ("Slots (/slots)", f"yes: {o.slots.n_slots} slot(s) of {o.slots.n_ctx[0] if o.slots.n_ctx else '?'} tokens"
         + (", speculative" if o.slots.speculative else "") if o.slots else "no"),
        ("KV-cache usage", o.kv_usage or "missing (no gauge in /metrics, no /slots)"),
        ("Running requests", o.running or no),
        ("Waiting requests", o.waiting or no),
        ("Speculative decoding counters", ", ".join(o.spec) if o.spec else
         "none in /metrics (llama.cpp's server also reports draft_n / draft_n_accepted per request)"),
    ]
    return pd.DataFrame(rows, columns=["what", "this server"])


def timeline_rows(tl: RequestTimeline) -> list[tuple[str, str, str]]:
    """(label, value, how it was obtained) for the metric row above the timeline."""
    return [
        ("Time to first token", f"{tl.ttft_s * 1000:.0f} ms", "Measured: request sent \u2192 first chunk with text."),
        ("Time per output token", fmt(tl.tpot_s * 1000, ".1f", " ms"),
         f"Derived: (last chunk \u2212 first chunk) / tokens after the first; tokens from {tl.token_source}."),
        ("Tokens / s (decode)", fmt(tl.decode_tok_s), "Derived: 1 / time per output token."),
        ("Tokens / s (whole request)", fmt(tl.overall_tok_s), "Derived: tokens / (sent \u2192 last chunk)."),
    ]


def server_rows(tl: RequestTimeline) -> list[tuple[str, str, str]]:
    """The server's own clock beside the client's (llama.cpp's timings); empty when the server sent none."""
    sp = server_split(tl)
    if not sp:
        return []
    rows = [
        ("Server prompt time", f"{sp['server_prompt_ms']:.0f} ms",
         f"The server's own timings.prompt_ms for {sp.get('prompt_n')} prompt tokens "
         f"({sp.get('cache_n') or 0} more served from its cache)."),
        ("Outside the server's prompt time", f"{sp['outside_ms']:.0f} ms",
         "Derived: time to first token (client) \u2212 server prompt time: queueing for a slot, HTTP and JSON, "
         "transport, the first token's sampling."),
    ]
    if "server_predicted_ms" in sp:
        rows.append(("Server generation time", f"{sp['server_predicted_ms']:.0f} ms",
                     f"timings.predicted_ms for {sp.get('predicted_n')} tokens; the client saw "
                     f"{sp['client_stream_ms']:.0f} ms from the first chunk to the last."))
    t = tl.server_timings or {}
    if "draft_n" in t:
        rows.append(("Drafted / accepted", f"{t.get('draft_n')} / {t.get('draft_n_accepted')}",
                     "timings.draft_n and draft_n_accepted: this request's speculative drafts."))
    return rows


def names_table() -> pd.DataFrame:
    """engine.serving.names as a table: which names each engine uses, and where each row's names come from."""
    return pd.DataFrame(N.rows())


def concurrency_table(cs: ConcurrencySweep) -> pd.DataFrame:
    rows = []
    for lv in cs.levels:
        kv = [s.kv_usage for s in lv.metrics if s.kv_usage is not None]
        rows.append({
            "parallel requests": lv.concurrency,
            "throughput (tokens/s)": round(lv.throughput_tok_s, 1),
            "latency per request, median (s)": round(lv.latency_s.median, 2),
            "latency range (s)": f"{lv.latency_s.lo:.2f} to {lv.latency_s.hi:.2f}",
            "TTFT median (ms)": round(lv.ttft_s.median * 1000),
            "TPOT median (ms)": round(lv.tpot_s.median * 1000, 1) if math.isfinite(lv.tpot_s.median) else None,
            "peak KV cache used": f"{max(kv):.1%}" if kv else "missing",
            "server prompt time, median (ms)": _median_split(lv, "server_prompt_ms"),
            "TTFT outside it, median (ms)": _median_split(lv, "outside_ms"),
            "failed": lv.failed,
        })
    return pd.DataFrame(rows)


def _median_split(lv, key: str):
    xs = sorted(sp[key] for sp in (server_split(r) for r in lv.requests) if sp)
    return round(xs[len(xs) // 2]) if xs else "missing"


def spec_text(cs: ConcurrencySweep) -> str:
    d = M.spec_delta(cs.metrics_before, cs.metrics_after)
    t = M.timings_spec([r for lv in cs.levels for r in lv.requests])
    parts = []
    if d:
        if d.get("drafted"):
            parts.append(f"during the sweep the server drafted **{d['drafted']:.0f}** tokens and accepted "
                         f"**{d['accepted']:.0f}** (acceptance {fmt(d['acceptance'] * 100, '.0f', ' %')}, "
                         "from the /metrics counters before and after)")
        if "mean_accept_length" in d:
            parts.append(f"mean accepted length **{d['mean_accept_length']:.2f}** tokens per verification step "
                         "(SGLang's gauge at the end of the sweep)")
    if t:
        parts.append(f"the requests' own timings say **{t['drafted']}** tokens drafted and **{t['accepted']}** "
                     f"accepted (acceptance {fmt(t['acceptance'] * 100, '.0f', ' %')})")
    if d and d.get("drafted") and d.get("accepted_per_pos"):
        parts.append("accepted per draft position: " + ", ".join(f"{x:.0f}" for x in d["accepted_per_pos"]))
    if not parts:
        if d is not None and "drafted" in d:
            return ("This server exports speculative-decoding counters, and they did not move during the sweep: "
                    "it was not started with a draft model or n-gram drafting (llama-server: -md, --spec-type).")
        return ("This server reports no speculative-decoding counters: either it does not draft (the usual case), "
                "or it does not expose the counts. vLLM exports vllm:spec_decode_* counters, SGLang "
                "sglang:spec_accept_length, llama.cpp's server llamacpp:spec_decode_* in /metrics and draft_n / "
                "draft_n_accepted in each reply's timings.")
    return "Speculative decoding: " + "; ".join(parts) + "."
