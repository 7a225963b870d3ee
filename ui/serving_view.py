"""Small view helpers for the serving page: literal text in markdown, the 'what this server offers' table, and
the numbers that go with each figure. No figures here (ui.serving_figures) and no runs (ui.serving_runs)."""
from __future__ import annotations

import math
import re

import pandas as pd

from engine.serving import metrics as M
from engine.serving.measure import ConcurrencySweep, RequestTimeline
from engine.serving.probe import ServerInfo

_MD = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def literal(text: str) -> str:
    """Text shown as itself inside Streamlit markdown (server messages and model names are not markup)."""
    return _MD.sub(r"\\\1", str(text))


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
        ("Prometheus /metrics", f"yes, {o.n_families} metric families" if o.has_metrics else "no (404)"),
        ("KV-cache usage", o.kv_usage or no),
        ("Running requests", o.running or no),
        ("Waiting requests", o.waiting or no),
        ("Speculative decoding counters", ", ".join(o.spec) if o.spec else
         "none in /metrics (llama.cpp's server reports draft_n / draft_n_accepted per request instead)"),
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
            "peak KV cache used": f"{max(kv):.1%}" if kv else "not reported",
            "failed": lv.failed,
        })
    return pd.DataFrame(rows)


def spec_text(cs: ConcurrencySweep) -> str:
    d = M.spec_delta(cs.metrics_before, cs.metrics_after)
    t = M.timings_spec([r for lv in cs.levels for r in lv.requests])
    parts = []
    if d:
        if "drafted" in d:
            parts.append(f"during the sweep the server drafted **{d['drafted']:.0f}** tokens and accepted "
                         f"**{d['accepted']:.0f}** (acceptance {fmt(d['acceptance'] * 100, '.0f', ' %')}, "
                         "from the /metrics counters before and after)")
        if "mean_accept_length" in d:
            parts.append(f"mean accepted length **{d['mean_accept_length']:.2f}** tokens per verification step "
                         "(SGLang's gauge at the end of the sweep)")
    if t:
        parts.append(f"the requests' own timings say **{t['drafted']}** tokens drafted and **{t['accepted']}** "
                     f"accepted (acceptance {fmt(t['acceptance'] * 100, '.0f', ' %')})")
    if not parts:
        return ("This server reports no speculative-decoding counters: either it does not draft (the usual case), "
                "or it does not expose the counts. vLLM exports vllm:spec_decode_* counters, SGLang "
                "sglang:spec_accept_length, llama.cpp's server draft_n / draft_n_accepted in each reply's timings.")
    return "Speculative decoding: " + "; ".join(parts) + "."
