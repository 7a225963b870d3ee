"""Honest wall-clock timing: synchronise the device before reading the clock; keep every run on the same
number of CPU threads."""
from __future__ import annotations

import time

import torch

from engine.measure.threads import apply_policy, rule_for_every_pass


def sync(device: torch.device | str | None = None) -> None:
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize()


def now(device=None) -> float:
    sync(device)
    return time.perf_counter()


def timed_generate(lm, ids: list[int], config) -> tuple[float, list[int]]:
    """transformers' ``model.generate`` on one prompt with ``config`` (a GenerationConfig), under the engine's thread
    rule for small passes (as engine.core.loop runs its own), timed after a device sync: (seconds, new token ids)."""
    with torch.inference_mode():
        x = torch.tensor([ids], device=lm.device)  # [1, prompt]
        t0 = now(lm.device)
        with rule_for_every_pass(lm.model):
            out = lm.model.generate(x, generation_config=config, attention_mask=torch.ones_like(x))
        seconds = now(lm.device) - t0
    return seconds, out[0, len(ids):].tolist()


def configure_worker_threads() -> None:
    """Called once, on the engine worker's thread, when it starts: every forward pass of the process runs there
    under the measured thread policy (engine/measure/threads.py), and nothing changes it later."""
    apply_policy()
