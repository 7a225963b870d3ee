"""What a serving run measured (engine/batching/experiment.py): each request's times and tokens, each forward pass,
the run's metrics, a decode sweep's and a load sweep's points. Plain records (numpy, no torch), so the class view
draws the worker's batches with the same charts."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RequestRecord:
    rid: int
    prompt: str
    prompt_tokens: int
    max_new_tokens: int
    arrival_s: float
    admitted_s: float  # its prefill started
    first_token_s: float  # its prefill ended: first token ready
    done_s: float  # its last token ready
    released_s: float  # its batch slot freed (static: when the whole batch ends)
    token_ids: tuple[int, ...]

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def latency_s(self) -> float:
        """Arrival to last token."""
        return self.done_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first."""
        n = len(self.token_ids)
        return (self.done_s - self.first_token_s) / (n - 1) if n > 1 else float("nan")


@dataclass(frozen=True)
class StepEvent:
    """One forward pass of the server (timed after a device sync)."""

    phase: str  # "prefill" | "decode"
    start_s: float
    end_s: float
    rids: tuple[int, ...]  # the request in each batch row
    useful_rows: int  # rows whose token someone still needs
    tokens_in: int  # positions fed to the model, padding included
    pad_tokens: int  # of those, padding (prefill: left padding; decode: rows of finished requests)
    kv_bytes: int  # measured from the cache tensors after this pass (batch cache, padding included)
    kv_real_tokens: int  # cached positions that are not padding, over all rows


@dataclass(frozen=True)
class ServeResult:
    policy: str
    model: str
    max_batch: int
    batch_timeout_s: float
    requests: tuple[RequestRecord, ...]
    steps: tuple[StepEvent, ...]
    wall_s: float
    kv_bytes_per_token: int  # formula: 2 x layers x kv_heads x head_dim x bytes per value

    def metrics(self) -> dict:
        reqs = self.requests
        lat = np.array([r.latency_s for r in reqs])
        ttft = np.array([r.ttft_s for r in reqs])
        tokens = sum(len(r.token_ids) for r in reqs)
        end = max((r.done_s for r in reqs), default=0.0)
        dec = [s for s in self.steps if s.phase == "decode"]
        pre = [s for s in self.steps if s.phase == "prefill"]
        slots = sum(len(s.rids) for s in dec)
        wasted = sum(s.pad_tokens for s in dec)
        return {
            "policy": self.policy, "requests": len(reqs), "tokens": tokens, "makespan_s": end,
            "throughput_tok_s": tokens / end if end > 0 else float("nan"),
            "mean_latency_s": float(lat.mean()) if len(lat) else float("nan"),
            "p90_latency_s": float(np.percentile(lat, 90)) if len(lat) else float("nan"),
            "mean_ttft_s": float(ttft.mean()) if len(ttft) else float("nan"),
            "p90_ttft_s": float(np.percentile(ttft, 90)) if len(ttft) else float("nan"),
            "forward_passes": len(self.steps), "decode_steps": len(dec), "prefills": len(pre),
            "decode_slots": slots, "wasted_decode_slots": wasted,
            "wasted_fraction": wasted / slots if slots else 0.0,
            "prefill_tokens": sum(s.tokens_in for s in pre), "prefill_pad_tokens": sum(s.pad_tokens for s in pre),
            "mean_batch": slots / len(dec) if dec else 0.0,
            "peak_kv_bytes": max((s.kv_bytes for s in self.steps), default=0),
            "busy_s": sum(s.end_s - s.start_s for s in self.steps),
        }


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    step_seconds: np.ndarray = field(repr=False)  # every timed decode step
    context_tokens: int  # tokens in each row's cache when the timed steps began
    kv_bytes: int  # measured after the last step
    timed_steps: int

    @property
    def median_s(self) -> float:
        return float(np.median(self.step_seconds))

    @property
    def p10_s(self) -> float:
        return float(np.percentile(self.step_seconds, 10))

    @property
    def p90_s(self) -> float:
        return float(np.percentile(self.step_seconds, 90))

    @property
    def tokens_per_s(self) -> float:
        return self.batch / self.median_s


@dataclass(frozen=True)
class LoadPoint:
    """One probe request ("you") served among background traffic arriving at ``rate_per_s`` (0 = alone)."""

    rate_per_s: float
    background: int  # other requests in the run
    probe: RequestRecord
    mean_batch_while_decoding: float  # rows per decode step during the probe's decode
    step_ms_while_decoding: float  # median wall time of those decode steps
