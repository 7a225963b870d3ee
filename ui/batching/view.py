"""Display values for the batching page: its settings as one value, and the captions, ratios and tables drawn
from the measured runs (the page and ui/batching/sections.py only lay them out). Pure: no st.*."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.batching.workload import WorkloadSettings
from engine.predictions.records import batch_verdict
from ui.frame.lessons import lesson


@dataclass(frozen=True)
class Settings:
    """What the settings expander chose."""

    ws: WorkloadSettings
    max_batch: int
    timeout: float  # static batching: longest wait for a full batch (s)
    sizes: tuple[int, ...]  # batch sizes of the decode-step sweep, sorted (never empty)

    @property
    def rates(self) -> tuple[float, float, float]:
        """Background traffic of the quiet-vs-busy section: none, the chosen rate, three times it."""
        return 0.0, self.ws.rate_per_s, self.ws.rate_per_s * 3

    def key(self, ref) -> tuple:
        """What the results depend on (``ref``: the model's engine.core.loaded.ModelRef): a new key asks for the
        button again."""
        return ref, self.ws, self.max_batch, self.timeout, self.sizes


def workload_caption(ws: WorkloadSettings, reqs) -> str:
    lens = [len(r.prompt_ids) for r in reqs]
    return (f"Generated from the settings, not measured: arrival gaps drawn from an exponential distribution (Poisson "
            f"arrivals, mean {ws.rate_per_s:g} per second, seed {ws.seed}), token counts uniform from "
            f"{ws.min_new_tokens} to {ws.max_new_tokens}. The prompts are short questions ({min(lens)} to {max(lens)} "
            f"tokens with the chat template). Hover for the prompt.")


def one_user(sweep) -> str:
    """How the step time and the tokens per second grew from the smallest batch to the largest."""
    b1, last = sweep[0], sweep[-1]
    return lesson("batching", "one user", b1=b1.batch, last=last.batch, step_ratio=last.median_s / b1.median_s,
                  tps_ratio=last.tokens_per_s / b1.tokens_per_s)


def step_caption(sweep) -> str:
    return (f"Median of {sweep[0].timed_steps} decode steps after 2 warm-up steps; whiskers 10th to 90th percentile. "
            f"Every row has the same {sweep[0].context_tokens}-token context.")


# row label -> how one policy's metrics() show in it
_ROWS = {
    "throughput (tokens/s)": lambda m: f"{m['throughput_tok_s']:.1f}",
    "mean latency (s)": lambda m: f"{m['mean_latency_s']:.2f}",
    "p90 latency (s)": lambda m: f"{m['p90_latency_s']:.2f}",
    "mean time to first token (s)": lambda m: f"{m['mean_ttft_s']:.2f}",
    "p90 time to first token (s)": lambda m: f"{m['p90_ttft_s']:.2f}",
    "forward passes (prefills + decode steps)": lambda m: f"{m['forward_passes']} ({m['prefills']} + {m['decode_steps']})",
    "mean rows per decode step": lambda m: f"{m['mean_batch']:.2f}",
    "wasted decode rows": lambda m: f"{m['wasted_decode_slots']} of {m['decode_slots']} ({m['wasted_fraction']:.0%})",
    "prompt padding (tokens)": lambda m: f"{m['prefill_pad_tokens']} of {m['prefill_tokens']}",
    "peak KV cache (KiB)": lambda m: f"{m['peak_kv_bytes'] / 1024:.0f}",
}


def policy_table(results) -> pd.DataFrame:
    """One column per policy, one row per metric."""
    metrics = [r.metrics() for r in results]
    return pd.DataFrame({m["policy"]: [f(m) for f in _ROWS.values()] for m in metrics}, index=list(_ROWS))


def policies_caption(results) -> str:
    """How the table was measured, and whether both policies gave every request the same tokens."""
    same = all(a.token_ids == b.token_ids for a, b in zip(results[0].requests, results[1].requests))
    return lesson("batching", "policies caption", same=lesson("batching", "same tokens" if same else "different tokens"))


def x_max(results) -> float:
    """The common right edge of the policies' timelines: the last slot released."""
    return max(rr.released_s for r in results for rr in r.requests)


def load_text(load, rates) -> str:
    alone, busiest = load[0].probe, load[-1].probe
    return lesson("batching", "load", tokens=len(alone.token_ids), prompt=alone.prompt, background=load[1].background,
                  rate=rates[1], busy_rate=rates[2], alone=alone.latency_s, busiest=busiest.latency_s)


def load_caption(load) -> str:
    return ("Your latency split into time to first token (waiting, then your prompt pass) and decoding; 'batch' = "
            "mean rows in the decode steps you were part of. " + ("Your tokens were identical in every run."
            if len({p.probe.token_ids for p in load}) == 1 else "Your tokens differed between runs."))


def verdict(sweep):
    """Which choice of the page's question this batch sweep decides (None: not measured yet)."""
    return batch_verdict(sweep)
